"""Launching chapter 6's Triton kernels (:mod:`attention_course.kernels.flash_kernels`) from PyTorch:
:func:`triton_attention` checks its arguments, picks tile sizes from the head size and the dtype
(:func:`tile_sizes`), compiles the kernels at the first call (:func:`kernels_for`) and wraps them in an autograd
function, the forward kernel for the values and the delta, dK/dV and dQ kernels for the gradients.

**Without a GPU.** With ``TRITON_INTERPRET=1`` set before triton is first imported (this module imports it at
the first call), Triton runs the same kernels in its numpy interpreter on CPU tensors, exact enough to test
against ``F.scaled_dot_product_attention``; :mod:`attention_course.kernels.aot` compiles them for an NVIDIA
architecture without one, to show that they compile and how much shared memory their tiles take.
"""

from __future__ import annotations

import functools
import os
import re
from types import SimpleNamespace
from typing import Any

import torch

from .._checks import (
    causal_offset,
    check_flag,
    check_int,
    check_real,
    check_same_device,
    check_tensor,
    describe,
)
from ..tiled import TiledOutput
from . import flash_kernels

__all__ = ["interpreting", "triton_attention"]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_LAYOUTS = {"q": "(batch, heads, n_q, d)", "k": "(batch, heads, n_k, d)", "v": "(batch, heads, n_k, d)"}
MAX_HEAD_DIM = 256


# ---------------------------------------------------------------------------------------------------------------
# Compiling and launching
# ---------------------------------------------------------------------------------------------------------------


def interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for Triton's CPU interpreter (read as triton reads it)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


@functools.cache
def kernels_for(interpret: bool) -> SimpleNamespace:
    """The three kernels through ``triton.jit`` (which reads ``TRITON_INTERPRET`` now: hence one set per mode),
    and triton's error for a tile that does not fit the GPU."""
    try:
        import triton
        import triton.language
        from triton.runtime.errors import OutOfResources
    except ImportError as error:
        raise ImportError(
            "triton_attention must have triton, got no module named triton: it has wheels for Linux only "
            "(pip install triton); on other systems use attention_course.flash.flash_attention") from error
    flash_kernels.tl = triton.language
    # triton.jit reads TRITON_INTERPRET when it decorates, triton's own library (tl.cdiv, tl.sigmoid, ...) as well:
    # that was decorated when triton was first imported, and the two must agree.
    library_interpreted = type(triton.language.standard.cdiv).__name__ == "InterpretedFunction"
    if library_interpreted != interpret:
        now = "set" if interpret else "unset"
        raise RuntimeError(f"TRITON_INTERPRET must be set (or unset) before triton is first imported, got it {now} "
                           f"after triton was imported {'without' if interpret else 'with'} it: restart Python")
    # The kernels call the helpers by their module-level names: those must be jitted too, before any launch.
    for name, helper in flash_kernels.HELPERS.items():
        setattr(flash_kernels, name, triton.jit(helper))
    return SimpleNamespace(forward=triton.jit(flash_kernels.forward_kernel), dkdv=triton.jit(flash_kernels.dkdv_kernel),
                           dq=triton.jit(flash_kernels.dq_kernel), delta=triton.jit(flash_kernels.delta_kernel),
                           OutOfResources=OutOfResources)


def tile_sizes(d: int, dtype: torch.dtype, block_q: int | None, block_k: int | None) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D, num_warps) for head size ``d`` and the inputs' dtype: smaller tiles for larger
    heads and for float32, so that a program's tiles fit a GPU's shared memory (compiled for sm_80, 16-bit
    d = 64 on 128 × 64 tiles uses 24 KiB in the forward kernel and 66 KiB in the dK, dV kernel). A tile that
    still does not fit the GPU at hand is halved at launch (:func:`_launch`)."""
    block_d = max(16, 1 << (d - 1).bit_length())  # tl.dot wants every side a power of two ≥ 16
    wide = dtype == torch.float32
    if block_d <= 64:
        m, n = (64, 32) if wide else (128, 64)
    elif block_d <= 128:
        m, n = (32, 32) if wide else (64, 64)
    else:
        m, n = (16, 16) if wide else (32, 32)
    return block_q or m, block_k or n, block_d, 4


def halve_tiles(block_m: int, block_n: int) -> tuple[int, int]:
    """The next smaller tiles to try when a launch runs out of shared memory: the larger side halved (the key
    side first). :func:`attention_course.kernels.aot.tiles_for_gpu` follows the same steps ahead of time."""
    return (block_m, block_n // 2) if block_n >= block_m else (block_m // 2, block_n)


#: (kernel, device, dtype, d, tiles asked for) → the tiles that fitted, so that a GPU too small for the default
#: tiles pays for the failed launches once.
_FITTED: dict[tuple, tuple[int, int]] = {}


#: Candidate (BLOCK_M, BLOCK_N, num_warps, num_stages) per padded head size for ``autotune=True`` on a GPU,
#: timed at the first launch of each kernel, dtype and mask: the default tiles first, then larger and smaller
#: ones, more warps, deeper software pipelines (the settings FlashAttention's Triton ports tune over).
CANDIDATES = {
    64: ((128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 4), (64, 64, 4, 3), (128, 32, 4, 4), (64, 128, 4, 2)),
    128: ((64, 64, 4, 3), (128, 64, 8, 3), (128, 32, 8, 3), (64, 32, 4, 4), (128, 128, 8, 2)),
    256: ((32, 32, 4, 2), (64, 32, 8, 2), (64, 64, 8, 2), (32, 16, 4, 3)),
}
#: (kernel, device, dtype, d, mask kind) → the candidate ``autotune`` found fastest.
_TUNED: dict[tuple, tuple[int, int, int, int]] = {}


def fastest(candidates: tuple, run: Any, timer: Any, too_large: type[Exception]) -> tuple:
    """The candidate whose ``run(candidate)`` ``timer`` measures fastest (``timer(fn)`` → seconds); candidates
    whose launch raises ``too_large`` (tiles beyond the GPU's shared memory) are skipped. Raises ``too_large`` if
    every one does."""
    times = {}
    for candidate in candidates:
        try:
            run(candidate)  # compiles, and fails here if the tiles do not fit
        except too_large:
            continue
        times[candidate] = timer(lambda c=candidate: run(c))
    if not times:
        raise too_large(0, 0, "shared memory")
    return min(times, key=times.get)


def _launch(name: str, rows: int, args: tuple, x: torch.Tensor, mask: tuple, blocks: tuple[int, ...],
            tune: bool = False) -> None:
    """Run kernel ``name`` over a grid of (tiles of ``rows``, batch · query heads); ``rows`` is counted in BLOCK_M
    (forward, dQ) or BLOCK_N (dK, dV) tiles; ``mask`` is ``(heads, group, offset, window)`` (offset None: not
    causal; window None: no window). On triton's OutOfResources (the tiles need more shared memory than this GPU
    has), halve the larger tile and try again, down to 16 × 16. ``tune`` (on a GPU): time :data:`CANDIDATES` at
    the first launch per kernel, dtype, head size and mask kind, and keep the fastest."""
    kernels = kernels_for(interpreting())
    block_m, block_n, block_d, warps = blocks
    heads, group, offset, window = mask
    args = (*args, heads, group, offset or 0, window or 0)
    flags = {"CAUSAL": offset is not None, "WINDOWED": window is not None}
    grid = lambda m, n: (-(-rows // (n if name == "dkdv" else m)), x.shape[0] * x.shape[1])  # noqa: E731
    if tune and x.device.type == "cuda" and not interpreting():
        key = (name, x.device, x.dtype, block_d, *flags.values())
        if key not in _TUNED:
            import triton.testing

            def run(c: tuple) -> None:
                getattr(kernels, name)[grid(c[0], c[1])](*args, **flags, BLOCK_M=c[0], BLOCK_N=c[1],
                                                          BLOCK_D=block_d, num_warps=c[2], num_stages=c[3])

            _TUNED[key] = fastest(CANDIDATES[block_d if block_d >= 64 else 64], run,
                                  lambda fn: triton.testing.do_bench(fn, warmup=5, rep=20), kernels.OutOfResources)
        m, n, w, stages = _TUNED[key]
        getattr(kernels, name)[grid(m, n)](*args, **flags, BLOCK_M=m, BLOCK_N=n, BLOCK_D=block_d, num_warps=w,
                                           num_stages=stages)
        return
    key = (name, x.device, x.dtype, block_d, block_m, block_n)
    block_m, block_n = _FITTED.get(key, (block_m, block_n))
    while True:
        options = {**flags, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_D": block_d}
        if not interpreting():
            options["num_warps"] = warps
        try:
            getattr(kernels, name)[grid(block_m, block_n)](*args, **options)
        except kernels.OutOfResources:
            if max(block_m, block_n) <= 16:
                raise
            block_m, block_n = halve_tiles(block_m, block_n)
            continue
        _FITTED[key] = (block_m, block_n)
        return


def _delta(out: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """``D = rowsum(dO ∘ O)`` in float32, ``(batch, heads, n_q)``, by :func:`flash_kernels.delta_kernel`."""
    rows, d = out.numel() // out.shape[-1], out.shape[-1]
    delta = torch.empty(out.shape[:-1], dtype=torch.float32, device=out.device)
    block_d = tile_sizes(d, out.dtype, None, None)[2]
    block_m = 64 if block_d <= 128 else 32
    kernels_for(interpreting()).delta[(-(-rows // block_m),)](out, grad_out, delta, rows, d, BLOCK_M=block_m,
                                                              BLOCK_D=block_d)
    return delta


class _TritonAttention(torch.autograd.Function):
    """Saves (Q, K, V, O, lse), as flash.flash_attention does; backward runs the delta, dK/dV and dQ kernels."""

    @staticmethod
    def forward(ctx: Any, q, k, v, scale, mask, blocks, tune):  # noqa: ANN001, ANN205 -- autograd API
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        batch, heads, n_q, d = q.shape
        n_k = k.shape[2]
        out = torch.empty_like(q)
        lse = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
        qk_scale = scale * 1.4426950408889634  # scale · log₂e: the kernel's softmax is in base 2
        _launch("forward", n_q, (q, k, v, out, lse, qk_scale, n_q, n_k, d), q, mask, blocks, tune)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (scale, mask, blocks, tune)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable  # the kernels have no backward of their own
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_lse: torch.Tensor):  # noqa: ANN205 -- autograd API
        q, k, v, out, lse = ctx.saved_tensors
        scale, mask, blocks, tune = ctx.options
        (batch, heads, n_q, d), kv_heads, n_k = q.shape, k.shape[1], k.shape[2]
        grad_out = grad_out.contiguous()
        delta = _delta(out, grad_out)
        dq = torch.empty_like(q)
        # dK, dV per query head; with grouped keys and values, summed over each group in float32 afterwards
        per_head = (batch, heads, n_k, d)
        dk, dv = (torch.empty(per_head, dtype=q.dtype if heads == kv_heads else torch.float32, device=q.device)
                  for _ in "kv")
        _launch("dkdv", n_k, (q, k, v, grad_out, lse, delta, dk, dv, scale, n_q, n_k, d), q, mask, blocks, tune)
        _launch("dq", n_q, (q, k, v, grad_out, lse, delta, dq, scale, n_q, n_k, d), q, mask, blocks, tune)
        if heads != kv_heads:
            dk, dv = (g.view(batch, kv_heads, heads // kv_heads, n_k, d).sum(2).to(k.dtype) for g in (dk, dv))
        return dq, dk, dv, None, None, None, None


#: The first Triton whose CPU interpreter runs the kernels' loops under NumPy 2.4 (older ones int() an array).
INTERPRETER_NUMPY24 = (3, 9)
_version = lambda text: tuple(int(p) for p in re.findall(r"\d+", text)[:2])  # noqa: E731 -- "3.6.0" -> (3, 6)


def _check_interpreter(dtype: torch.dtype) -> None:
    """Refuse, with the reason, what Triton's CPU interpreter would get silently wrong or fail on deep inside.

    NumPy, which the interpreter computes with, has no bfloat16 (Triton 3.9 returned values off by 8e8, no error);
    and before Triton 3.9 the interpreter fails on the kernels' loops under NumPy ≥ 2.4."""
    if dtype == torch.bfloat16:
        raise TypeError("q must be float32 or float16 under Triton's CPU interpreter (TRITON_INTERPRET=1), got "
                        "bfloat16: the interpreter computes with NumPy, which has no bfloat16, and returns wrong "
                        "values; bfloat16 runs on a GPU")
    import numpy
    try:
        import triton
    except ImportError:
        return  # the launch says that triton is missing, and where it has wheels
    if _version(triton.__version__) < INTERPRETER_NUMPY24 and _version(numpy.__version__) >= (2, 4):
        raise RuntimeError(f"triton must be ≥ {'.'.join(map(str, INTERPRETER_NUMPY24))} to interpret the kernels on "
                           f"the CPU with NumPy {numpy.__version__}, got triton {triton.__version__}, whose "
                           "interpreter converts loop bounds in a way NumPy 2.4 refuses; use NumPy < 2.4 or a GPU")


def check_tile(name: str, value: object) -> int | None:
    if value is None:
        return None
    value = check_int(name, value, low=16)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two ≥ 16 (Triton's tiles are), got {value}")
    return value


def triton_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool | str = False,
    scale: float | None = None,
    *,
    window: int | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    autotune: bool = False,
) -> TiledOutput:
    r"""softmax(Q Kᵀ · scale) V by FlashAttention-2's Triton kernels, forward and backward (chapter 6).

    Args:
        q: queries ``(batch, heads, n_q, d)``; k, v: keys and values ``(batch, kv_heads, n_k, d)``, where
            ``kv_heads`` divides ``heads`` (grouped-query attention: query head ``h`` reads key-value head
            ``h // (heads // kv_heads)``; ``kv_heads = heads`` is ordinary multi-head attention). One floating
            dtype (float32, float16 or bfloat16), on a CUDA device — or on the CPU when ``TRITON_INTERPRET=1``
            was set before triton was first imported (at the latest, before the first call).
        causal: the causal mask, its alignment named as :func:`attention_course.masks.causal_mask` names it:
            ``True`` or ``"upper_left"`` (query ``i`` sees keys ``j ≤ i``, as ``is_causal``), ``"lower_right"``
            (the queries are the last ``n_q`` positions, as new tokens after a KV cache: ``j ≤ i + n_k − n_q``;
            with ``n_q > n_k`` the first queries see no key and give zeros), or ``False``.
        scale: multiplies the scores; default :math:`1/\sqrt{d}`.
        window: a sliding window (causal only): each query also sees no key more than ``window − 1`` positions
            before it, ``j > i + offset − window`` — the mask of ``causal_mask(..., window=window)``. Tiles
            outside the window are skipped, so the cost grows as ``n · window``, not ``n²``.
        block_q, block_k: tile sizes (powers of two ≥ 16); by default chosen from ``d`` and the dtype. On a GPU
            whose shared memory they overflow, they are halved until they fit.
        autotune: on a CUDA device, time the tile sizes, warps and pipeline depths of :data:`CANDIDATES` at the
            first call per kernel, dtype, head size and mask kind (a few seconds, once per process), and use the
            fastest from then on, instead of ``block_q``/``block_k``; ignored on the CPU.

    Returns:
        :class:`~attention_course.tiled.TiledOutput` ``(output, lse)``: the output in ``q``'s dtype and each row's
        log-sum-exp in float32, which carries no gradient (a row that sees no key: zero output, ``lse = -inf``).
        Scores, softmax and sums are float32; for 16-bit inputs the weights are rounded to 16 bits before they
        multiply V, as fused kernels do. On a GPU, float32 products may run in TF32 (Triton's default for
        ``tl.dot``).

    Raises:
        TypeError: a non-tensor, a dtype outside those three or unlike ``q``'s, a window that is not an integer;
            bfloat16 under the CPU interpreter (NumPy has no bfloat16: the interpreter's answers would be wrong).
        ValueError: shapes that do not fit (``kv_heads`` not dividing ``heads`` among them), ``d > 256``, an empty
            tensor, tensors on different devices or on the CPU without ``TRITON_INTERPRET=1``, a bad block size,
            ``causal`` not one of the four values, a window below 1 or without ``causal``. ImportError: triton is
            not installed.
        RuntimeError: ``TRITON_INTERPRET`` was changed after triton was imported; the CPU interpreter of a triton
            older than 3.9 under NumPy ≥ 2.4 (it cannot run the kernels' loops).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, ndim=4, layout=_LAYOUTS[name])
        if t.dtype not in DTYPES:
            raise TypeError(f"{name} must be float32, float16 or bfloat16, got {describe(t)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have the dtype of q ({q.dtype}), got {t.dtype}")
    batch, heads, n_q, d = q.shape
    if k.shape[0] != batch or k.shape[3] != d or k.shape[1] == 0 or heads % k.shape[1]:
        raise ValueError(f"k must have shape (batch, kv_heads, n_k, d) = ({batch}, kv_heads, n_k, {d}) with kv_heads "
                         f"dividing q's {heads} heads, got {tuple(k.shape)}")
    if v.shape != k.shape:
        raise ValueError(f"v must have the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")
    if min(q.shape) == 0 or k.shape[2] == 0:
        raise ValueError(f"q and k must not be empty, got q of shape {tuple(q.shape)} and k of {tuple(k.shape)}")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"q must have a head size d ≤ {MAX_HEAD_DIM}, got d = {d}")
    device = check_same_device(("q", "k", "v"), (q, k, v))
    if device.type != "cuda" and not (device.type == "cpu" and interpreting()):
        raise ValueError(f"q must be on a CUDA device, or on the CPU with TRITON_INTERPRET=1 set before triton is "
                         f"imported, got a tensor on {device}")
    offset = causal_offset(causal, n_q, k.shape[2])
    if window is not None:
        window = check_int("window", window, low=1)
        if offset is None:
            raise ValueError(f"window must come with causal=True, 'upper_left' or 'lower_right' (a sliding window "
                             f"looks back from each query), got window = {window} with causal = {causal!r}")
    scale = d ** -0.5 if scale is None else check_real("scale", scale)
    autotune = check_flag("autotune", autotune)
    blocks = tile_sizes(d, q.dtype, check_tile("block_q", block_q), check_tile("block_k", block_k))
    if device.type == "cpu":  # the arguments first, then whether this machine's interpreter can run them
        _check_interpreter(q.dtype)
    out, lse = _TritonAttention.apply(q, k, v, scale, (heads, heads // k.shape[1], offset, window), blocks,
                                      autotune)
    return TiledOutput(out, lse)
