"""Solutions to chapter 1's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import torch


def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores - scores.amax(dim=-1, keepdim=True)  # exp of at most 0: no overflow
    weights = scores.exp()
    return weights / weights.sum(dim=-1, keepdim=True) @ v


def gaussian_bias(k):
    # −‖q − k‖²/2 = q·k − ‖k‖²/2 − ‖q‖²/2, and −‖q‖²/2 is the same for every key: the softmax ignores it
    return -0.5 * (k * k).sum(dim=-1)


def temperature_for_entropy(scores, target):
    # dH/dβ = −β·Var_p(s) ≤ 0: the entropy falls from log n at β = 0 towards 0, so bisect on β
    def entropy(beta):
        p = torch.softmax(beta * scores.double(), dim=-1)
        return float(-(p * p.clamp_min(1e-300).log()).sum())

    low, high = 0.0, 1.0
    while entropy(high) > target:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if entropy(mid) > target else (low, mid)
    return (low + high) / 2


def query_gradient(q, k, v, g):
    d = q.shape[-1]
    p = torch.softmax(k @ q / math.sqrt(d), dim=-1)  # (n,)
    out = p @ v
    # ∂L/∂s_j = p_j (g·v_j − g·o): the softmax's Jacobian applied to the values' scores
    ds = p * (v @ g - out @ g)
    return ds @ k / math.sqrt(d)
