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


def large_jacobian_p():
    # two outcomes at 1/2 each: J = [[1/4, −1/4], [−1/4, 1/4]], eigenvalues 0 and 1/2
    return torch.tensor([0.5, 0.5])


def fold_scale(w_q, d_k):
    return w_q / math.sqrt(d_k)
