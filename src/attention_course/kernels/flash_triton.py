"""FlashAttention-2 as Triton kernels (chapter 6): the forward pass and the backward pass of
:mod:`attention_course.flash`, each tile now one block of a GPU program instead of a PyTorch call.

A Triton kernel is a Python function run once per *program*; a launch runs a grid of them, here one per block of
rows and per (batch, head). ``tl.load``/``tl.store`` move whole tiles between memory and registers, ``tl.dot``
multiplies tiles, the rest is element-wise — ``tiled.py`` without the round trips to memory between operations.

**Forward** (:func:`_forward_kernel`, Dao 2023, Algorithm 1): each program owns ``BLOCK_M`` queries (the outer
loop is the grid) and walks over the keys ``BLOCK_N`` at a time (the inner loop), carrying the online-softmax
state ``(m, ℓ, acc)`` of :mod:`attention_course.tiled`; it divides by ``ℓ`` once at the end and writes the output
and each row's log-sum-exp ``lse = m + log ℓ``, the one number per row the backward pass needs.

**Backward**, from what the forward pass saved — ``Q``, ``K``, ``V``, ``O`` and ``lse`` — with
``D = rowsum(dO ∘ O)`` (one line of PyTorch, linear in ``n``) and ``P_ij = exp(S_ij − lse_i)`` recomputed tile by
tile: :func:`_dkdv_kernel` gives each program ``BLOCK_N`` keys (key blocks outer), walks over all query blocks
(inner) and accumulates ``dV += Pᵀ dO`` and ``dK += dSᵀ Q`` in registers, ``dS = P ∘ (dO Vᵀ − D)``, writing them
once; :func:`_dq_kernel` is a second pass with the loops the other way round (query blocks outer) that
accumulates ``dQ += dS K``. FlashAttention-2's backward (Dao 2023, Algorithm 2) adds each ``dS K`` into ``dQ``
from inside the key loop, atomic adds from many programs; the second pass recomputes ``P`` instead, so that every
output has one writer and the result does not depend on the order the programs run in.

**Ragged tiles and causality.** Block sizes are powers of two (``tl.arange`` needs them), so the last tile of
an ``n`` that is not a multiple overhangs the tensor: its loads are masked (``other=0``), its scores set to
``-inf`` (weight 0), its stores masked. ``causal=True`` is the upper-left mask (query ``i`` sees keys
``j ≤ i``, as ``is_causal``): scores are masked where ``j > i``, and tiles entirely above the diagonal are
skipped (the forward and ``dQ`` loops stop after the query block's last query; ``dK, dV`` starts at its first key).

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
    check_int,
    check_real,
    check_same_device,
    check_tensor,
    describe,
)
from ..tiled import TiledOutput

__all__ = ["interpreting", "triton_attention"]

#: ``triton.language``, bound by :func:`kernels_for` at the first call (the kernels below read it as a global).
tl: Any = None

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_LAYOUTS = {"q": "(batch, heads, n_q, d)", "k": "(batch, heads, n_k, d)", "v": "(batch, heads, n_k, d)"}
MAX_HEAD_DIM = 256


# ---------------------------------------------------------------------------------------------------------------
# The kernels (plain functions here; kernels_for() hands them to triton.jit at the first call)
# ---------------------------------------------------------------------------------------------------------------


def _load_rows(ptr, rows, cols_d, n, D):  # noqa: ANN001, N803 -- Triton's arguments
    """The ``(len(rows), BLOCK_D)`` tile of an ``(n, D)`` row-major matrix at ``ptr``, zeros outside it."""
    return tl.load(ptr + rows[:, None] * D + cols_d[None, :], mask=(rows[:, None] < n) & (cols_d[None, :] < D),
                   other=0.0)


def _visible(rows, cols, N_Q, N_K, CAUSAL: tl.constexpr):  # noqa: ANN001, N803
    """The ``(query, key)`` pairs of a tile that may attend: inside both matrices and, if causal, key ≤ query."""
    visible = (rows[:, None] < N_Q) & (cols[None, :] < N_K)
    if CAUSAL:
        visible = visible & (cols[None, :] <= rows[:, None])
    return visible


def _forward_kernel(Q, K, V, O, LSE, scale, N_Q, N_K, D,  # noqa: ANN001, N803 -- Triton's kernel arguments
                    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_M queries of one (batch, head) against every visible key, online softmax."""
    block, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    Q, O, LSE = Q + bh * N_Q * D, O + bh * N_Q * D, LSE + bh * N_Q  # this (batch, head)'s slices
    K, V = K + bh * N_K * D, V + bh * N_K * D
    q = _load_rows(Q, rows, cols_d, N_Q, D)

    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of each row's scores
    ell = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp(s - m)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)  # running sum of exp(s - m) v
    if CAUSAL:
        end = tl.minimum((block + 1) * BLOCK_M, N_K)  # key blocks past this block's last query are all masked
    else:
        end = N_K
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)
        s = tl.dot(q, tl.trans(k)) * scale  # (BLOCK_M, BLOCK_N) scores, float32
        # every row of the block counts here (rows past N_Q compute finite values that are never stored)
        s = tl.where(_visible(rows, cols, (block + 1) * BLOCK_M, N_K, CAUSAL), s, float("-inf"))
        # Key 0 is visible to every row and lies in the first tile, so m is finite from the first tile on.
        m_new = tl.maximum(m, tl.max(s, axis=1))
        rescale = tl.exp(m - m_new)  # exp(-inf) = 0 on the first tile
        p = tl.exp(s - m_new[:, None])
        ell = ell * rescale + tl.sum(p, axis=1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)  # 16-bit inputs: P rounded to 16 bits, as fused
        m = m_new  # kernels do
    out = acc / ell[:, None]  # normalise once
    tl.store(O + rows[:, None] * D + cols_d[None, :], out.to(O.dtype.element_ty),
             mask=(rows[:, None] < N_Q) & (cols_d[None, :] < D))
    tl.store(LSE + rows, m + tl.log(ell), mask=rows < N_Q)


#: The helpers as plain functions, kept whatever kernels_for() binds their names to.
_HELPERS = {"_load_rows": _load_rows, "_visible": _visible}


def _dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, scale, N_Q, N_K, D,  # noqa: ANN001, N803
                 CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_N keys of one (batch, head); walks over the query blocks, accumulating dK and dV."""
    block, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols_d = tl.arange(0, BLOCK_D)
    Q, DO, LSE, DELTA = Q + bh * N_Q * D, DO + bh * N_Q * D, LSE + bh * N_Q, DELTA + bh * N_Q
    K, V, DK, DV = K + bh * N_K * D, V + bh * N_K * D, DK + bh * N_K * D, DV + bh * N_K * D
    kv_mask = (cols[:, None] < N_K) & (cols_d[None, :] < D)
    k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)

    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    if CAUSAL:
        first = (block * BLOCK_N // BLOCK_M) * BLOCK_M  # queries before this block's first key see none of it
    else:
        first = 0
    for start in range(first, N_Q, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        q, do = _load_rows(Q, rows, cols_d, N_Q, D), _load_rows(DO, rows, cols_d, N_Q, D)
        lse = tl.load(LSE + rows, mask=rows < N_Q, other=0.0)
        delta = tl.load(DELTA + rows, mask=rows < N_Q, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        # the tile of the weights, recomputed
        p = tl.where(_visible(rows, cols, N_Q, N_K, CAUSAL), tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)  # dV = Pᵀ dO
        dp = tl.dot(do, tl.trans(v))  # dP = dO Vᵀ
        ds = p * (dp - delta[:, None])  # dS = P ∘ (dP − D)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)  # dK = scale · dSᵀ Q (scaled once, below)
    tl.store(DK + cols[:, None] * D + cols_d[None, :], (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + cols[:, None] * D + cols_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


def _dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, scale, N_Q, N_K, D,  # noqa: ANN001, N803
               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_M queries of one (batch, head); walks over the visible key blocks, accumulating dQ."""
    block, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    Q, DO, DQ = Q + bh * N_Q * D, DO + bh * N_Q * D, DQ + bh * N_Q * D
    LSE, DELTA = LSE + bh * N_Q, DELTA + bh * N_Q
    K, V = K + bh * N_K * D, V + bh * N_K * D
    q_mask = (rows[:, None] < N_Q) & (cols_d[None, :] < D)
    q, do = _load_rows(Q, rows, cols_d, N_Q, D), _load_rows(DO, rows, cols_d, N_Q, D)
    lse = tl.load(LSE + rows, mask=rows < N_Q, other=0.0)
    delta = tl.load(DELTA + rows, mask=rows < N_Q, other=0.0)

    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if CAUSAL:
        end = tl.minimum((block + 1) * BLOCK_M, N_K)
    else:
        end = N_K
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)
        s = tl.dot(q, tl.trans(k)) * scale
        p = tl.where(_visible(rows, cols, N_Q, N_K, CAUSAL), tl.exp(s - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)  # dQ = scale · dS K (scaled once, below)
    tl.store(DQ + rows[:, None] * D + cols_d[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=q_mask)


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
    global tl
    try:
        import triton
        import triton.language
        from triton.runtime.errors import OutOfResources
    except ImportError as error:
        raise ImportError(
            "triton_attention must have triton, got no module named triton: it has wheels for Linux only "
            "(pip install triton); on other systems use attention_course.flash.flash_attention") from error
    tl = triton.language
    # triton.jit reads TRITON_INTERPRET when it decorates, triton's own library (tl.cdiv, tl.sigmoid, ...) as well:
    # that was decorated when triton was first imported, and the two must agree.
    library_interpreted = type(triton.language.standard.cdiv).__name__ == "InterpretedFunction"
    if library_interpreted != interpret:
        now = "set" if interpret else "unset"
        raise RuntimeError(f"TRITON_INTERPRET must be set (or unset) before triton is first imported, got it {now} "
                           f"after triton was imported {'without' if interpret else 'with'} it: restart Python")
    # The kernels call the helpers by their module-level names: those must be jitted too, before any launch.
    global _load_rows, _visible
    _load_rows, _visible = triton.jit(_HELPERS["_load_rows"]), triton.jit(_HELPERS["_visible"])
    return SimpleNamespace(forward=triton.jit(_forward_kernel), dkdv=triton.jit(_dkdv_kernel),
                           dq=triton.jit(_dq_kernel), OutOfResources=OutOfResources)


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


def _launch(name: str, rows: int, args: tuple, x: torch.Tensor, causal: bool, blocks: tuple[int, ...]) -> None:
    """Run kernel ``name`` over a grid of (tiles of ``rows``, batch · heads); ``rows`` is counted in BLOCK_M
    (forward, dQ) or BLOCK_N (dK, dV) tiles. On triton's OutOfResources (the tiles need more shared memory than
    this GPU has), halve the larger tile and try again, down to 16 × 16."""
    kernels = kernels_for(interpreting())
    block_m, block_n, block_d, warps = blocks
    key = (name, x.device, x.dtype, block_d, block_m, block_n)
    block_m, block_n = _FITTED.get(key, (block_m, block_n))
    batch_heads = x.shape[0] * x.shape[1]
    while True:
        per_tile = block_n if name == "dkdv" else block_m
        options = {"CAUSAL": causal, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_D": block_d}
        if not interpreting():
            options["num_warps"] = warps
        try:
            getattr(kernels, name)[(-(-rows // per_tile), batch_heads)](*args, **options)
        except kernels.OutOfResources:
            if max(block_m, block_n) <= 16:
                raise
            block_m, block_n = halve_tiles(block_m, block_n)
            continue
        _FITTED[key] = (block_m, block_n)
        return


class _TritonAttention(torch.autograd.Function):
    """Saves (Q, K, V, O, lse), as flash.flash_attention does; backward runs the dK/dV and dQ kernels."""

    @staticmethod
    def forward(ctx: Any, q, k, v, scale, causal, blocks):  # noqa: ANN001, ANN205 -- autograd API
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        batch, heads, n_q, d = q.shape
        n_k = k.shape[2]
        out = torch.empty_like(q)
        lse = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
        _launch("forward", n_q, (q, k, v, out, lse, scale, n_q, n_k, d), q, causal, blocks)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (scale, causal, blocks)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable  # the kernels have no backward of their own
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_lse: torch.Tensor):  # noqa: ANN205 -- autograd API
        q, k, v, out, lse = ctx.saved_tensors
        scale, causal, blocks = ctx.options
        n_q, d, n_k = q.shape[2], q.shape[3], k.shape[2]
        grad_out = grad_out.contiguous()
        delta = (grad_out.float() * out.float()).sum(-1).contiguous()  # D = rowsum(dO ∘ O), float32
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _launch("dkdv", n_k, (q, k, v, grad_out, lse, delta, dk, dv, scale, n_q, n_k, d), q, causal, blocks)
        _launch("dq", n_q, (q, k, v, grad_out, lse, delta, dq, scale, n_q, n_k, d), q, causal, blocks)
        return dq, dk, dv, None, None, None


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
    block_q: int | None = None,
    block_k: int | None = None,
) -> TiledOutput:
    r"""softmax(Q Kᵀ · scale) V by FlashAttention-2's Triton kernels, forward and backward (chapter 6).

    Args:
        q: queries ``(batch, heads, n_q, d)``; k, v: keys and values ``(batch, heads, n_k, d)``; one floating
            dtype (float32, float16 or bfloat16), on a CUDA device — or on the CPU when ``TRITON_INTERPRET=1``
            was set before triton was first imported (at the latest, before the first call).
        causal: ``True`` or ``"upper_left"`` (query ``i`` sees keys ``j ≤ i``, as ``is_causal``); ``"lower_right"``
            only where it is the same mask, ``n_q = n_k`` (``flash_attention`` has both alignments).
        scale: multiplies the scores; default :math:`1/\sqrt{d}`.
        block_q, block_k: tile sizes (powers of two ≥ 16); by default chosen from ``d`` and the dtype. On a GPU
            whose shared memory they overflow, they are halved until they fit.

    Returns:
        :class:`~attention_course.tiled.TiledOutput` ``(output, lse)``: the output in ``q``'s dtype and each row's
        log-sum-exp in float32, which carries no gradient. Scores, softmax and sums are float32; for 16-bit
        inputs the weights are rounded to 16 bits before they multiply V, as fused kernels do. On a GPU,
        float32 products may run in TF32 (Triton's default for ``tl.dot``).

    Raises:
        TypeError: a non-tensor, a dtype outside those three or unlike ``q``'s; bfloat16
            under the CPU interpreter (NumPy has no bfloat16: the interpreter's answers would be wrong).
        ValueError: shapes that do not fit, ``d > 256``, an empty tensor, tensors on different devices or on the
            CPU without ``TRITON_INTERPRET=1``, a bad block size, ``causal`` not one of the four values or
            ``"lower_right"`` with ``n_q ≠ n_k``. ImportError: triton is not installed.
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
    if k.shape[:2] != q.shape[:2] or k.shape[3] != d:
        raise ValueError(f"k must have shape (batch, heads, n_k, d) = ({batch}, {heads}, n_k, {d}) to match q, "
                         f"got {tuple(k.shape)}")
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
    if offset not in (None, 0):  # the kernels' diagonal is the upper-left one
        raise ValueError(f"causal must be upper-left for the kernel when n_q ≠ n_k, got {causal!r} with n_q = {n_q}, "
                         f"n_k = {k.shape[2]}; for new queries after cached keys use flash_attention(causal=...)")
    causal = offset is not None
    scale = d ** -0.5 if scale is None else check_real("scale", scale)
    blocks = tile_sizes(d, q.dtype, check_tile("block_q", block_q), check_tile("block_k", block_k))
    if device.type == "cpu":  # the arguments first, then whether this machine's interpreter can run them
        _check_interpreter(q.dtype)
    out, lse = _TritonAttention.apply(q, k, v, scale, causal, blocks)
    return TiledOutput(out, lse)
