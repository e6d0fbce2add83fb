"""Chapter 1's exercises: attention as a soft lookup (checks only; the solutions live in ``solutions/ch01.py``)."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from .checking import Check, agrees, compare, randn, register

__all__: list[str] = []


def _attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return scaled_dot_product_attention(q, k, v).output  # the package's own, tested against PyTorch's


def _attention_cases(g: torch.Generator) -> list[tuple]:
    return [(randn(g, 4, 8), randn(g, 6, 8), randn(g, 6, 5)),
            (randn(g, 2, 3, 4, 16), randn(g, 2, 3, 7, 16), randn(g, 2, 3, 7, 16))]


def _large_scores(answer, g):  # noqa: ANN001, ANN202
    q, k, v = randn(g, 3, 4), randn(g, 5, 4), randn(g, 5, 2)
    q = q * 500.0  # scores of several hundred, either sign: exp overflows unless the max is subtracted
    return compare(answer(q, k, v), _attention64(q.double(), k.double(), v.double()), atol=1e-4)


def _rows_independent(answer, g):  # noqa: ANN001, ANN202
    q, k, v = randn(g, 5, 8), randn(g, 6, 8), randn(g, 6, 3)
    return compare(answer(q[:3], k, v), answer(q, k, v)[:3], atol=1e-6, what="the first three queries' output")


register("1.1", "attention from scratch", "build", "attention", [
    agrees("equals softmax(q kᵀ / √d) v, one sequence and a batch of heads, n_q ≠ n_k", _attention_cases,
           _attention64),
    Check("scores of several hundred, either sign, give finite and correct outputs", _large_scores),
    Check("each query's output depends on that query only (adding queries changes no earlier row)",
          _rows_independent),
])


def _gaussian_weights(answer, g):  # noqa: ANN001, ANN202
    for n, d in ((5, 3), (8, 16)):
        q, k = randn(g, 4, d), randn(g, n, d) * 2
        bias = answer(k)
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,):
            return f"the bias should be a tensor of shape ({n},) for keys of shape ({n}, {d}), got " + (
                str(tuple(bias.shape)) if isinstance(bias, torch.Tensor) else type(bias).__name__)
        want = torch.softmax(-0.5 * torch.cdist(q.double(), k.double()) ** 2, dim=-1)
        verdict = compare(torch.softmax(q @ k.T + bias, dim=-1), want, atol=1e-5, what="softmax(q kᵀ + bias)")
        if verdict:
            return f"keys of shape ({n}, {d}): {verdict}"
    return None


register("1.2", "the bias that makes dot-product weights Gaussian-kernel weights", "derive", "gaussian_bias", [
    Check("softmax(q·k_j + b_j) equals softmax(−‖q − k_j‖² / 2) for every query", _gaussian_weights),
])


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp_min(1e-300).log()).sum(-1)


def _hits_target(answer, g):  # noqa: ANN001, ANN202
    for n, frac in ((5, 0.3), (10, 0.8), (50, 0.5)):
        s = randn(g, n).double() * 3
        target = frac * math.log(n)
        beta = float(answer(s.float(), target))
        got = float(_entropy(torch.softmax(beta * s, -1)))
        if not (beta > 0 and abs(got - target) < 1e-3):
            return f"{n} scores, target {target:.3f} nats: β = {beta:.4g} gives entropy {got:.4f} nats"
    return None


register("1.3", "the temperature that gives a target entropy", "measure", "temperature_for_entropy", [
    Check("returns β > 0 with H(softmax(β·s)) within 1e-3 of the target, in nats", _hits_target),
])


def _query_gradient64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    q = q.clone().requires_grad_(True)
    (torch.softmax(k @ q / math.sqrt(q.shape[-1]), -1) @ v @ g).backward()
    return q.grad


register("1.4", "∂L/∂q by hand", "derive", "query_gradient", [
    agrees("equals autograd's gradient of L = g · attention(q, K, V) for one query q",
           lambda g: [(randn(g, 8), randn(g, 6, 8), randn(g, 6, 3), randn(g, 3)),
                      (randn(g, 16), randn(g, 11, 16), randn(g, 11, 16), randn(g, 16))],
           _query_gradient64, atol=1e-5),
])
