"""Tiled attention (chapter 6): the online softmax, the exact merge of its states, and attention tile by tile.

Notation (the paper's, row vectors): queries ``q`` have shape ``(..., n_q, d_k)``, keys ``k`` ``(..., n_k, d_k)``,
values ``v`` ``(..., n_k, d_v)``; scores ``s = q kᵀ · scale`` would be ``(..., n_q, n_k)``, but nothing here
stores them whole.

**Online softmax** (Milakov & Gimelshein, 2018). A block of scores ``s_1 … s_n`` of one query, with values
``v_1 … v_n``, is summarised by the *state* ``(m, ℓ, acc)``::

    m = max_j s_j,   ℓ = Σ_j exp(s_j − m),   acc = Σ_j exp(s_j − m) v_j,

from which the softmax-weighted average is ``acc / ℓ`` and the log-sum-exp is ``m + log ℓ``. Two states of
disjoint blocks merge *exactly* (:func:`merge_states`) — rescale each by ``exp(m_i − max(m_1, m_2))`` and add —
and the merge is associative and commutative, so the keys can be visited in any blocks, in any order.

**Tiled attention** (Dao et al., 2022; Rabe & Staats, 2021) walks over blocks of queries and, for each, over
blocks of keys, keeping only one query block's state: the memory beyond inputs and output is
``O(block_q · block_k + block_q · d_v)``, linear in ``n`` overall instead of quadratic.

Masks follow the package: boolean, broadcastable to ``(..., n_q, n_k)``, **True = may attend**; a fully masked
query row gives a zero output (and a log-sum-exp of ``-inf``), never NaN, as in
:func:`attention_course.scaled_dot_product_attention`. ``causal=True`` is the *upper-left* causal mask
(query ``i`` sees keys ``j ≤ i``, PyTorch's ``is_causal``), each tile of it cut by :func:`masks.causal_block`.
Timing and memory measurement live in :mod:`attention_course.measure`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ._checks import (
    LOW_PRECISION,
    ArrayLike,
    as_tensor,
    attention_inputs,
    check_bool_mask,
    same_kind,
    to_output,
)
from .masks import causal_block

__all__ = [
    "SoftmaxState",
    "TileStep",
    "TiledOutput",
    "empty_state",
    "merge_states",
    "online_softmax",
    "softmax_state",
    "state_logsumexp",
    "state_output",
    "tiled_attention",
    "tiled_attention_steps",
]



# ---------------------------------------------------------------------------------------------------------------
# Online softmax: the (m, ℓ, acc) state and its exact merge
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SoftmaxState:
    """The summary of a block of scores (chapter 6): running max, running sum, running weighted sum of values.

    Attributes:
        m: ``(..., r)`` the largest score of each of ``r`` rows (``-inf`` for a row with no visible score).
        l: ``(..., r)`` ``Σ_j exp(s_j − m)`` over the row's visible scores (0 for an empty row).
        acc: ``(..., r, d_v)`` ``Σ_j exp(s_j − m) v_j``, or None for a softmax without values.
    """

    m: torch.Tensor
    l: torch.Tensor
    acc: torch.Tensor | None = None


def _safe_max(m: torch.Tensor) -> torch.Tensor:
    """The running max with ``-inf`` (a row that has seen nothing) replaced by 0, so ``exp(x − m)`` never sees
    ``−inf − (−inf)`` = NaN: rows with nothing visible keep ℓ = 0 and acc = 0."""
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def empty_state(
    rows: tuple[int, ...],
    d_v: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
) -> SoftmaxState:
    """The state of an empty block — the identity of :func:`merge_states`: ``m = −inf``, ``ℓ = 0``, ``acc = 0``.

    Args:
        rows: the shape ``(..., r)`` of ``m`` and ``ℓ``.
        d_v: width of the values (None for a softmax without values).
    """
    m = torch.full(rows, -math.inf, dtype=dtype, device=device)
    acc = None if d_v is None else torch.zeros((*rows, d_v), dtype=dtype, device=device)
    return SoftmaxState(m, torch.zeros(rows, dtype=dtype, device=device), acc)


def softmax_state(
    scores: ArrayLike, values: ArrayLike | None = None, mask: ArrayLike | None = None
) -> SoftmaxState:
    """The state ``(m, ℓ, acc)`` of one block of scores (chapter 6).

    Args:
        scores: ``(..., r, n)`` — ``r`` rows (queries) of ``n`` scores each; a 1-D ``(n,)`` is one row.
        values: optional ``(..., n, d_v)``; then ``acc = exp(scores − m) @ values`` has shape ``(..., r, d_v)``.
        mask: optional boolean, broadcastable to ``scores``; False entries are invisible (weight 0).

    Returns:
        A :class:`SoftmaxState` of torch tensors (numpy inputs are converted); ``m`` and ``ℓ`` have the shape of
        ``scores`` without its last axis.
    """
    s = as_tensor("scores", scores)
    if s.ndim == 0:
        raise ValueError("scores must have at least one dimension (..., n), got a scalar (shape ())")
    if mask is not None:
        mt = as_tensor("mask", mask, floating=False)
        check_bool_mask(mt, tuple(s.shape))
        s = s.masked_fill(~mt, -math.inf)
    if s.shape[-1] == 0:  # an empty block: amax has nothing to reduce; its state is the merge identity
        m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype, device=s.device)
    else:
        m = s.amax(dim=-1)
    p = torch.exp(s - _safe_max(m).unsqueeze(-1))
    acc = None
    if values is not None:
        vt = as_tensor("values", values)
        if vt.ndim < 2 or vt.shape[-2] != s.shape[-1]:
            raise ValueError(
                f"values must have shape (..., n, d_v) with n = {s.shape[-1]} (the scores' last axis), "
                f"got {tuple(vt.shape)}"
            )
        acc = p.to(vt.dtype) @ vt
    return SoftmaxState(m, p.sum(dim=-1), acc)


def merge_states(a: SoftmaxState, b: SoftmaxState) -> SoftmaxState:
    r"""Exact merge of the states of two disjoint blocks of the same rows (chapter 6).

    With :math:`m = \max(m_a, m_b)`: :math:`\ell = e^{m_a - m}\ell_a + e^{m_b - m}\ell_b` and
    :math:`\mathrm{acc} = e^{m_a - m}\mathrm{acc}_a + e^{m_b - m}\mathrm{acc}_b`. The result is the state of the
    union of the blocks, whatever the split; the merge is associative and commutative (chapter 6 proves both in
    SymPy) and :func:`empty_state` is its identity.

    Raises:
        ValueError: one state has values (``acc``) and the other not, or the shapes of ``m`` do not broadcast.
    """
    if (a.acc is None) != (b.acc is None):
        raise ValueError("cannot merge a state with values (acc) and one without")
    try:
        m = torch.maximum(a.m, b.m)
    except RuntimeError:
        raise ValueError(f"states of different rows: m shapes {tuple(a.m.shape)} and {tuple(b.m.shape)}") from None
    ms = _safe_max(m)
    ca, cb = torch.exp(a.m - ms), torch.exp(b.m - ms)
    l = ca * a.l + cb * b.l
    acc = None
    if a.acc is not None and b.acc is not None:
        acc = ca.unsqueeze(-1) * a.acc + cb.unsqueeze(-1) * b.acc
    return SoftmaxState(m, l, acc)


def state_output(state: SoftmaxState) -> torch.Tensor:
    """``acc / ℓ``: the softmax-weighted average of the values, ``(..., r, d_v)``; zero for rows with ℓ = 0."""
    if state.acc is None:
        raise ValueError("this state has no values (acc is None); state_output needs softmax_state(..., values)")
    l_safe = torch.where(state.l > 0, state.l, torch.ones_like(state.l))
    return state.acc / l_safe.unsqueeze(-1).to(state.acc.dtype)


def state_logsumexp(state: SoftmaxState) -> torch.Tensor:
    """``m + log ℓ`` = ``log Σ_j exp(s_j)`` of each row, ``(..., r)``; ``-inf`` for a row with nothing visible."""
    return state.m + torch.log(state.l)


def online_softmax(x: ArrayLike, axis: int = -1, mask: ArrayLike | None = None, block_size: int = 1) -> ArrayLike:
    r"""Softmax by Milakov & Gimelshein's online normaliser: one streaming pass for (m, ℓ), one to normalise.

    Chapter 6. Pass 1 visits ``x`` in blocks of ``block_size`` along ``axis``, merging each block's state into a
    running one (``block_size=1`` is the paper's element-by-element recurrence
    :math:`m_j = \max(m_{j-1}, x_j)`, :math:`\ell_j = \ell_{j-1} e^{m_{j-1} - m_j} + e^{x_j - m_j}`); pass 2
    returns :math:`e^{x_i - m}/\ell`. Equal to :func:`attention_course.softmax` up to rounding.

    Args:
        x: logits (numpy or torch, floating point), any shape with at least one dimension.
        axis: the axis to normalise over.
        mask: optional boolean broadcastable to ``x``; False entries get weight 0, fully masked slices all zeros.
        block_size: how many entries each streaming step reads (≥ 1).

    Returns:
        Weights of the shape, kind and dtype of ``x``.
    """
    as_numpy = same_kind(["x", "mask"], [x, mask] if mask is not None else [x])
    t = as_tensor("x", x)
    if t.ndim == 0:
        raise ValueError("online_softmax needs at least one dimension, got a scalar (shape ())")
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    dtype = t.dtype
    work = t.float() if dtype in LOW_PRECISION else t
    mt = None
    if mask is not None:
        mt = as_tensor("mask", mask, floating=False)
        check_bool_mask(mt, tuple(t.shape))
        mt = mt.expand(t.shape).movedim(axis, -1)
    work = work.movedim(axis, -1)
    state = empty_state(tuple(work.shape[:-1]), dtype=work.dtype, device=work.device)
    for j in range(0, work.shape[-1], block_size):
        block_mask = None if mt is None else mt[..., j : j + block_size]
        state = merge_states(state, softmax_state(work[..., j : j + block_size], mask=block_mask))
    logits = work if mt is None else work.masked_fill(~mt, -math.inf)
    l_safe = torch.where(state.l > 0, state.l, torch.ones_like(state.l))
    p = torch.exp(logits - _safe_max(state.m).unsqueeze(-1)) / l_safe.unsqueeze(-1)
    return to_output(p.movedim(-1, axis).to(dtype), as_numpy)


# ---------------------------------------------------------------------------------------------------------------
# Tiled attention
# ---------------------------------------------------------------------------------------------------------------


class TiledOutput(NamedTuple):
    """What :func:`tiled_attention` returns; unpacks as ``out, lse = tiled_attention(...)``.

    Attributes:
        output: ``(..., n_q, d_v)``, the attention output.
        lse: ``(..., n_q)``, each row's log-sum-exp of its visible scores (``-inf`` for a fully masked row).
    """

    output: ArrayLike
    lse: ArrayLike


@dataclass(frozen=True)
class TileStep:
    """One step of :func:`tiled_attention_steps`: the query block ``[q_start, q_stop)`` has just absorbed the key
    block ``[k_start, k_stop)``; ``state`` is its running state after this tile (``m``, ``ℓ``: ``(..., block)``,
    ``acc``: ``(..., block, d_v)``)."""

    q_start: int
    q_stop: int
    k_start: int
    k_stop: int
    state: SoftmaxState


def _prepare(q, k, v, mask, scale, causal, block_q, block_k):
    x = attention_inputs(q, k, v, mask, scale)
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ValueError(f"{name} must be a positive integer, got {b!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    batch = x.scores_shape[:-2]
    qt, kt, vt = (t.expand(*batch, *t.shape[-2:]) for t in (x.q, x.k, x.v))
    return x.as_numpy, x.dtype, qt, kt, vt, x.mask, batch, x.scale


def _tile_steps(qt, kt, vt, mt, scale, causal, block_q, block_k) -> Iterator[TileStep]:
    """The tiled forward pass, one tile at a time."""
    n_q, n_k, d_v = qt.shape[-2], kt.shape[-2], vt.shape[-1]
    batch = qt.shape[:-2]
    kt_t = kt.transpose(-2, -1)
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        q_blk = qt[..., i0:i1, :] * scale  # scaling one query block costs block_q · d_k, not n · d_k
        state = empty_state((*batch, i1 - i0), d_v, dtype=qt.dtype, device=qt.device)
        # causal (upper-left aligned, as torch's is_causal): query i sees keys j <= i, so key blocks at or past
        # i1 are entirely masked and are skipped — about half the tiles of a square problem.
        k_end = min(n_k, i1) if causal else n_k
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, k_end)
            s = q_blk @ kt_t[..., j0:j1]  # (..., bq, bk): the only score tile alive
            allowed = None
            if mt is not None:
                allowed = mt[..., i0:i1, j0:j1]
            if causal and j1 - 1 > i0:  # this tile crosses the diagonal: cut it by the positions it covers
                tri = causal_block(
                    torch.arange(i0, i1, device=s.device), torch.arange(j0, j1, device=s.device)
                )
                allowed = tri if allowed is None else allowed & tri
            if allowed is not None:
                s = s.masked_fill(~allowed, -math.inf)
            m_new = torch.maximum(state.m, s.amax(dim=-1))
            ms = _safe_max(m_new)
            p = torch.exp(s - ms.unsqueeze(-1))
            alpha = torch.exp(state.m - ms)  # rescales what was accumulated under the old max
            state = SoftmaxState(
                m_new,
                alpha * state.l + p.sum(dim=-1),
                alpha.unsqueeze(-1) * state.acc + p @ vt[..., j0:j1, :],
            )
            yield TileStep(i0, i1, j0, j1, state)


def tiled_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    scale: float | None = None,
    *,
    causal: bool = False,
    block_q: int = 128,
    block_k: int = 128,
) -> TiledOutput:
    r"""Attention(Q, K, V) = softmax(Q Kᵀ · scale) V computed tile by tile, never storing the n_q × n_k matrix.

    Chapter 6; the forward pass of FlashAttention (Dao et al., 2022) written with PyTorch operations. For each
    block of ``block_q`` queries it visits the key blocks in order, keeps the running state ``(m, ℓ, acc)``,
    rescales ``ℓ`` and ``acc`` by :math:`e^{m_\text{old} - m_\text{new}}` whenever a tile raises the running max,
    and writes ``acc / ℓ`` when the row of tiles is done. Exact: equal to
    :func:`attention_course.scaled_dot_product_attention` up to rounding (tests: 1e-10 in float64).

    Args:
        q: queries ``(..., n_q, d_k)``; k: keys ``(..., n_k, d_k)``; v: values ``(..., n_k, d_v)``.
        mask: optional boolean, broadcastable to ``(..., n_q, n_k)``, True = may attend (each tile reads its
            slice; pass ``causal=True`` instead of a materialised causal mask to keep memory linear).
        scale: multiplies the scores; default :math:`1/\sqrt{d_k}`.
        causal: the upper-left aligned causal mask (``masks.causal_mask(n_q, n_k, alignment="upper_left")``,
            PyTorch's ``is_causal``): query ``i`` attends to keys ``j ≤ i``, whatever ``n_k``; key blocks
            entirely above the diagonal are skipped. Combined with ``mask`` by logical and. For new queries
            after cached keys (lower-right), pass ``mask=masks.causal_mask(n_q, n_k, alignment="lower_right")``.
        block_q, block_k: tile sizes; any positive integers (the last tile of a row or column may be smaller).

    Returns:
        :class:`TiledOutput` ``(output, lse)``: output ``(..., n_q, d_v)`` and the row log-sum-exp ``(..., n_q)``
        of the visible scores, of the inputs' kind. The weights are not returned (they would be the n_q × n_k
        matrix this function avoids); any of them is :math:`e^{s_{ij} - \mathrm{lse}_i}`. A fully masked row
        gives a zero output and ``lse = -inf``. float16/bfloat16 inputs are computed in float32 and returned in
        their dtype.

    Raises:
        TypeError / ValueError: as :func:`attention_course.scaled_dot_product_attention`, and for block sizes that
            are not positive integers.
    """
    as_numpy, dtype, qt, kt, vt, mt, batch, scale = _prepare(q, k, v, mask, scale, causal, block_q, block_k)
    n_q, d_v = qt.shape[-2], vt.shape[-1]
    out = torch.zeros((*batch, n_q, d_v), dtype=qt.dtype, device=qt.device)
    lse = torch.full((*batch, n_q), -math.inf, dtype=qt.dtype, device=qt.device)
    last: TileStep | None = None
    for step in _tile_steps(qt, kt, vt, mt, scale, causal, block_q, block_k):
        if last is not None and step.q_start != last.q_start:
            _write(out, lse, last)
        last = step
    if last is not None:
        _write(out, lse, last)
    return TiledOutput(to_output(out.to(dtype), as_numpy), to_output(lse.to(dtype), as_numpy))


def _write(out: torch.Tensor, lse: torch.Tensor, step: TileStep) -> None:
    out[..., step.q_start : step.q_stop, :] = state_output(step.state)
    lse[..., step.q_start : step.q_stop] = state_logsumexp(step.state)


def tiled_attention_steps(q: ArrayLike, k: ArrayLike, v: ArrayLike, **options) -> Iterator[TileStep]:
    """The same computation as :func:`tiled_attention`, yielding a :class:`TileStep` after every tile (chapter 6).

    ``options`` are :func:`tiled_attention`'s: ``mask``, ``scale``, ``causal``, ``block_q``, ``block_k``.

    For figures that step through the block-by-block rescaling. Tiles come query block by query block, key
    blocks in increasing order; the last step of a query block holds its final state, whose
    :func:`state_output` is that block's output rows. States are torch tensors (scale already applied).
    """
    defaults = {n: p.default for n, p in inspect.signature(tiled_attention).parameters.items() if n not in "qkv"}
    if set(options) - set(defaults):
        raise TypeError(f"tiled_attention_steps got unexpected options {sorted(set(options) - set(defaults))}; "
                        f"it takes tiled_attention's {', '.join(defaults)}")
    settings = {**defaults, **options}  # in tiled_attention's order, as _prepare takes them
    _, _, qt, kt, vt, mt, _, scale = _prepare(q, k, v, *settings.values())
    yield from _tile_steps(qt, kt, vt, mt, scale, settings["causal"], settings["block_q"], settings["block_k"])
