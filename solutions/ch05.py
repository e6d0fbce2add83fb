"""Solutions to chapter 5's exercises (not part of the installed package; the website shows each one on a click)."""

import torch


def cached_causal_mask(n_q, n_k):
    query_pos = torch.arange(n_k - n_q, n_k)  # the queries are the last n_q positions
    return torch.arange(n_k)[None, :] <= query_pos[:, None]


def smoothed_cross_entropy(logits, targets, eps):
    log_p = torch.log_softmax(logits, dim=-1)
    nll = -log_p.gather(-1, targets[:, None]).squeeze(-1)
    uniform = -log_p.mean(dim=-1)  # cross-entropy against the uniform distribution over all classes
    return ((1 - eps) * nll + eps * uniform).mean()


def sinusoidal_positions(n, d):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return pe.float()


def pre_ln_residual(x, sublayer, norm):
    return x + sublayer(norm(x))
