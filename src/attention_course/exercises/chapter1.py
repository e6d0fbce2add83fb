"""Chapter 1's exercises: attention as a soft lookup (checks only; the solutions live in ``solutions/ch01.py``)."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from .checking import Check, agrees, as_values, compare, randn, register

__all__: list[str] = []


def _attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return scaled_dot_product_attention(q, k, v).output  # the package's own, tested against PyTorch's


def _attention_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    rows = torch.tensor([1.0, 3000.0, -2000.0, 0.5])[:, None]  # rows whose largest scores differ by thousands
    return {
        "typical": [(randn(g, 4, 8), randn(g, 6, 8), randn(g, 6, 5)),
                    (randn(g, 2, 3, 4, 16), randn(g, 2, 3, 7, 16), randn(g, 2, 3, 7, 16))],
        # exp(score) overflows float32 past 88: an answer must subtract each row's own largest score
        "extreme": [(randn(g, 3, 4) * 500, randn(g, 5, 4), randn(g, 5, 2)),
                    (randn(g, 4, 6) * rows, randn(g, 9, 6), randn(g, 9, 3))],
        "unusual shapes": [(randn(g, 1, 5), randn(g, 1, 5), randn(g, 1, 3)),  # one query, one key
                           (randn(g, 3, 2, 1, 7), randn(g, 3, 2, 11, 7), randn(g, 3, 2, 11, 1))],
    }


def _rows_independent(answer, g):  # noqa: ANN001, ANN202
    q, k, v = randn(g, 5, 8), randn(g, 6, 8), randn(g, 6, 3)
    return compare(answer(q[:3], k, v), answer(q, k, v)[:3], atol=1e-6, what="the first three queries' output")


register("1.1", "attention from scratch", "build", "attention", [
    agrees("equals softmax(q kᵀ / √d) v: typical inputs, scores in the hundreds and rows far apart, one key, "
           "a batch of heads", _attention_cases, _attention64, atol=1e-4, rtol=1e-4),
    Check("each query's output depends on that query only (adding queries changes no earlier row)",
          _rows_independent),
])


def _gaussian_weights(answer, g):  # noqa: ANN001, ANN202
    for n, d in ((5, 3), (8, 16)):
        q, k = randn(g, 4, d), randn(g, n, d) * 2
        bias = as_values(answer(k), k)  # judged by value: a NumPy array of the bias is an answer too
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,):
            return f"the bias should be a tensor of shape ({n},) for keys of shape ({n}, {d}), got " + (
                str(tuple(bias.shape)) if isinstance(bias, torch.Tensor) else type(bias).__name__)
        want = torch.softmax(-0.5 * torch.cdist(q.double(), k.double()) ** 2, dim=-1)
        got = torch.softmax(q.double() @ k.double().T + bias.double(), dim=-1)  # in float64, whatever bias's dtype
        verdict = compare(got, want, atol=1e-5, what="softmax(q kᵀ + bias)")
        if verdict:
            return f"keys of shape ({n}, {d}): {verdict}"
    return None


register("1.2", "the bias that makes dot-product weights Gaussian-kernel weights", "derive", "gaussian_bias", [
    Check("softmax(q·k_j + b_j) equals softmax(−‖q − k_j‖² / 2) for every query", _gaussian_weights),
])


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp_min(1e-300).log()).sum(-1)


def _hits_target(answer, g):  # noqa: ANN001, ANN202
    # the last: scores a thousandth apart and a low target, which needs β in the thousands
    for n, frac, spread in ((5, 0.3, 3.0), (10, 0.8, 3.0), (50, 0.5, 3.0), (20, 0.05, 1e-3)):
        s = randn(g, n).double() * spread
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
