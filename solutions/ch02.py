"""Solutions to chapter 2's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import sympy as sp
import torch
from sympy.stats import Normal, variance


def dot_product_variance(d):
    # one term q_i k_i: mean 0, variance E[q²]E[k²] = 1; the d terms are independent, so variances add
    q, k = Normal("q", 0, 1), Normal("k", 0, 1)
    return sp.simplify(d * variance(q * k))


def softmax_jacobian(p):
    return torch.diag(p) - torch.outer(p, p)


def largest_jacobian_norm(scores):
    # ‖J‖₂ at p = softmax(β s) on a grid of β evenly spaced in log β; J = diag(p) − p pᵀ is symmetric and
    # positive semi-definite, so its spectral norm is its largest eigenvalue (eigvalsh: far faster than an SVD)
    betas = torch.logspace(-3, 4, 1001, dtype=torch.float64)
    p = torch.softmax(betas[:, None] * scores.double()[None], dim=-1)
    jacobians = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    norms = torch.linalg.eigvalsh(jacobians)[:, -1]
    best = int(norms.argmax())
    return float(betas[best]), float(norms[best])


def fold_scale(w_q, d_k):
    return w_q / math.sqrt(d_k)
