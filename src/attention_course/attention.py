"""Scaled dot-product attention, from a dictionary lookup to the matrix form (chapter 1).

Notation (the paper's, row vectors): queries ``q`` have shape ``(..., n_q, d_k)``, keys ``k`` ``(..., n_k, d_k)``,
values ``v`` ``(..., n_k, d_v)``. Scores ``S = q kᵀ · scale`` have shape ``(..., n_q, n_k)``; the softmax runs over
the last axis (the keys), so each row of the weights sums to one.

Masks are boolean and broadcastable to ``(..., n_q, n_k)`` with **True = may attend** (the convention of
``torch.nn.functional.scaled_dot_product_attention``). A query whose row is masked everywhere attends to
nothing: its weights are all zero and its output row is zero, with finite gradients, as in PyTorch's.

Every function accepts numpy arrays or torch tensors and returns the kind it was given.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from ._checks import (
    LOW_PRECISION,
    ArrayLike,
    as_tensor,
    attention_inputs,
    check_instance,
    check_int,
    check_mask,
    check_same_device,
    describe,
    same_kind,
    to_output,
)

__all__ = [
    "AttentionOutput",
    "softmax",
    "scaled_dot_product_attention",
    "attention_per_query",
    "hard_lookup",
    "argmax_attention",
    "attention_entropy",
]


class AttentionOutput(NamedTuple):
    """What every attention function and module of the package returns (a tuple: ``out, w = ...`` works).

    Attributes:
        output: the attention output, ``(..., n_q, d_v)`` (or the module's output layout).
        weights: the attention weights ``(..., n_q, n_k)``, each row summing to 1 (0 for a query that may attend
            to nothing); ``None`` where they were not asked for or never formed.
    """

    output: ArrayLike
    weights: ArrayLike | None


def _softmax_torch(x: torch.Tensor, dim: int, mask: torch.Tensor | None) -> torch.Tensor:
    """Stable softmax along ``dim``; masked-out entries get weight 0, fully masked rows give all zeros."""
    if x.shape[dim] == 0:  # nothing to normalise: an empty result of x's shape, as torch.softmax
        return x.clone()
    work = x.float() if x.dtype in LOW_PRECISION else x  # fp16/bf16: accumulate in float32
    if mask is not None:
        # The most negative finite number (not -inf): a fully masked row stays finite (uniform), and the
        # multiplication by the mask below sets it to exactly zero with zero, finite gradients.
        work = work.masked_fill(~mask, torch.finfo(work.dtype).min)
    shifted = work - work.amax(dim=dim, keepdim=True).detach()  # shift by the max: exp never overflows
    e = torch.exp(shifted)
    p = e / e.sum(dim=dim, keepdim=True)
    if mask is not None:
        p = p * mask
    return p.to(x.dtype)


def softmax(x: ArrayLike, axis: int = -1, mask: ArrayLike | None = None) -> ArrayLike:
    r"""Numerically stable softmax :math:`p_i = e^{x_i - m} / \sum_j e^{x_j - m}` with :math:`m = \max_j x_j`.

    Introduced in chapter 1. Subtracting the maximum leaves the result unchanged (numerator and denominator
    both gain the factor :math:`e^{-m}`) but keeps every exponent ≤ 0, so logits of ±1e4 do not overflow.
    float16 and bfloat16 inputs are computed in float32 and returned in their own dtype.

    Args:
        x: logits of any shape, floating point (numpy array or torch tensor).
        axis: the axis to normalise over (default: the last one, the keys).
        mask: optional boolean mask broadcastable to ``x.shape``; False entries get weight exactly 0. A slice
            whose entries are all False returns all zeros (not NaN).

    Returns:
        Weights of the same shape, kind and dtype as ``x``; non-negative, each slice summing to 1
        (or to 0 where fully masked).

    At the edges: an empty axis (``x`` of shape ``(3, 0)``) gives an empty result of ``x``'s shape and a scalar
    gives 1, as ``torch.softmax``; a fully masked slice gives zeros, as PyTorch's
    ``scaled_dot_product_attention`` does for a fully masked row (``torch.softmax`` of ``-inf`` gives NaN).
    """
    as_numpy = same_kind(["x", "mask"], [x, mask] if mask is not None else [x])
    t = as_tensor("x", x)
    n = max(t.ndim, 1)  # a scalar is one entry, as torch.softmax takes it
    axis = check_int("axis", axis, low=-n, high=n - 1)
    m = None if mask is None else check_mask("mask", mask, t.shape, of="the shape of x")
    check_same_device(["x", "mask"], [t] if m is None else [t, m])
    if t.ndim == 0:
        return to_output(_softmax_torch(t.reshape(1), 0, None if m is None else m.reshape(1)).reshape(()), as_numpy)
    return to_output(_softmax_torch(t, axis, m), as_numpy)


def scaled_dot_product_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    scale: float | None = None,
) -> AttentionOutput:
    r"""Attention(Q, K, V) = softmax(Q Kᵀ · scale) V, returning the output and the weights (chapter 1).

    The from-scratch version the course derives; it equals ``torch.nn.functional.scaled_dot_product_attention``
    (tested in ``tests/test_attention.py``) and additionally returns the attention weights.

    Args:
        q: queries, shape ``(..., n_q, d_k)``.
        k: keys, shape ``(..., n_k, d_k)``.
        v: values, shape ``(..., n_k, d_v)``.
        mask: optional boolean, broadcastable to ``(..., n_q, n_k)``; True = may attend.
        scale: multiplies the scores; default :math:`1/\sqrt{d_k}`.

    Returns:
        :class:`AttentionOutput` ``(output, weights)`` with shapes ``(..., n_q, d_v)`` and ``(..., n_q, n_k)``, of
        the kind (numpy or torch) of the inputs. Each row of ``weights`` is non-negative and sums to 1, so each
        output row is a convex combination of the rows of ``v``. A fully masked query row has zero weights and a
        zero output. float16/bfloat16 inputs are computed in float32 and returned in their own dtype.

    At the edges (each as ``torch.nn.functional.scaled_dot_product_attention``): no keys (``n_k = 0``) gives a
    zero output and ``(..., n_q, 0)`` weights; no queries or a batch of 0 gives empty results; ``d_k = 0`` makes
    every score 0, so each output row is the mean of the values.

    Raises:
        TypeError: mixed numpy/torch inputs, non-floating or mismatched dtypes, a non-boolean mask, a scale
            that is not a number.
        ValueError: fewer than 2 dimensions, d_k of q and k differ, n_k of k and v differ, batch dimensions or
            the mask not broadcastable, tensors on different devices, a NaN or infinite scale.
    """
    x = attention_inputs(q, k, v, mask, scale)
    scores = (x.q @ x.k.transpose(-2, -1)) * x.scale
    weights = _softmax_torch(scores, -1, x.mask)
    out = weights @ x.v
    return AttentionOutput(to_output(out.to(x.dtype), x.as_numpy), to_output(weights.to(x.dtype), x.as_numpy))


def attention_per_query(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, scale: float | None = None
) -> ArrayLike:
    r"""The per-query sum :math:`a(q) = \sum_i \frac{e^{s_i}}{\sum_j e^{s_j}} v_i`, :math:`s_i = q\cdot k_i` · scale.

    The loop form of chapter 1, one query and one key at a time, written for reading, not for speed. It equals
    the matrix form :func:`scaled_dot_product_attention` (chapter 1 proves it in SymPy; the tests check it).

    Args:
        q: queries, shape ``(n_q, d_k)``; k: keys ``(n_k, d_k)``; v: values ``(n_k, d_v)``.
        scale: multiplies the scores; default :math:`1/\sqrt{d_k}`.

    Returns:
        Outputs of shape ``(n_q, d_v)``, of the inputs' kind and dtype.

    At the edges: as :func:`scaled_dot_product_attention` (no keys: zero rows; ``d_k = 0``: the mean of the
    values); float16/bfloat16 are computed in float32.
    """
    x = attention_inputs(q, k, v, None, scale)
    for name, t, layout in (("q", x.q, "(n_q, d_k)"), ("k", x.k, "(n_k, d_k)"), ("v", x.v, "(n_k, d_v)")):
        if t.ndim != 2:
            raise ValueError(f"{name} must have shape {layout} (2 dimensions), got shape {tuple(t.shape)}")
    rows = []
    for query in x.q:
        scores = [(query @ key) * x.scale for key in x.k]  # 0-d tensors: gradients reach q, k and v
        if not scores:  # no keys: a zero row, as PyTorch's
            rows.append(torch.zeros_like(x.v[0] if len(x.v) else x.v.new_zeros(x.v.shape[-1])))
            continue
        m = torch.stack(scores).max().detach()  # the stabilising shift (it cancels, so no gradient)
        exps = [torch.exp(s - m) for s in scores]
        total = sum(exps)
        rows.append(sum((e / total) * value for e, value in zip(exps, x.v, strict=True)))
    out = torch.stack(rows) if rows else x.v.new_zeros(0, x.v.shape[-1])
    return to_output(out.to(x.dtype), x.as_numpy)


def hard_lookup(query: Hashable, keys: Sequence[Hashable], values: Sequence[np.ndarray]) -> np.ndarray:
    """A Python-dictionary lookup written as attention with one-hot weights (chapter 1).

    The weight of key ``i`` is 1 if ``keys[i] == query`` and 0 otherwise; the result is ``Σ_i w_i v_i``.

    Args:
        query: the key to look up.
        keys: ``n_k`` distinct keys.
        values: ``n_k`` value vectors of equal shape ``(d_v,)``.

    Returns:
        The value stored under ``query``, shape ``(d_v,)``.

    Raises:
        TypeError: keys or values not a sequence, a key or the query not hashable (as a ``dict`` would).
        ValueError: keys and values differ in length, keys repeat, values are not numeric vectors of one shape.
        KeyError: the query is not among the keys (as a ``dict`` would; so are no keys at all).
    """
    check_instance("keys", keys, (Sequence, np.ndarray))
    check_instance("values", values, (Sequence, np.ndarray, torch.Tensor))
    if not isinstance(query, Hashable):
        raise TypeError(f"query must be hashable, as a dict key, got {describe(query)}")
    if len(keys) != len(values):
        raise ValueError(f"keys and values must pair up, one value per key: got {len(keys)} keys and "
                         f"{len(values)} values")
    unhashable = [key for key in keys if not isinstance(key, Hashable)]
    if unhashable:
        raise TypeError(f"keys must be hashable, as dict keys, got {describe(unhashable[0])}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"keys must be distinct for a hard lookup, got {list(keys)!r}")
    weights = np.array([1.0 if key == query else 0.0 for key in keys])
    if weights.sum() == 0:
        raise KeyError(query)
    arrays = [np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v) for v in values]
    if any(a.ndim != 1 or a.dtype.kind not in "biuf" for a in arrays):
        got = ", ".join(describe(v) for v in values)
        raise ValueError(f"values must be real vectors of one shape (d_v,), got {got}")
    try:
        stacked = np.stack([a.astype(float) for a in arrays])
    except ValueError:
        got = ", ".join(describe(v) for v in values)
        raise ValueError(f"values must be real vectors of one shape (d_v,), got {got}") from None
    return weights @ stacked


def argmax_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, scale: float | None = None) -> AttentionOutput:
    r"""Hard attention on vectors: each query takes the value of its highest-scoring key (chapter 1).

    The weights are one-hot at :math:`\arg\max_i q\cdot k_i` (the first such key on a tie, as ``torch.argmax``):
    the limit of ``softmax(scores / τ)`` as the temperature τ → 0 for distinct scores, and the lookup of
    :func:`hard_lookup` with dot products in place of equality. The arg-max is piecewise constant, so no
    gradient reaches ``q`` or ``k`` through it; ``v`` gets a gradient only in the rows that were picked.

    Args:
        q: queries ``(..., n_q, d_k)``; k: keys ``(..., n_k, d_k)``; v: values ``(..., n_k, d_v)``.
        scale: multiplies the scores; default :math:`1/\sqrt{d_k}` (a positive scale does not move the arg-max).

    Returns:
        :class:`AttentionOutput` ``(output, weights)`` as :func:`scaled_dot_product_attention`, with one-hot rows.

    At the edges: no keys (``n_k = 0``) gives a zero output and ``(..., n_q, 0)`` weights, as
    :func:`scaled_dot_product_attention`.
    """
    x = attention_inputs(q, k, v, None, scale)
    scores = (x.q @ x.k.transpose(-2, -1)) * x.scale
    if scores.shape[-1] == 0:
        weights = scores.detach().clone()
    else:
        weights = torch.zeros_like(scores).scatter_(-1, scores.detach().argmax(-1, keepdim=True), 1.0)
    out = weights @ x.v
    return AttentionOutput(to_output(out.to(x.dtype), x.as_numpy), to_output(weights.to(x.dtype), x.as_numpy))


def attention_entropy(weights: ArrayLike, axis: int = -1) -> ArrayLike:
    r"""Entropy :math:`H(p) = -\sum_i p_i \log p_i` of each attention row, in nats (``0 log 0 = 0``).

    Ranges from 0 (one-hot: a hard lookup) to :math:`\log n_k` (uniform: an average). Shape: ``weights`` without
    ``axis``; kind and dtype: ``weights``'s.

    At the edges: a row of no keys (``n_k = 0``) and a fully masked (all-zero) row have entropy 0; float16 and
    bfloat16 are summed in float32.
    """
    as_numpy = isinstance(weights, np.ndarray)
    p = as_tensor("weights", weights)
    if p.ndim == 0:
        raise ValueError(f"weights must have at least one dimension (..., n_k), got {describe(p)}")
    axis = check_int("axis", axis, low=-p.ndim, high=p.ndim - 1)
    work = p.float() if p.dtype in LOW_PRECISION else p
    h = torch.special.entr(work).sum(dim=axis)  # entr(p) = -p log p, entr(0) = 0
    return to_output(h.to(p.dtype), as_numpy)
