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


def saturation_curves(d_ks, n_keys, rows, generator):
    curves = torch.zeros(2, len(d_ks), 3)  # scaled, then unscaled; a row per width; three statistics
    for i, d_k in enumerate(d_ks):
        # the draws in the statement's order: this width's queries, then its keys (float32, PyTorch's default)
        q = torch.randn(rows, d_k, generator=generator)
        k = torch.randn(n_keys, d_k, generator=generator)
        raw = q @ k.T  # (rows, n_keys): every row scores the same keys; variance d_k
        scale = 1 / math.sqrt(d_k)
        for j, scores in enumerate((raw * scale, raw)):
            # the softmax over the keys, written out; after subtracting each row's largest score every
            # exponent is <= 0, so exp cannot overflow (unscaled scores reach the hundreds at d_k = 4096)
            shifted = scores - scores.amax(dim=-1, keepdim=True)
            e = shifted.exp()
            total = e.sum(dim=-1, keepdim=True)  # >= 1: the largest score contributes exp(0)
            p = e / total
            # log p from the shifted scores, not log(p): a weight that underflows to 0 would give
            # 0 · log 0 = NaN, while its term in the entropy is 0
            log_p = shifted - total.log()
            entropy = -(p * log_p).sum(dim=-1)  # in nats
            largest = p.amax(dim=-1)
            # each row's Jacobian J = diag(p) − pᵀp (exercise 2.2), and its Frobenius norm
            outer = p[:, :, None] * p[:, None, :]
            jacobian = torch.diag_embed(p) - outer
            size = jacobian.pow(2).sum(dim=(-2, -1)).sqrt()
            # each statistic averaged over the rows
            curves[j, i, 0] = entropy.mean()
            curves[j, i, 1] = largest.mean()
            curves[j, i, 2] = size.mean()
    return curves[0], curves[1]
