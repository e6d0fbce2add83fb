"""FlashAttention in PyTorch operations (chapter 6): the tiled forward pass and its tiled backward pass.

:func:`~attention_course.tiled.tiled_attention` never stores the ``n_q × n_k`` scores, but autograd through its
Python loop saves every tile for the backward pass, so training with it needs quadratic memory after all.
:func:`flash_attention` is the same forward pass wrapped in a ``torch.autograd.Function`` that saves only what
FlashAttention-2 saves — ``Q``, ``K``, ``V``, the output ``O`` and each row's log-sum-exp (Dao, 2024;
FlashAttention-1 kept each row's max and sum apart) — and recomputes each tile of the weights in the backward
pass from them (Dao et al., 2022, §3.1 and Algorithm 4).

The backward pass (:func:`flash_attention_backward`), with ``S = scale · Q Kᵀ``, ``P = softmax(S)`` by rows and
``O = P V``, given ``dO = ∂L/∂O``:

    dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP − D),   D = rowsum(dO ∘ O),   dQ = scale · dS K,   dK = scale · dSᵀ Q,

where ``D_i = Σ_j P_ij dP_ij`` (the softmax Jacobian's correction) equals ``Σ_c dO_ic O_ic`` because
``O_i = Σ_j P_ij V_j``; chapter 6 proves the identity for symbolic sizes. Each tile needs only its block of
``Q``, ``K``, ``V``, ``dO``, the saved ``lse`` (``P_ij = exp(S_ij − lse_i)``) and ``D``, so the memory beyond
inputs, outputs and gradients is one tile. The loop order is FlashAttention's backward (the same in versions 1
and 2): key blocks outside, each accumulating its ``dK`` and ``dV``; query blocks inside, adding into ``dQ``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._checks import AttentionInputs, check_tensor, tiling_inputs
from .masks import Alignment, tile_mask
from .tiled import TiledOutput, tiled_attention

__all__ = ["flash_attention", "flash_attention_backward"]

_LAYOUTS = {"q": "(..., n_q, d_k)", "k": "(..., n_k, d_k)", "v": "(..., n_k, d_v)"}


def _backward(
    x: AttentionInputs,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    causal: int | None,
    block_q: int,
    block_k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV over the common batch, recomputing each tile of P from lse; ``causal`` is the diagonal's offset
    (query ``i`` sees keys ``j ≤ i + causal``; None: not causal)."""
    q, k, v, scale = x.q, x.k, x.v, x.scale
    n_q, n_k = q.shape[-2], k.shape[-2]
    dq, dk, dv = (torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    d_row = (grad_out * out).sum(-1, keepdim=True)  # D = rowsum(dO ∘ O), (..., n_q, 1)
    # A fully masked row has lse = -inf and P = 0: use +inf so that exp(S - lse) is 0 there, not NaN.
    lse = torch.where(torch.isneginf(lse), math.inf, lse).unsqueeze(-1)
    for j0 in range(0, n_k, block_k):
        j1 = min(j0 + block_k, n_k)
        k_blk, v_blk = k[..., j0:j1, :], v[..., j0:j1, :]
        dk_blk, dv_blk = dk[..., j0:j1, :], dv[..., j0:j1, :]  # views: accumulate in place
        first = 0 if causal is None else max(0, j0 - causal)  # queries before it see none of these keys
        for i0 in range(first - first % block_q, n_q, block_q):
            i1 = min(i0 + block_q, n_q)
            q_blk, do_blk = q[..., i0:i1, :], grad_out[..., i0:i1, :]
            s = (q_blk * scale) @ k_blk.transpose(-2, -1)  # as the forward pass computed it
            allowed = tile_mask(x.mask, range(i0, i1), range(j0, j1), causal=causal is not None,
                                offset=causal or 0, device=q.device)
            if allowed is not None:
                s = s.masked_fill(~allowed, -math.inf)
            p = torch.exp(s - lse[..., i0:i1, :])  # the tile of the weights, recomputed
            dv_blk += p.transpose(-2, -1) @ do_blk
            ds = p * (do_blk @ v_blk.transpose(-2, -1) - d_row[..., i0:i1, :])
            dq[..., i0:i1, :] += scale * (ds @ k_blk)
            dk_blk += scale * (ds.transpose(-2, -1) @ q_blk)
    return dq, dk, dv


class _FlashAttention(torch.autograd.Function):
    """Saves (Q, K, V, O, lse); recomputes the weights tile by tile in backward."""

    @staticmethod
    def forward(ctx: Any, q, k, v, mask, scale, causal, block_q, block_k):  # noqa: ANN001, ANN205 -- autograd API
        x, (_, block_q, block_k) = tiling_inputs(q, k, v, mask, scale, causal, block_q, block_k)
        # tiled.py's forward pass, in the compute dtype (float32 for 16-bit inputs), so that the saved output
        # and log-sum-exp are those the backward pass recomputes the weights from
        out, lse = tiled_attention(x.q, x.k, x.v, x.mask, x.scale, causal=causal, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (mask, scale, causal, block_q, block_k)  # causal as given: its alignment, not its offset
        ctx.mark_non_differentiable(lse)
        return out.to(x.dtype), lse.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_lse: torch.Tensor):  # noqa: ANN205 -- autograd API
        q, k, v, out, lse = ctx.saved_tensors
        mask, scale, causal, block_q, block_k = ctx.options
        x, (offset, _, _) = tiling_inputs(q, k, v, mask, scale, causal, block_q, block_k)
        grads = _backward(x, out, lse, grad_out.to(x.q.dtype), offset, block_q, block_k)
        dq, dk, dv = (g.sum_to_size(t.shape).to(t.dtype) for g, t in zip(grads, (q, k, v), strict=True))
        return dq, dk, dv, None, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    *,
    causal: bool | Alignment = False,
    block_q: int = 128,
    block_k: int = 128,
) -> TiledOutput:
    r"""Attention(Q, K, V) = softmax(Q Kᵀ · scale) V, forward and backward tile by tile (chapter 6).

    The output equals :func:`~attention_course.tiled.tiled_attention`'s (the same loop), but autograd sees one
    operation that saves ``Q``, ``K``, ``V``, ``O`` and ``lse`` — linear in ``n`` — and whose backward pass is
    :func:`flash_attention_backward`. Training memory is then linear in ``n`` as well.

    Args:
        q: queries ``(..., n_q, d_k)``; k: keys ``(..., n_k, d_k)``; v: values ``(..., n_k, d_v)``; floating
            torch tensors on one device, batch dimensions broadcasting.
        mask: optional boolean, broadcastable to ``(..., n_q, n_k)``, True = may attend.
        scale: multiplies the scores; default :math:`1/\sqrt{d_k}`.
        causal: the causal mask, its alignment named: ``True`` or ``"upper_left"`` (PyTorch's ``is_causal``) or
            ``"lower_right"`` (the queries are the last ``n_q`` positions), as :func:`tiled_attention`; combined
            with ``mask``.
        block_q, block_k: tile sizes, positive integers.

    Returns:
        :class:`~attention_course.tiled.TiledOutput` ``(output, lse)``; ``lse`` carries no gradient. A fully
        masked row gives a zero output, ``lse = -inf`` and zero gradients. float16/bfloat16 are computed in
        float32, as :func:`~attention_course.tiled.tiled_attention` does.

    Raises:
        TypeError: an input that is not a torch tensor (numpy arrays have no gradients), and as
            :func:`~attention_course.tiled.tiled_attention`. ValueError: as
            :func:`~attention_course.tiled.tiled_attention`.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, layout=_LAYOUTS[name])
    tiling_inputs(q, k, v, mask, scale, causal, block_q, block_k)  # every check, before autograd sees the call
    out, lse = _FlashAttention.apply(q, k, v, mask, scale, causal, block_q, block_k)
    return TiledOutput(out, lse)


def flash_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    *,
    causal: bool | Alignment = False,
    block_q: int = 128,
    block_k: int = 128,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dQ, dK, dV)`` of attention from the saved ``(Q, K, V, O, lse)`` and ``dO``, tile by tile (chapter 6).

    What :func:`flash_attention`'s backward pass runs, callable on its own to check each formula of the module
    docstring against autograd.

    Args:
        q, k, v, mask, scale, causal, block_q, block_k: as :func:`flash_attention`.
        out: ``(..., n_q, d_v)``, the output; lse: ``(..., n_q)``, the row log-sum-exp, both as
            :func:`flash_attention` or :func:`~attention_course.tiled.tiled_attention` returned them.
        grad_out: ``(..., n_q, d_v)``, ∂L/∂O.

    Returns:
        ``(dq, dk, dv)``, shaped and typed as ``q``, ``k``, ``v`` (summed over broadcast batch dimensions).

    Raises:
        TypeError: a non-tensor or a dtype unlike ``q``'s. ValueError: shapes that do not fit, and as
            :func:`flash_attention`.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, layout=_LAYOUTS[name])
    x, (causal, block_q, block_k) = tiling_inputs(q, k, v, mask, scale, causal, block_q, block_k)
    out_shape = (*x.scores_shape[:-1], x.v.shape[-1])
    for name, t, shape, layout in (("out", out, out_shape, "(..., n_q, d_v)"),
                                   ("lse", lse, x.scores_shape[:-1], "(..., n_q)"),
                                   ("grad_out", grad_out, out_shape, "(..., n_q, d_v)")):
        check_tensor(name, t, layout=layout)
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name} must have shape {layout} = {tuple(shape)}, got {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have the dtype of q ({q.dtype}), got {t.dtype}")
    grads = _backward(x, out.to(x.q.dtype), lse.to(x.q.dtype), grad_out.to(x.q.dtype), causal, block_q, block_k)
    return tuple(g.sum_to_size(t.shape).to(t.dtype) for g, t in zip(grads, (q, k, v), strict=True))
