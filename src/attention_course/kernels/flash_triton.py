"""Launching chapter 6's Triton kernels (:mod:`attention_course.kernels.flash_kernels`) from PyTorch:
:func:`triton_attention` checks its arguments, picks each kernel's tiles, warps and pipeline depth from the GPU's
architecture, the head size and the dtype (:func:`tile_sizes`, :data:`DEFAULT_TILES`), compiles the kernels at the
first call (:func:`kernels_for`) and wraps them in an autograd function: the forward kernel for the values; the
delta, dK/dV and dQ kernels for the gradients (or, with ``deterministic=False``, the delta and a dK/dV kernel that
adds into dQ atomically). Every launch is a one-axis :func:`grid`.

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
from typing import Any, NamedTuple

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
MAX_LENGTH = 2**30
KERNELS = ("forward", "dkdv", "dq")


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


def arch_of(device: torch.device) -> int:
    """The compute capability × 10 of a CUDA device (90 for an H100); 80 for the CPU interpreter, whose tiles are
    an A100's."""
    if device.type != "cuda":
        return 80
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


class Tiles(NamedTuple):
    """How one kernel is launched: its tiles, warps and software-pipeline depth."""

    block_m: int  #: queries per tile (in every kernel: the program's own block in forward and dQ, the loop's in dK, dV)
    block_n: int  #: keys per tile (the loop's in forward and dQ, the program's own block in dK, dV)
    warps: int
    stages: int  #: how many tiles ahead the loop's loads are issued (Triton's num_stages)


T = Tiles  # the tables below, one line per entry

#: Default tiles on Hopper (sm_90) per inputs' width (16- or 32-bit) and padded head size (64 covers 16 and 32),
#: per kernel. 16-bit, d ≤ 64: a forward program of 128 queries against 128 keys a step (8 warps); dK, dV over 128
#: keys a program, 32 queries a step (the transposed form); dQ over 128 queries, 64 keys a step. Float32 tiles take
#: twice the bytes (and TF32 products): smaller.
_HOPPER: dict[tuple[int, int], dict[str, Tiles]] = {
    (16, 64): {"forward": T(128, 128, 8, 3), "dkdv": T(32, 128, 8, 3), "dq": T(128, 64, 8, 3)},
    (16, 128): {"forward": T(128, 32, 8, 3), "dkdv": T(32, 128, 8, 3), "dq": T(128, 32, 8, 3)},
    (16, 256): {"forward": T(64, 32, 8, 2), "dkdv": T(32, 32, 8, 2), "dq": T(64, 32, 8, 2)},
    (32, 64): {"forward": T(64, 32, 4, 3), "dkdv": T(32, 64, 4, 3), "dq": T(64, 32, 4, 3)},
    (32, 128): {"forward": T(32, 32, 4, 3), "dkdv": T(32, 32, 4, 3), "dq": T(32, 32, 4, 2)},
    (32, 256): {"forward": T(16, 16, 4, 2), "dkdv": T(16, 16, 4, 2), "dq": T(16, 16, 4, 2)},
}
#: Where Ampere (sm_80, and every GPU before Hopper) needs other tiles: its tensor-core products hold both operands
#: and the accumulator in registers, so Hopper's tiles spill there.
_AMPERE_CHANGES: dict[tuple[int, int], dict[str, Tiles]] = {
    (16, 128): {"dkdv": T(32, 64, 8, 3)},
    (16, 256): {"dkdv": T(16, 32, 8, 2)},
    (32, 64): {"forward": T(64, 32, 4, 2), "dkdv": T(32, 32, 4, 3), "dq": T(32, 32, 4, 3)},
    (32, 128): {"dkdv": T(32, 32, 8, 3)},
    (32, 256): {"dkdv": T(16, 16, 8, 2)},
}
#: Default tiles per (architecture: 90 or 80, width, padded head size), per kernel: chosen by compiling each kernel
#: with a launch's real specialisation (:func:`~attention_course.kernels.aot.compile_for_gpu`) so that none spills
#: registers to memory on sm_80 or sm_90 (``benchmarks/kernel_tiles.py`` records registers, spills and shared memory).
DEFAULT_TILES: dict[tuple[int, int, int], dict[str, Tiles]] = {
    (90, *key): tiles for key, tiles in _HOPPER.items()} | {
    (80, *key): tiles | _AMPERE_CHANGES.get(key, {}) for key, tiles in _HOPPER.items()}

#: Other tiles ``autotune=True`` tries per width and padded head size, beside the default: larger and smaller tiles,
#: fewer warps (compiled for sm_90, none of the 16-bit ones spills at d ≤ 128).
_ALTERNATIVES: dict[tuple[int, int], dict[str, tuple[Tiles, ...]]] = {
    (16, 64): {"forward": (T(128, 64, 8, 3), T(64, 64, 4, 3)), "dkdv": (T(64, 128, 8, 3), T(32, 64, 4, 3)),
               "dq": (T(128, 32, 8, 3), T(64, 64, 4, 3))},
    (16, 128): {"forward": (T(128, 64, 8, 3), T(64, 64, 4, 3)), "dkdv": (T(64, 64, 8, 3), T(32, 64, 4, 3)),
                "dq": (T(64, 64, 4, 3), T(64, 32, 4, 3))},
    (16, 256): {"forward": (T(32, 32, 4, 2),), "dkdv": (T(16, 32, 4, 2),), "dq": (T(32, 32, 4, 2),)},
    (32, 64): {"forward": (T(64, 64, 4, 3),), "dkdv": (T(32, 128, 8, 3),), "dq": (T(64, 64, 4, 3),)},
    (32, 128): {"forward": (T(64, 32, 4, 3),), "dkdv": (T(16, 64, 4, 3),), "dq": (T(64, 32, 8, 3),)},
    (32, 256): {"forward": (T(32, 16, 4, 2),), "dkdv": (T(16, 32, 4, 2),), "dq": (T(32, 16, 4, 2),)},
}
#: The candidates ``autotune=True`` times per architecture, width and head size, per kernel: the default first.
CANDIDATES: dict[tuple[int, int, int], dict[str, tuple[Tiles, ...]]] = {
    key: {name: tuple(dict.fromkeys((tiles, *_ALTERNATIVES[key[1:]][name]))) for name, tiles in defaults.items()}
    for key, defaults in DEFAULT_TILES.items()}


def _table_key(arch: int, dtype: torch.dtype, block_d: int) -> tuple[int, int, int]:
    return 90 if arch >= 90 else 80, 32 if dtype == torch.float32 else 16, min(max(block_d, 64), 256)


def padded_head(d: int) -> int:
    """The head size ``BLOCK_D`` a kernel computes with: ``d`` rounded up to a power of two, at least 16 (``tl.dot``
    wants every side so); the columns past ``d`` are masked to zero."""
    return max(16, 1 << (d - 1).bit_length())


def wide_buffers(atomic_dq: bool, grouped: bool) -> frozenset[str]:
    """The backward's gradient buffers the launcher allocates in float32 whatever the inputs' dtype (``lse`` and
    ``D`` are float32 always): ``"DQ"`` when the dK, dV kernel adds into it atomically, ``"DK"`` and ``"DV"`` when
    grouped heads are summed over each group afterwards. :func:`~attention_course.kernels.aot.compile_for_gpu`
    compiles with the same rule."""
    return frozenset(({"DQ"} if atomic_dq else set()) | ({"DK", "DV"} if grouped else set()))


def tile_sizes(kernel: str, d: int, dtype: torch.dtype, arch: int = 80, block_q: int | None = None,
               block_k: int | None = None) -> tuple[Tiles, int]:
    """The :class:`Tiles` kernel ``kernel`` ("forward", "dkdv" or "dq") is launched with for head size ``d``, the
    inputs' dtype and a GPU of compute capability ``arch`` × 10 (:data:`DEFAULT_TILES`), ``block_q``/``block_k``
    replacing the tiles' sides where given, and the padded head size ``BLOCK_D`` (``tl.dot`` wants every side a
    power of two ≥ 16). A tile that does not fit the GPU at hand is halved at launch (:func:`_launch`)."""
    block_d = padded_head(d)
    tiles = DEFAULT_TILES[_table_key(arch, dtype, block_d)][kernel]
    return tiles._replace(block_m=block_q or tiles.block_m, block_n=block_k or tiles.block_n), block_d


def halve_tiles(block_m: int, block_n: int) -> tuple[int, int]:
    """The next smaller tiles to try when a launch runs out of shared memory: the larger side halved (the key
    side first). :func:`attention_course.kernels.aot.tiles_for_gpu` follows the same steps ahead of time."""
    return (block_m, block_n // 2) if block_n >= block_m else (block_m // 2, block_n)


#: The most programs one launch may have: the grid is one axis, whose limit is 2³¹ − 1 (CUDA's grid axes 1 and 2
#: stop at 65,535, which batch × heads would pass first).
MAX_PROGRAMS = 2**31 - 1


#: One head's ``n · d`` from which the kernels compute their offsets ``position · d`` in int64 (int32's wrap at 2³¹).
INT64_FROM = 2**31


def needs_int64(n_q: int, n_k: int, d: int) -> bool:
    """Whether the kernels must compute offsets within a head in int64 (``LONG``): int32 is cheaper in registers
    and address arithmetic, and enough below :data:`INT64_FROM` elements a head."""
    return max(n_q, n_k) * d >= INT64_FROM


def grid(rows: int, block: int, batch_heads: int) -> tuple[int]:
    """The one-axis grid of a kernel that gives each program ``block`` of ``rows`` positions of one of
    ``batch_heads`` (batch, head) pairs. Raises ValueError beyond :data:`MAX_PROGRAMS`."""
    programs = -(-rows // block) * batch_heads
    if programs > MAX_PROGRAMS:
        raise ValueError(f"q must need at most {MAX_PROGRAMS} programs of {block} positions (2³¹ − 1, the GPU's grid "
                         f"limit), got {-(-rows // block)} blocks × {batch_heads} batch × heads = {programs}")
    return (programs,)


#: (kernel, device, dtype, d, the kernel's flags, tiles asked for) → the tiles that fitted, so that a GPU too small
#: for the default tiles pays for the failed launches once.
_FITTED: dict[tuple, tuple[int, int]] = {}
#: (kernel, device, dtype, d, mask kind, length bucket) → the candidate ``autotune`` found fastest.
_TUNED: dict[tuple, Tiles] = {}


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


def length_bucket(n: int) -> int:
    """The power of two at or above ``n`` (at least 1024): ``autotune`` times once per bucket, since the best
    tiles for 1,000 positions are not those for 16,000."""
    return max(1024, 1 << (n - 1).bit_length())


def _tunes(x: torch.Tensor) -> bool:
    """Whether ``autotune`` times candidates for ``x``: on a CUDA device, compiled (not interpreted)."""
    return x.device.type == "cuda" and not interpreting()


def _time(fn: Any) -> float:
    """Seconds ``fn`` takes on the GPU, by triton's ``do_bench`` (which calls it many times)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=5, rep=20)


def _launch(name: str, rows: int, args: tuple, x: torch.Tensor, mask: tuple, flags: dict, tiles: Tiles,
            block_d: int, tune: bool = False, zeroed: torch.Tensor | None = None) -> None:
    """Run kernel ``name`` over a grid of (tiles of ``rows``) × (batch · query heads); ``rows`` is counted in
    BLOCK_M (forward, dQ) or BLOCK_N (dK, dV) tiles; ``mask`` is ``(heads, group, offset, window)`` (offset None:
    not causal; window None: no window); ``flags`` the kernel's other constexpr switches. On triton's
    OutOfResources (the tiles need more shared memory than this GPU has), halve the larger tile and try again,
    down to 16 × 16; past that, a RuntimeError that says so. ``tune`` (on a GPU): time :data:`CANDIDATES` at the
    first launch per kernel, dtype, head size, mask kind and length bucket, and keep the fastest. ``zeroed``: a
    buffer the kernel adds into (the atomic dQ), set to zero before every launch, tuning launches included."""
    kernels = kernels_for(interpreting())
    heads, group, offset, window = mask
    args = (*args, heads, group, offset or 0, window or 0)
    flags = {"CAUSAL": offset is not None, "WINDOWED": window is not None, **flags}
    batch_heads = x.shape[0] * x.shape[1]
    own = (lambda t: t.block_n) if name == "dkdv" else (lambda t: t.block_m)  # the program's own block
    kernel = getattr(kernels, name)

    def run(t: Tiles) -> None:
        options = {**flags, "BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "BLOCK_D": block_d}
        if not interpreting():
            options.update(num_warps=t.warps, num_stages=t.stages)
        if zeroed is not None:
            zeroed.zero_()
        kernel[grid(rows, own(t), batch_heads)](*args, **options)

    if tune and _tunes(x):
        key = (name, x.device, x.dtype, block_d, *flags.values(), length_bucket(rows))
        if key not in _TUNED:
            choices = CANDIDATES[_table_key(arch_of(x.device), x.dtype, block_d)][name]
            _TUNED[key] = fastest(choices, run, _time, kernels.OutOfResources)
        run(_TUNED[key])
        return
    key = (name, x.device, x.dtype, block_d, *flags.values(), tiles.block_m, tiles.block_n)
    tiles = tiles._replace(**dict(zip(("block_m", "block_n"), _FITTED.get(key, tiles[:2]), strict=True)))
    while True:
        try:
            run(tiles)
        except kernels.OutOfResources as error:
            if max(tiles.block_m, tiles.block_n) <= 16:
                raise RuntimeError(
                    f"the {name} kernel's tiles must fit this GPU's shared memory, got even 16 × 16 tiles refused "
                    f"at head size {x.shape[-1]} in {x.dtype} ({error}); use a 16-bit dtype or a smaller head size, or "
                    "attention_course.flash.flash_attention") from error
            tiles = tiles._replace(**dict(zip(("block_m", "block_n"), halve_tiles(*tiles[:2]), strict=True)))
            continue
        _FITTED[key] = tiles[:2]
        return


def _delta(out: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """``D = rowsum(dO ∘ O)`` in float32, ``(batch, heads, n_q)``, by :func:`flash_kernels.delta_kernel`."""
    rows, d = out.numel() // out.shape[-1], out.shape[-1]
    delta = torch.empty(out.shape[:-1], dtype=torch.float32, device=out.device)
    block_d = padded_head(d)
    block_m = 64 if block_d <= 128 else 32
    kernels_for(interpreting()).delta[(-(-rows // block_m),)](out, grad_out, delta, rows, d, BLOCK_M=block_m,
                                                              BLOCK_D=block_d)
    return delta


class _TritonAttention(torch.autograd.Function):
    """Saves (Q, K, V, O, lse), as flash.flash_attention does; backward runs the delta, dK/dV and (deterministic)
    dQ kernels, or the delta and the dK/dV kernel adding into dQ atomically."""

    @staticmethod
    def forward(ctx: Any, q, k, v, scale, mask, tiles, tune, deterministic):  # noqa: ANN001, ANN205 -- autograd API
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        batch, heads, n_q, d = q.shape
        n_k = k.shape[2]
        out = torch.empty_like(q)
        lse = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
        qk_scale = scale * 1.4426950408889634  # scale · log₂e: the kernel's softmax is in base 2
        long = needs_int64(n_q, n_k, d)
        forward, block_d = tiles["forward"]
        _launch("forward", n_q, (q, k, v, out, lse, qk_scale, n_q, n_k, d), q, mask,
                {"NEGATIVE": scale < 0, "LONG": long}, forward, block_d, tune)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (scale, mask, tiles, tune, deterministic, long)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable  # the kernels have no backward of their own
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_lse: torch.Tensor):  # noqa: ANN205 -- autograd API
        q, k, v, out, lse = ctx.saved_tensors
        scale, mask, tiles, tune, deterministic, long = ctx.options
        (batch, heads, n_q, d), kv_heads, n_k = q.shape, k.shape[1], k.shape[2]
        grad_out = grad_out.contiguous()
        delta = _delta(out, grad_out)
        # dQ: written once per element by the second pass, or float32 sums of atomic adds from the dK, dV programs;
        # dK, dV per query head, with grouped keys and values summed over each group in float32 afterwards
        wide = wide_buffers(atomic_dq=not deterministic, grouped=heads != kv_heads)
        dq, dk, dv = (torch.empty((batch, heads, n, d), dtype=torch.float32 if name in wide else q.dtype,
                                  device=q.device) for name, n in (("DQ", n_q), ("DK", n_k), ("DV", n_k)))
        (dkdv, block_d), (dq_tiles, _) = tiles["dkdv"], tiles["dq"]
        _launch("dkdv", n_k, (q, k, v, grad_out, lse, delta, dk, dv, dq, scale, n_q, n_k, d), q, mask,
                {"ATOMIC_DQ": not deterministic, "LONG": long}, dkdv, block_d, tune,
                zeroed=None if deterministic else dq)
        if deterministic:
            _launch("dq", n_q, (q, k, v, grad_out, lse, delta, dq, scale, n_q, n_k, d), q, mask, {"LONG": long},
                    dq_tiles, block_d, tune)
        else:
            dq = dq.to(q.dtype)
        if heads != kv_heads:
            dk, dv = (g.view(batch, kv_heads, heads // kv_heads, n_k, d).sum(2).to(k.dtype) for g in (dk, dv))
        return dq, dk, dv, None, None, None, None, None


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
    deterministic: bool = True,
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
        deterministic: the backward pass computes dQ in a second pass over the tiles, each element written by one
            program, so that the same inputs give the same gradients on every run (seven tile products per pair
            of tiles); ``False``: FlashAttention-2's order, the dK, dV programs adding each tile's dS K into a
            float32 dQ with atomic adds (five products, no second pass), whose order — and so the last bits of
            dQ — varies from run to run. If ``torch.use_deterministic_algorithms(True)`` is in force when this is
            called, the second pass runs whatever this says (PyTorch's own operations take their deterministic
            implementation in that mode); the mode is read here, at the call, not when the backward pass runs.

    Returns:
        :class:`~attention_course.tiled.TiledOutput` ``(output, lse)``: the output in ``q``'s dtype and each row's
        log-sum-exp in float32, which carries no gradient (a row that sees no key: zero output, ``lse = -inf``).
        Scores, softmax and sums are float32; for 16-bit inputs the weights are rounded to 16 bits before they
        multiply V, as fused kernels do. On a GPU, float32 products may run in TF32 (Triton's default for
        ``tl.dot``).

    Raises:
        TypeError: a non-tensor, a dtype outside those three or unlike ``q``'s, a window that is not an integer;
            bfloat16 under the CPU interpreter (NumPy has no bfloat16: the interpreter's answers would be wrong).
        ValueError: shapes that do not fit (``kv_heads`` not dividing ``heads`` among them), ``d > 256``, more than
            2³⁰ positions, more programs than a grid holds (2³¹ − 1), an empty
            tensor, tensors on different devices or on the CPU without ``TRITON_INTERPRET=1``, a bad block size,
            ``causal`` not one of the four values, a window below 1 or without ``causal``. ImportError: triton is
            not installed.
        RuntimeError: ``TRITON_INTERPRET`` was changed after triton was imported; the CPU interpreter of a triton
            older than 3.9 under NumPy ≥ 2.4 (it cannot run the kernels' loops); a GPU whose shared memory holds
            not even 16 × 16 tiles of a kernel (a T4 in float32 at d = 256).
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
    if max(n_q, k.shape[2]) > MAX_LENGTH:
        raise ValueError(f"q and k must have at most {MAX_LENGTH} positions (2³⁰: the kernels count positions in "
                         f"int32), got n_q = {n_q}, n_k = {k.shape[2]}")
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
        # past n_q + offset keys the window hides nothing: the same mask, and the kernels' bounds stay in int32
        window = min(window, max(1, n_q + offset))
    scale = d ** -0.5 if scale is None else check_real("scale", scale)
    autotune = check_flag("autotune", autotune)
    # PyTorch's deterministic mode wins over deterministic=False: the atomic dQ is the one nondeterministic part
    deterministic = check_flag("deterministic", deterministic) or torch.are_deterministic_algorithms_enabled()
    sides = check_tile("block_q", block_q), check_tile("block_k", block_k)
    tiles = {name: tile_sizes(name, d, q.dtype, arch_of(device), *sides) for name in KERNELS}
    if device.type == "cpu":  # the arguments first, then whether this machine's interpreter can run them
        _check_interpreter(q.dtype)
    out, lse = _TritonAttention.apply(q, k, v, scale, (heads, heads // k.shape[1], offset, window), tiles,
                                      autotune, deterministic)
    return TiledOutput(out, lse)
