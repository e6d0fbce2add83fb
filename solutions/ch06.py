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
