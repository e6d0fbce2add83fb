"""Solutions to chapter 6's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import torch


def merge_states(m1, l1, acc1, m2, l2, acc2):
    m = torch.maximum(m1, m2)
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # both empty: subtract 0, not −inf
    r1, r2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    return m, r1 * l1 + r2 * l2, r1[:, None] * acc1 + r2[:, None] * acc2


def streaming_attention(q, k, v, block):
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full((q.shape[0],), -math.inf)
    ell = torch.zeros(q.shape[0])
    acc = torch.zeros(q.shape[0], v.shape[-1])
    for start in range(0, k.shape[0], block):
        s = q @ k[start:start + block].T * scale  # (n_q, block): the only scores alive
        m_new = torch.maximum(m, s.amax(dim=-1))
        rescale = torch.exp(m - m_new)
        p = torch.exp(s - m_new[:, None])
        ell = rescale * ell + p.sum(dim=-1)
        acc = rescale[:, None] * acc + p @ v[start:start + block]
        m = m_new
    return acc / ell[:, None]


def kv_cache_bytes(layers, kv_heads, d_head, tokens, bytes_per_number):
    return 2 * layers * kv_heads * d_head * tokens * bytes_per_number  # keys and values


def sliding_window_mask(n, window):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j > i - window)


def flash_forward_backward(q, k, v, grad_out, block_q, block_k, causal):
    scale = 1 / math.sqrt(q.shape[-1])
    n_q, n_k = q.shape[-2], k.shape[-2]

    def scores(i0, i1, j0, j1):  # one tile of scores, (..., i1 - i0, j1 - j0), masked if causal
        s = (q[..., i0:i1, :] * scale) @ k[..., j0:j1, :].transpose(-2, -1)
        if causal:  # upper left: query i sees keys j <= i
            s = s.masked_fill(torch.arange(i0, i1)[:, None] < torch.arange(j0, j1), -math.inf)
        return s

    # Forward (FlashAttention-2): tiles of queries outside, blocks of keys inside, a running max and sum.
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = q.new_zeros(q.shape[:-1])
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        m = q.new_full((*q.shape[:-2], i1 - i0), -math.inf)  # running max of each query's scores
        ell = q.new_zeros(m.shape)  # running sum of e^{s - m}
        acc = q.new_zeros(*m.shape, v.shape[-1])  # running sum of e^{s - m} v
        for j0 in range(0, min(n_k, i1) if causal else n_k, block_k):  # causal: later keys are all masked
            j1 = min(j0 + block_k, n_k)
            s = scores(i0, i1, j0, j1)
            m_new = torch.maximum(m, s.amax(-1))
            rescale = torch.exp(m - m_new)  # the sums so far were taken against the old max
            p = torch.exp(s - m_new[..., None])
            ell = rescale * ell + p.sum(-1)
            acc = rescale[..., None] * acc + p @ v[..., j0:j1, :]
            m = m_new
        out[..., i0:i1, :] = acc / ell[..., None]
        lse[..., i0:i1] = m + torch.log(ell)

    # Backward: key blocks outside (each gathers its dk, dv), query tiles inside; each tile of the weights is
    # recomputed from q, k and the saved lse, and D = rowsum(dO ∘ O) stands in for rowsum(P ∘ dP).
    d_row = (grad_out * out).sum(-1, keepdim=True)  # (..., n_q, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, n_k, block_k):
        j1 = min(j0 + block_k, n_k)
        k_blk, v_blk = k[..., j0:j1, :], v[..., j0:j1, :]
        for i0 in range(j0 - j0 % block_q if causal else 0, n_q, block_q):  # causal: earlier queries see none
            i1 = min(i0 + block_q, n_q)
            q_tile, do_tile = q[..., i0:i1, :], grad_out[..., i0:i1, :]
            p = torch.exp(scores(i0, i1, j0, j1) - lse[..., i0:i1, None])  # P, exactly as the forward had it
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ do_tile
            ds = p * (do_tile @ v_blk.transpose(-2, -1) - d_row[..., i0:i1, :])  # dS = P ∘ (dP − D)
            dq[..., i0:i1, :] += scale * ds @ k_blk
            dk[..., j0:j1, :] += scale * ds.transpose(-2, -1) @ q_tile
    return out, lse, dq, dk, dv
