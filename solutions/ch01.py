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


def attention_by_hand(q, k, v, grad_out):
    def swap(x):  # transpose the last two axes only: batch and head axes pass through
        return x.transpose(-2, -1)

    def softmax_over_keys(s):
        s = s - s.amax(dim=-1, keepdim=True)  # shift each row: exp of at most 0, no overflow
        e = s.exp()
        return e / e.sum(dim=-1, keepdim=True)

    def softmax_backward(p, grad_p):
        # one row at a time this is exercise 1.4's step: ∂L/∂s_j = p_j (∂L/∂p_j − Σ_i p_i ∂L/∂p_i);
        # the row sum is what every weight gives back, since the weights must still sum to one
        row_sum = (p * grad_p).sum(dim=-1, keepdim=True)
        return p * (grad_p - row_sum)

    d, n_k = q.shape[-1], k.shape[-2]
    if k.shape[-1] != d or v.shape[-2] != n_k:
        raise ValueError(f"k must be (..., n_k, {d}) and v (..., {n_k}, d_v), got {tuple(k.shape)}, {tuple(v.shape)}")

    # the forward, keeping the weights p: the backward needs them, not the scores
    scale = 1 / math.sqrt(d)
    p = softmax_over_keys(q @ swap(k) * scale)  # (..., n_q, n_k)
    out = p @ v  # (..., n_q, d_v)

    # the backward, from L = Σ grad_out ⊙ out, one operation at a time in reverse
    # out = p v
    grad_v = swap(p) @ grad_out  # (..., n_k, d_v): each value collects the upstream gradient its weight sent
    grad_p = grad_out @ swap(v)  # (..., n_q, n_k)
    # p = softmax(s), row by row
    grad_s = softmax_backward(p, grad_p)
    # s = q kᵀ / √d
    grad_q = grad_s @ k * scale  # (..., n_q, d)
    grad_k = swap(grad_s) @ q * scale  # (..., n_k, d)
    return out, grad_q, grad_k, grad_v
