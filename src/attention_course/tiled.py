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
    AttentionInputs,
    as_tensor,
    check_device,
    check_dtype,
    check_instance,
    check_int,
    check_mask,
    check_ndim,
    check_same_device,
    check_tensor,
    describe,
    same_kind,
    tiling_inputs,
    to_output,
)
from .masks import Alignment, tile_mask

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

    The constructor checks the shapes (``l`` as ``m``, ``acc`` as ``m`` plus ``d_v``) and that all are tensors on
    one device.
    """

    m: torch.Tensor
    l: torch.Tensor
    acc: torch.Tensor | None = None

    def __post_init__(self):
        check_tensor("m", self.m, layout="(..., r)")
        check_tensor("l", self.l, layout="(..., r)")
        if self.l.shape != self.m.shape:
            raise ValueError(f"l must have the shape of m {tuple(self.m.shape)}, got shape {tuple(self.l.shape)}")
        tensors = {"m": self.m, "l": self.l}
        if self.acc is not None:
            tensors["acc"] = check_tensor("acc", self.acc, layout="(..., r, d_v)")
            if self.acc.shape[:-1] != self.m.shape or self.acc.ndim != self.m.ndim + 1:
                raise ValueError(f"acc must have shape (*m.shape, d_v) = {(*self.m.shape, 'd_v')}, "
                                 f"got shape {tuple(self.acc.shape)}")
        check_same_device(list(tensors), list(tensors.values()))
        if len({t.dtype for t in tensors.values()}) > 1:
            got = ", ".join(f"{n} {t.dtype}" for n, t in tensors.items())
            raise TypeError(f"m, l and acc must share a dtype, got {got}")


def _safe_max(m: torch.Tensor) -> torch.Tensor:
    """The running max with ``-inf`` (a row that has seen nothing) replaced by 0, so ``exp(x − m)`` never sees
    ``−inf − (−inf)`` = NaN: rows with nothing visible keep ℓ = 0 and acc = 0."""
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def _broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def empty_state(
    rows: tuple[int, ...],
    d_v: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
) -> SoftmaxState:
    """The state of an empty block — the identity of :func:`merge_states`: ``m = −inf``, ``ℓ = 0``, ``acc = 0``.

    Args:
        rows: the shape ``(..., r)`` of ``m`` and ``ℓ`` (a tuple of non-negative integers; ``()`` for one row).
        d_v: width of the values (None for a softmax without values).
        dtype, device: of the state's tensors.

    At the edges: a 0 in ``rows`` (no rows) or ``d_v = 0`` gives empty tensors, as ``torch.full``.
    """
    if not isinstance(rows, (tuple, list, torch.Size)):
        raise TypeError(f"rows must be a tuple of non-negative integers, the shape (..., r), got {describe(rows)}")
    rows = tuple(check_int(f"rows[{i}]", r, low=0) for i, r in enumerate(rows))
    d_v = None if d_v is None else check_int("d_v", d_v, low=0)
    dtype, device = check_dtype("dtype", dtype), check_device("device", device)
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
        ``scores`` without its last axis, ``acc`` ``(..., r, d_v)``; the scores' dtype (float32 for float16 and
        bfloat16 scores: the statistics are kept in float32, as fused kernels keep them).

    At the edges: an empty block (``n = 0``) or a fully masked row gives the merge identity (``m = -inf``,
    ``ℓ = 0``, ``acc = 0``), as :func:`empty_state`.
    """
    s = as_tensor("scores", scores)
    check_ndim("scores", s, 1, "(..., r, n)")
    tensors = {"scores": s}
    if mask is not None:
        tensors["mask"] = check_mask("mask", mask, s.shape, of="the shape of scores")
    if values is not None:
        vt = tensors["values"] = as_tensor("values", values)
        check_ndim("values", vt, 2, "(..., n, d_v)")
        if vt.shape[-2] != s.shape[-1] or not _broadcasts_to(vt.shape[:-2], s.shape[:-2]):
            raise ValueError(f"values must have shape (..., n, d_v) with n = {s.shape[-1]} (the scores' last axis) "
                             f"and leading dimensions that broadcast to the scores' {tuple(s.shape[:-2])}, "
                             f"got shape {tuple(vt.shape)}")
        if vt.dtype != s.dtype:
            raise TypeError(f"values must have the dtype of scores ({s.dtype}), got {describe(vt)}")
    check_same_device(list(tensors), list(tensors.values()))
    if s.dtype in LOW_PRECISION:
        s = s.float()
    if mask is not None:
        s = s.masked_fill(~tensors["mask"], -math.inf)
    if s.shape[-1] == 0:  # an empty block: amax has nothing to reduce; its state is the merge identity
        m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype, device=s.device)
    else:
        m = s.amax(dim=-1)
    p = torch.exp(s - _safe_max(m).unsqueeze(-1))
    acc = None if values is None else p @ vt.to(p.dtype)
    return SoftmaxState(m, p.sum(dim=-1), acc)


def merge_states(a: SoftmaxState, b: SoftmaxState) -> SoftmaxState:
    r"""Exact merge of the states of two disjoint blocks of the same rows (chapter 6).

    With :math:`m = \max(m_a, m_b)`: :math:`\ell = e^{m_a - m}\ell_a + e^{m_b - m}\ell_b` and
    :math:`\mathrm{acc} = e^{m_a - m}\mathrm{acc}_a + e^{m_b - m}\mathrm{acc}_b`. The result is the state of the
    union of the blocks, whatever the split; the merge is associative and commutative (chapter 6 proves both in
    SymPy) and :func:`empty_state` is its identity.

    Raises:
        TypeError: ``a`` or ``b`` is not a :class:`SoftmaxState`.
        ValueError: one state has values (``acc``) and the other not, the shapes of ``m`` do not broadcast, the
            values' widths differ, the states are on different devices.

    At the edges: merging with an empty or fully masked state (``m = -inf``) returns the other state, without NaN.
    """
    check_instance("a", a, SoftmaxState)
    check_instance("b", b, SoftmaxState)
    if (a.acc is None) != (b.acc is None):
        got = ", ".join(f"{n}.acc {'None' if s.acc is None else tuple(s.acc.shape)}" for n, s in (("a", a), ("b", b)))
        raise ValueError(f"a and b must both have values (acc) or both not, got {got}")
    check_same_device(["a", "b"], [a.m, b.m])
    try:
        m = torch.maximum(a.m, b.m)
    except RuntimeError:
        raise ValueError(f"a and b must be states of the same rows (m shapes that broadcast), got different rows: "
                         f"m of shapes {tuple(a.m.shape)} and {tuple(b.m.shape)}") from None
    if a.acc is not None and a.acc.shape[-1] != b.acc.shape[-1]:
        raise ValueError(f"a and b must have values of one width d_v, got acc of shapes {tuple(a.acc.shape)} and "
                         f"{tuple(b.acc.shape)}")
    ms = _safe_max(m)
    ca, cb = torch.exp(a.m - ms), torch.exp(b.m - ms)
    l = ca * a.l + cb * b.l
    acc = None
    if a.acc is not None and b.acc is not None:
        acc = ca.unsqueeze(-1) * a.acc + cb.unsqueeze(-1) * b.acc
    return SoftmaxState(m, l, acc)


def state_output(state: SoftmaxState) -> torch.Tensor:
    """``acc / ℓ``: the softmax-weighted average of the values, ``(..., r, d_v)``.

    At the edges: zero for rows with ℓ = 0 (no keys, or all masked), as PyTorch's attention gives."""
    check_instance("state", state, SoftmaxState)
    if state.acc is None:
        raise ValueError("state must have values (acc), got a state without them (acc is None); "
                         "make it with softmax_state(scores, values)")
    l_safe = torch.where(state.l > 0, state.l, torch.ones_like(state.l))
    return state.acc / l_safe.unsqueeze(-1).to(state.acc.dtype)


def state_logsumexp(state: SoftmaxState) -> torch.Tensor:
    """``m + log ℓ`` = ``log Σ_j exp(s_j)`` of each row, ``(..., r)``.

    At the edges: ``-inf`` for a row with nothing visible, as ``torch.logsumexp`` of an empty row."""
    check_instance("state", state, SoftmaxState)
    return state.m + torch.log(state.l)


def online_softmax(x: ArrayLike, axis: int = -1, mask: ArrayLike | None = None, block_size: int = 1) -> ArrayLike:
    r"""Softmax by Milakov & Gimelshein's online normaliser: one streaming pass for (m, ℓ), one to normalise.

    Chapter 6. Pass 1 visits ``x`` in blocks of ``block_size`` along ``axis``, merging each block's state into a
    running one (``block_size=1`` is the paper's element-by-element recurrence
    :math:`m_j = \max(m_{j-1}, x_j)`, :math:`\ell_j = \ell_{j-1} e^{m_{j-1} - m_j} + e^{x_j - m_j}`); pass 2
    returns :math:`e^{x_i - m}/\ell`. Equal to :func:`attention_course.softmax` up to rounding.

    Args:
        x: logits (numpy or torch, floating point), any shape (a scalar is one entry).
        axis: the axis to normalise over.
        mask: optional boolean broadcastable to ``x``; False entries get weight 0, fully masked slices all zeros.
        block_size: how many entries each streaming step reads (≥ 1).

    Returns:
        Weights of the shape, kind and dtype of ``x``.

    At the edges: as :func:`attention_course.softmax` (an empty axis gives an empty result, a scalar 1, a fully
    masked slice zeros); float16 and bfloat16 are computed in float32.
    """
    as_numpy = same_kind(["x", "mask"], [x, mask] if mask is not None else [x])
    t = as_tensor("x", x)
    n = max(t.ndim, 1)  # a scalar is one entry, as torch.softmax takes it
    axis = check_int("axis", axis, low=-n, high=n - 1)
    block_size = check_int("block_size", block_size)
    mt = None if mask is None else check_mask("mask", mask, t.shape, of="the shape of x")
    check_same_device(["x", "mask"], [t] if mt is None else [t, mt])
    dtype, shape = t.dtype, t.shape
    if t.ndim == 0:
        t, mt = t.reshape(1), None if mt is None else mt.reshape(1)
    work = (t.float() if dtype in LOW_PRECISION else t).movedim(axis, -1)
    mt = None if mt is None else mt.movedim(axis, -1)
    state = empty_state(tuple(work.shape[:-1]), dtype=work.dtype, device=work.device)
    for j in range(0, work.shape[-1], block_size):
        block_mask = None if mt is None else mt[..., j : j + block_size]
        state = merge_states(state, softmax_state(work[..., j : j + block_size], mask=block_mask))
    logits = work if mt is None else work.masked_fill(~mt, -math.inf)
    l_safe = torch.where(state.l > 0, state.l, torch.ones_like(state.l))
    p = torch.exp(logits - _safe_max(state.m).unsqueeze(-1)) / l_safe.unsqueeze(-1)
    return to_output(p.movedim(-1, axis).reshape(shape).to(dtype), as_numpy)


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


def _tile_steps(x: AttentionInputs, causal: int | None, block_q: int, block_k: int) -> Iterator[TileStep]:
    """The tiled forward pass, one tile at a time; ``causal`` is the diagonal's offset (None: not causal)."""
    qt, kt, vt, mt, scale = x.q, x.k, x.v, x.mask, x.scale
    n_q, n_k, d_v = qt.shape[-2], kt.shape[-2], vt.shape[-1]
    batch = qt.shape[:-2]
    kt_t = kt.transpose(-2, -1)
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        q_blk = qt[..., i0:i1, :] * scale  # scaling one query block costs block_q · d_k, not n · d_k
        state = empty_state((*batch, i1 - i0), d_v, dtype=qt.dtype, device=qt.device)
        # causal: query i sees keys j <= i + offset (0 upper-left, as torch's is_causal; n_k - n_q lower-right),
        # so key blocks at or past i1 + offset are entirely masked and are skipped — about half the tiles of a
        # square problem. A block that sees no key at all is left with no tile: zero output, lse -inf.
        k_end = n_k if causal is None else max(0, min(n_k, i1 + causal))
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, k_end)
            s = q_blk @ kt_t[..., j0:j1]  # (..., bq, bk): the only score tile alive
            # a tile crossing the diagonal is cut by the positions it covers
            allowed = tile_mask(mt, range(i0, i1), range(j0, j1), causal=causal is not None,
                                offset=causal or 0, device=s.device)
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
    causal: bool | Alignment = False,
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
        causal: the causal mask without materialising it, its alignment named as :func:`masks.causal_mask`
            names it: ``True`` or ``"upper_left"`` (PyTorch's ``is_causal``: query ``i`` attends to keys
            ``j ≤ i``, whatever ``n_k``), or ``"lower_right"`` (the queries are the last ``n_q`` positions, as
            new tokens after a cache: ``j ≤ i + n_k − n_q``; with ``n_q > n_k`` the first queries see no key and
            give zeros). Key blocks entirely past the diagonal are skipped. Combined with ``mask`` by logical and.
        block_q, block_k: tile sizes; any positive integers (the last tile of a row or column may be smaller).

    Returns:
        :class:`TiledOutput` ``(output, lse)``: output ``(..., n_q, d_v)`` and the row log-sum-exp ``(..., n_q)``
        of the visible scores, of the inputs' kind. The weights are not returned (they would be the n_q × n_k
        matrix this function avoids); any of them is :math:`e^{s_{ij} - \mathrm{lse}_i}`. A fully masked row
        gives a zero output and ``lse = -inf``. float16/bfloat16 inputs are computed in float32 and returned in
        their dtype.

    At the edges (as ``F.scaled_dot_product_attention`` and ``torch.logsumexp``): no keys gives a zero output and
    ``lse = -inf``; no queries or a batch of 0 gives empty results; ``d_k = 0`` makes every score 0, so each row
    is the mean of the values.

    Raises:
        TypeError / ValueError: as :func:`attention_course.scaled_dot_product_attention`, and for block sizes that
            are not positive integers.
    """
    x, options = tiling_inputs(q, k, v, mask, scale, causal, block_q, block_k)
    out = torch.zeros((*x.scores_shape[:-1], x.v.shape[-1]), dtype=x.q.dtype, device=x.q.device)
    lse = torch.full(x.scores_shape[:-1], -math.inf, dtype=x.q.dtype, device=x.q.device)
    last: TileStep | None = None
    for step in _tile_steps(x, *options):
        if last is not None and step.q_start != last.q_start:
            _write(out, lse, last)
        last = step
    if last is not None:
        _write(out, lse, last)
    else:  # no queries or no keys, no tile: the (empty) scores give the result, on the autograd graph as PyTorch's
        scores = x.q @ x.k.transpose(-2, -1)
        out, lse = torch.softmax(scores, -1) @ x.v, torch.logsumexp(scores, -1)
    return TiledOutput(to_output(out.to(x.dtype), x.as_numpy), to_output(lse.to(x.dtype), x.as_numpy))


def _write(out: torch.Tensor, lse: torch.Tensor, step: TileStep) -> None:
    out[..., step.q_start : step.q_stop, :] = state_output(step.state)
    lse[..., step.q_start : step.q_stop] = state_logsumexp(step.state)


def tiled_attention_steps(q: ArrayLike, k: ArrayLike, v: ArrayLike, **options) -> Iterator[TileStep]:
    """The same computation as :func:`tiled_attention`, yielding a :class:`TileStep` after every tile (chapter 6).

    ``options`` are :func:`tiled_attention`'s: ``mask``, ``scale``, ``causal``, ``block_q``, ``block_k``.

    For figures that step through the block-by-block rescaling. Tiles come query block by query block, key
    blocks in increasing order; the last step of a query block holds its final state, whose
    :func:`state_output` is that block's output rows. States are torch tensors (scale already applied). The
    inputs are checked at the call, before the first step is asked for.

    At the edges: no queries or no keys gives no steps.
    """
    defaults = {n: p.default for n, p in inspect.signature(tiled_attention).parameters.items() if n not in "qkv"}
    if set(options) - set(defaults):
        raise TypeError(f"options must be tiled_attention's {', '.join(defaults)}; "
                        f"got unexpected {sorted(set(options) - set(defaults))}")
    settings = {**defaults, **options}  # in tiled_attention's order, as tiling_inputs takes them
    x, options = tiling_inputs(q, k, v, *settings.values())  # checked at the call, not at the first step
    return _tile_steps(x, *options)
