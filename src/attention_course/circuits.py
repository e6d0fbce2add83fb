"""What a head computes, read off its weights: the QK and OV circuits (chapters 3 and 4).

A head's scores are :math:`x_a W^Q {W^K}^\\top x_b^\\top`, so it sees :math:`W^Q` and :math:`W^K` only through their
product, the **QK circuit** :math:`W_{QK} = W^Q {W^K}^\\top` (``d_model × d_model``, rank ≤ d_k); what it writes for
each unit of weight on a token is that token times the **OV circuit** :math:`W_{OV} = W^V W^O` (Elhage et al.,
2021). Both functions take stacks of matrices, one per head, so :func:`head_weights` of a
:class:`~attention_course.multihead.MultiHeadAttention` feeds them directly::

    hw = head_weights(mha, torch.float64)
    qk_circuit(hw.w_q, hw.w_k)   # (num_heads, embed_dim, kdim)
    ov_circuit(hw.w_v, hw.w_o)   # (num_heads, vdim, embed_dim)
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, NamedTuple

import torch

from ._checks import (
    ArrayLike,
    as_tensor,
    check_dtype,
    check_instance,
    check_ndim,
    check_same_device,
    check_tensor,
    describe,
    same_kind,
    to_output,
)

if TYPE_CHECKING:
    from .multihead import MultiHeadAttention

__all__ = ["HeadWeights", "head_weights", "ov_circuit", "qk_circuit", "reparametrized"]


class HeadWeights(NamedTuple):
    """Every head's matrices in the paper's orientation (``x @ W``), from :func:`head_weights`.

    Attributes:
        w_q: ``(num_heads, embed_dim, d_k)``; ``w_q[i]`` is :math:`W_i^Q`, columns ``i·d_k … (i+1)·d_k − 1`` of
            the layer's :math:`W^Q`.
        w_k: ``(num_heads, kdim, d_k)``; ``w_k[i]`` is the :math:`W^K` that query head ``i`` uses (with grouped-
            query attention, the key head of its group: heads of one group share it).
        w_v: ``(num_heads, vdim, d_k)``; likewise for :math:`W^V`.
        w_o: ``(num_heads, d_k, embed_dim)``; ``w_o[i]`` is :math:`W_i^O`, the rows of :math:`W^O` that head ``i``'s
            output multiplies.
    """

    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor


def head_weights(mha: MultiHeadAttention, dtype: torch.dtype | None = None) -> HeadWeights:
    """Each head's :math:`W_i^Q, W_i^K, W_i^V, W_i^O` of a multi-head layer, detached (chapter 4).

    Args:
        mha: a :class:`~attention_course.multihead.MultiHeadAttention`.
        dtype: return copies in this dtype (e.g. ``torch.float64``, to form products of float32 weights without
            rounding noise); default: the parameters' dtype.
    """
    from .multihead import MultiHeadAttention

    check_instance("mha", mha, MultiHeadAttention)
    dtype = None if dtype is None else check_dtype("dtype", dtype)
    w_q, w_k, w_v = (w.detach().to(dtype) for w in mha.in_projections())
    w_out = mha.out_proj.weight.detach().to(dtype)
    h, h_kv, d = mha.num_heads, mha.num_kv_heads, mha.head_dim
    group = h // h_kv

    def per_head(w: torch.Tensor, heads: int) -> torch.Tensor:  # (heads·d, in) -> (heads, in, d)
        return w.T.unflatten(1, (heads, d)).permute(1, 0, 2)

    return HeadWeights(
        w_q=per_head(w_q, h),
        w_k=per_head(w_k, h_kv).repeat_interleave(group, dim=0),
        w_v=per_head(w_v, h_kv).repeat_interleave(group, dim=0),
        w_o=w_out.T.unflatten(0, (h, d)),
    )


def _stacks(
    names: tuple[str, str], a: ArrayLike, b: ArrayLike, share: tuple[str, int, int]
) -> tuple[bool, torch.Tensor, torch.Tensor]:
    """Two stacks of matrices of one kind, dtype and device, whose leading (head) dimensions broadcast and which
    share a size: ``share = (its name, a's dimension, b's dimension)``. Returns whether they were NumPy arrays, and
    both as tensors."""
    as_numpy = same_kind(names, [a, b])
    ta, tb = as_tensor(names[0], a), as_tensor(names[1], b)
    for name, t in zip(names, (ta, tb), strict=True):
        check_ndim(name, t, 2, "(a matrix or a stack of matrices (..., rows, cols))")
    if ta.dtype != tb.dtype:
        raise TypeError(f"{names[0]} and {names[1]} must share a dtype, got {ta.dtype} and {tb.dtype}")
    check_same_device(names, (ta, tb))
    try:
        torch.broadcast_shapes(ta.shape[:-2], tb.shape[:-2])
    except RuntimeError:
        raise ValueError(f"{names[0]} and {names[1]} must have leading (head) dimensions that broadcast, got "
                         f"{describe(ta)} and {describe(tb)}") from None
    inner, side_a, side_b = share
    if ta.shape[side_a] != tb.shape[side_b]:
        side = {-1: "last", -2: "second-to-last"}
        raise ValueError(f"{names[0]} and {names[1]} must share {inner} (the {side[side_a]} dimension of "
                         f"{names[0]}, the {side[side_b]} of {names[1]}), got {tuple(ta.shape)} and {tuple(tb.shape)}")
    return as_numpy, ta, tb


def qk_circuit(w_q: ArrayLike, w_k: ArrayLike) -> ArrayLike:
    r""":math:`W_{QK} = W^Q {W^K}^\top`: the bilinear form whose value :math:`x_a W_{QK} x_b^\top` is the (unscaled,
    bias-free) score of query token ``a`` for key token ``b`` (chapter 3). Rank ≤ d_k.

    Args:
        w_q: ``(..., d_model, d_k)``; w_k: ``(..., d_kv, d_k)`` (numpy or torch, the same kind).

    Returns:
        ``(..., d_model, d_kv)``, of the inputs' kind and dtype.

    At the edges: ``d_k = 0`` gives the zero matrix (an empty sum), as ``torch.matmul``.
    """
    as_numpy, w_q, w_k = _stacks(("w_q", "w_k"), w_q, w_k, share=("d_k", -1, -1))
    return to_output(w_q @ w_k.transpose(-2, -1), as_numpy)


def ov_circuit(w_v: ArrayLike, w_o: ArrayLike) -> ArrayLike:
    r""":math:`W_{OV} = W^V W^O`: what a head writes to its output for each unit of weight on a token (chapter 3).
    Rank ≤ d_v.

    Args:
        w_v: ``(..., d_model, d_v)``; w_o: ``(..., d_v, d_out)`` (numpy or torch, the same kind).

    Returns:
        ``(..., d_model, d_out)``, of the inputs' kind and dtype.

    At the edges: ``d_v = 0`` gives the zero matrix (an empty sum), as ``torch.matmul``.
    """
    as_numpy, w_v, w_o = _stacks(("w_v", "w_o"), w_v, w_o, share=("d_v", -1, -2))
    return to_output(w_v @ w_o, as_numpy)


def reparametrized(mha: MultiHeadAttention, m: torch.Tensor, n: torch.Tensor | None = None) -> MultiHeadAttention:
    r"""A copy of ``mha`` that computes the same function through other factors (chapter 4, §4.1; its lab, §4.D).

    Head :math:`i` of the copy has :math:`W_i^Q M_i`, :math:`W_i^K M_i^{-\top}`, :math:`W_i^V N_i` and
    :math:`N_i^{-1} W_i^O`, and biases :math:`b_{q,i} M_i`, :math:`b_{k,i} M_i^{-\top}`, :math:`b_{v,i} N_i`: its
    circuits :math:`W_{QK,i}` and :math:`W_{OV,i}`, hence its scores, weights and output, are those of ``mha``
    (up to rounding), while the factors themselves can be far apart. The copy's matrices are set through
    PyTorch's fused layout (``in_proj_weight`` stacks :math:`{W^Q}^\top, {W^K}^\top, {W^V}^\top`, head by head),
    which the caller never touches.

    Args:
        mha: a :class:`~attention_course.multihead.MultiHeadAttention` with one key and value head per query head.
        m: ``(num_heads, head_dim, head_dim)``, invertible: the query–key side.
        n: ``(num_heads, head_dim, head_dim)``, invertible: the value–output side; default: identities.

    Raises:
        TypeError: ``mha`` not a ``MultiHeadAttention``; ``m`` or ``n`` not a floating-point tensor.
        ValueError: grouped heads (a key head shared by several query heads cannot take each one's
            :math:`M_i`); ``m`` or ``n`` of another shape, on another device, or singular.
    """
    from .multihead import MultiHeadAttention

    check_instance("mha", mha, MultiHeadAttention)
    h, d = mha.num_heads, mha.head_dim
    if mha.num_kv_heads != h:
        raise ValueError(f"mha must have one key and value head per query head to be reparametrized head by head, "
                         f"got {h} query heads sharing {mha.num_kv_heads} key/value heads")
    like = mha.out_proj.weight
    mats = {}
    for name, t in (("m", m), ("n", n)):
        if t is None:
            t = torch.eye(d, dtype=like.dtype, device=like.device).expand(h, d, d)
        check_tensor(name, t, ndim=3, layout="(num_heads, head_dim, head_dim)")
        if tuple(t.shape) != (h, d, d):
            raise ValueError(f"{name} must be (num_heads, head_dim, head_dim) = {(h, d, d)}, got {tuple(t.shape)}")
        check_same_device(("mha", name), [like, t])
        t = t.detach().to(like.dtype)
        singular = torch.linalg.matrix_rank(t.double()) < d
        if singular.any():
            raise ValueError(f"{name} must hold invertible matrices, got a singular one for head(s) "
                             f"{torch.nonzero(singular).flatten().tolist()}")
        mats[name] = t
    m_t, n_t = mats["m"], mats["n"]
    m_inv_t = torch.linalg.inv(m_t).transpose(-1, -2)
    n_inv = torch.linalg.inv(n_t)
    new = copy.deepcopy(mha)

    def times(w: torch.Tensor, a: torch.Tensor) -> None:  # stored (h·d, ...) = (W a)ᵀ per head: aᵀ Wᵀ
        w.copy_((a.transpose(-1, -2) @ w.reshape(h, d, -1)).reshape(w.shape))

    with torch.no_grad():
        w_q, w_k, w_v = new.in_projections()
        for w, a in ((w_q, m_t), (w_k, m_inv_t), (w_v, n_t)):
            times(w, a)
        if new.in_proj_bias is not None:
            widths = [mha.embed_dim, mha.kv_dim, mha.kv_dim]
            for b, a in zip(new.in_proj_bias.split(widths), (m_t, m_inv_t, n_t), strict=True):
                times(b, a)
        w_out = new.out_proj.weight  # stored (W^O)ᵀ, columns of head i = (W_i^O)ᵀ; (N⁻¹ W_i^O)ᵀ = (W_i^O)ᵀ N⁻ᵀ
        w_out.copy_((w_out.unflatten(1, (h, d)).transpose(0, 1) @ n_inv.transpose(-1, -2)).transpose(0, 1)
                    .flatten(1))
    return new
