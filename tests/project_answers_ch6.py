"""Chapter 6's project (exercise 6.5, FlashAttention's forward and backward passes tile by tile): plausible wrong
answers, which its check must reject, and correct answers written differently from solutions/ch06.py, which it must
accept (tests/test_exercises.py loads both)."""

from __future__ import annotations

import math

import torch


def _allowed(i0, i1, j0, j1, offset=0):
    """The causal tile: query i sees keys j <= i + offset (offset 0: upper left, as PyTorch's is_causal)."""
    return torch.arange(j0, j1)[None, :] <= torch.arange(i0, i1)[:, None] + offset


def _starts(n, block, drop_tail):
    return range(0, n - n % block if drop_tail else n, block)


def _forward(q, k, v, block_q, block_k, causal, *, stale_max=False, drop_tail=False, offset=0, scale=None):
    """(out, lse), query tiles outside, key blocks inside; every key block visited, the causal ones masked."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    outs, lses = [], []
    for i0 in range(0, q.shape[-2], block_q):
        q_tile = q[..., i0:i0 + block_q, :] * scale
        i1 = i0 + q_tile.shape[-2]
        m = torch.full(q_tile.shape[:-1], -math.inf, dtype=q.dtype)
        ell = torch.zeros(q_tile.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(*q_tile.shape[:-1], v.shape[-1], dtype=q.dtype)
        for j0 in _starts(k.shape[-2], block_k, drop_tail):
            j1 = min(j0 + block_k, k.shape[-2])
            s = q_tile @ k[..., j0:j1, :].transpose(-2, -1)
            if causal:
                s = s.masked_fill(~_allowed(i0, i1, j0, j1, offset), -math.inf)
            if stale_max and j0 > 0:  # the first block's max kept as a fixed shift: exact until e^{s - m} overflows
                m_new = m
            else:
                m_new = torch.maximum(m, s.amax(-1))
            rescale, p = torch.exp(m - m_new), torch.exp(s - m_new[..., None])
            ell, acc, m = rescale * ell + p.sum(-1), rescale[..., None] * acc + p @ v[..., j0:j1, :], m_new
        outs.append(acc / ell[..., None])
        lses.append(m + torch.log(ell))
    return torch.cat(outs, -2), torch.cat(lses, -1)


def _backward(q, k, v, out, lse, grad_out, block_q, block_k, causal, *, d_of_block=False, scale=None):
    """(dq, dk, dv), key blocks outside, query tiles inside, as the solution."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    d_row = (grad_out * out).sum(-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, k.shape[-2], block_k):
        j1 = min(j0 + block_k, k.shape[-2])
        for i0 in range(0, q.shape[-2], block_q):
            i1 = min(i0 + block_q, q.shape[-2])
            q_tile, do_tile = q[..., i0:i1, :], grad_out[..., i0:i1, :]
            s = q_tile @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(~_allowed(i0, i1, j0, j1), -math.inf)
            p = torch.exp(s - lse[..., i0:i1, None])
            dp = do_tile @ v[..., j0:j1, :].transpose(-2, -1)
            # the mistake: D as Σ_j P_ij dP_ij over this key block's j only, not over the whole row
            d_tile = (p * dp).sum(-1, keepdim=True) if d_of_block else d_row[..., i0:i1, :]
            ds = p * (dp - d_tile)
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ do_tile
            dq[..., i0:i1, :] += scale * ds @ k[..., j0:j1, :]
            dk[..., j0:j1, :] += scale * ds.transpose(-2, -1) @ q_tile
    return dq, dk, dv


def _flash(q, k, v, grad_out, block_q, block_k, causal, *, d_of_block=False, scale=None, **forward_options):
    out, lse = _forward(q, k, v, block_q, block_k, causal, scale=scale, **forward_options)
    return (out, lse, *_backward(q, k, v, out, lse, grad_out, block_q, block_k, causal, d_of_block=d_of_block,
                                 scale=scale))


def _backward_all_scores(q, k, v, grad_out, block_q, block_k, causal):
    """The forward pass tiled, the backward pass on the whole n_q × n_k matrix: right values, quadratic memory."""
    out, lse = _forward(q, k, v, block_q, block_k, causal)
    scale = 1 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        s = s.masked_fill(~_allowed(0, q.shape[-2], 0, k.shape[-2]), -math.inf)
    p = torch.exp(s - lse[..., None])
    ds = p * (grad_out @ v.transpose(-2, -1) - (grad_out * out).sum(-1, keepdim=True))
    return out, lse, scale * ds @ k, scale * ds.transpose(-2, -1) @ q, p.transpose(-2, -1) @ grad_out


def _autograd_through_tiles(q, k, v, grad_out, block_q, block_k, causal):
    """The tiled forward pass, differentiated by autograd: right values, but every tile is kept for backward."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        out, lse = _forward(q, k, v, block_q, block_k, causal)
        grads = torch.autograd.grad(out, (q, k, v), grad_out)
    return (out.detach(), lse.detach(), *grads)


def _scales_q_in_place(q, k, v, grad_out, block_q, block_k, causal):
    scale = 1 / math.sqrt(q.shape[-1])
    q.mul_(scale)  # the scale folded into q once, in the caller's tensor: right values, a changed input
    out, lse, dq, dk, dv = _flash(q, k, v, grad_out, block_q, block_k, causal, scale=1.0)
    return out, lse, scale * dq, dk, dv  # dq: the gradient with respect to the unscaled q


def _backward_query_tiles_outside(q, k, v, grad_out, block_q, block_k, causal):
    """The backward pass in the other loop order: each query tile owns its dq; dk and dv gather over the tiles."""
    out, lse = _forward(q, k, v, block_q, block_k, causal)
    scale = 1 / math.sqrt(q.shape[-1])
    d_row = (grad_out * out).sum(-1, keepdim=True)
    dq_tiles, dk, dv = [], torch.zeros_like(k), torch.zeros_like(v)
    for i0 in range(0, q.shape[-2], block_q):
        q_tile, do_tile = q[..., i0:i0 + block_q, :], grad_out[..., i0:i0 + block_q, :]
        i1 = i0 + q_tile.shape[-2]
        dq_tile = torch.zeros_like(q_tile)
        last = min(k.shape[-2], i1) if causal else k.shape[-2]  # keys past the tile's last query: all masked
        for j0 in range(0, last, block_k):
            j1 = min(j0 + block_k, k.shape[-2])
            s = q_tile @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(~_allowed(i0, i1, j0, j1), -math.inf)
            p = torch.exp(s - lse[..., i0:i1, None])
            ds = p * (do_tile @ v[..., j0:j1, :].transpose(-2, -1) - d_row[..., i0:i1, :])
            dq_tile = dq_tile + scale * ds @ k[..., j0:j1, :]
            dk[..., j0:j1, :] += scale * ds.transpose(-2, -1) @ q_tile
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ do_tile
        dq_tiles.append(dq_tile)
    return out, lse, torch.cat(dq_tiles, -2), dk, dv


def _all_queries_against_a_block_per_head(q, k, v, grad_out, block_q, block_k, causal):
    """Right values and tiles, plus, head by head, the scores of all the queries against a key block: each is
    smaller than the scores of every head at once, but it is what the memory rule forbids."""
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            q[b, h] @ k[b, h, :block_k].T
    return _flash(q, k, v, grad_out, block_q, block_k, causal)


def _autograd_on_each_tile(q, k, v, grad_out, block_q, block_k, causal):
    """Right values, but a tile's gradient found by autograd: the statement asks for it by hand."""
    with torch.enable_grad():
        tile = q[..., :block_q, :].detach().requires_grad_(True)
        torch.autograd.grad((tile @ k[..., :block_k, :].transpose(-2, -1)).exp().sum(), tile)
    return _flash(q, k, v, grad_out, block_q, block_k, causal)


def _per_head_einsum64(q, k, v, grad_out, block_q, block_k, causal):
    """float64 throughout, einsum, one (batch, head) at a time; the forward pass carries the normalised output and
    its log-sum-exp (merged with logaddexp) in place of (m, ℓ, acc)."""
    q, k, v, grad_out = (t.double() for t in (q, k, v, grad_out))
    scale = 1 / math.sqrt(q.shape[-1])
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    lse = torch.zeros(q.shape[:-1], dtype=torch.float64)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            qh, kh, vh, gh = q[b, h], k[b, h], v[b, h], grad_out[b, h]
            for i0 in range(0, n_q, block_q):
                i1 = min(i0 + block_q, n_q)
                o, ell = torch.zeros(i1 - i0, vh.shape[-1], dtype=torch.float64), torch.full((i1 - i0,), -math.inf,
                                                                                             dtype=torch.float64)
                for j0 in range(0, n_k, block_k):
                    j1 = min(j0 + block_k, n_k)
                    s = torch.einsum("id,jd->ij", qh[i0:i1], kh[j0:j1]) * scale
                    if causal:
                        s = s.masked_fill(~_allowed(i0, i1, j0, j1), -math.inf)
                    new = torch.logaddexp(ell, torch.logsumexp(s, -1))
                    keep, fresh = torch.exp(ell - new), torch.exp(s - new[:, None]).nan_to_num(0.0)
                    o = keep.nan_to_num(0.0)[:, None] * o + torch.einsum("ij,jc->ic", fresh, vh[j0:j1])
                    ell = new
                out[b, h, i0:i1], lse[b, h, i0:i1] = o, ell
            d_row = torch.einsum("ic,ic->i", gh, out[b, h])
            for j0 in range(0, n_k, block_k):
                j1 = min(j0 + block_k, n_k)
                for i0 in range(0, n_q, block_q):
                    i1 = min(i0 + block_q, n_q)
                    s = torch.einsum("id,jd->ij", qh[i0:i1], kh[j0:j1]) * scale
                    if causal:
                        s = s.masked_fill(~_allowed(i0, i1, j0, j1), -math.inf)
                    p = torch.exp(s - lse[b, h, i0:i1, None])
                    ds = p * (torch.einsum("ic,jc->ij", gh[i0:i1], vh[j0:j1]) - d_row[i0:i1, None])
                    dv[b, h, j0:j1] += torch.einsum("ij,ic->jc", p, gh[i0:i1])
                    dq[b, h, i0:i1] += scale * torch.einsum("ij,jd->id", ds, kh[j0:j1])
                    dk[b, h, j0:j1] += scale * torch.einsum("ij,id->jd", ds, qh[i0:i1])
    return out, lse, dq, dk, dv


MUTANTS = {
    "6.5": {
        "the first key block's max kept as the shift (exact on tame scores, overflows when they rise)":
            lambda *a: _flash(*a, stale_max=True),
        "D = rowsum(P ∘ dP) over the current key block only": lambda *a: _flash(*a, d_of_block=True),
        "causal mask off by one: query i also sees key i + 1": lambda *a: _flash(*a, offset=1),
        "the last, partial key block dropped": lambda *a: _flash(*a, drop_tail=True),
        "the backward pass on the whole n_q × n_k score matrix": _backward_all_scores,
        "autograd through the tiled forward pass": _autograd_through_tiles,
        "head by head, all the queries against a key block": _all_queries_against_a_block_per_head,
        "autograd on each tile's scores": _autograd_on_each_tile,
        "q scaled in place by 1/√d": _scales_q_in_place,
    },
}

ALTERNATIVES = {
    "6.5": {
        "the backward pass with query tiles outside and key blocks inside": _backward_query_tiles_outside,
        "float64, einsum, one (batch, head) at a time, a running log-sum-exp": _per_head_einsum64,
    },
}

