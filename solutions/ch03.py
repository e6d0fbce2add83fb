"""Solutions to chapter 3's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import torch


def cross_attention(x_dec, x_enc, w_q, w_k, w_v):
    q = x_dec @ w_q  # the decoder asks
    k, v = x_enc @ w_k, x_enc @ w_v  # the encoder is read
    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v


def bilinear_form(w_q, w_k):
    return w_q @ w_k.T


def tied_factor(w_qk):
    # symmetric PSD: W^{QK} = U diag(λ) Uᵀ with λ ≥ 0, so W = U diag(√λ) (round-off may leave λ slightly negative)
    lam, u = torch.linalg.eigh(w_qk.double())
    return (u * lam.clamp_min(0).sqrt()).to(w_qk.dtype)


def ov_circuit(w_v, w_o):
    return w_v @ w_o
