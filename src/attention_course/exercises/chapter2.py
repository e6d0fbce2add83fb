"""Chapter 2's exercises: why divide by √d_k (checks only; the solutions live in ``solutions/ch02.py``)."""

from __future__ import annotations

import math

import torch

from .._checks import describe
from .checking import Check, agrees, compare, register

__all__: list[str] = []


def _variance_is_d(answer, g):  # noqa: ANN001, ANN202
    import sympy as sp

    d = sp.Symbol("d", positive=True, integer=True)
    got = answer(d)
    if not isinstance(got, sp.Expr):
        return f"the answer should be a SymPy expression in d, got {describe(got)}"
    if got.free_symbols - {d}:
        return f"the answer should use the symbol d it is given, got one in {sorted(map(str, got.free_symbols))}"
    if sp.simplify(got - d) == 0:
        return None
    return "not Var(q · k): your expression gives " + ", ".join(f"{got.subs(d, n)} at d = {n}" for n in (1, 2, 8))


register("2.1", "the variance of q · k, derived", "derive", "dot_product_variance", [
    Check("Var(q · k) for q, k with independent standard-normal entries, as a SymPy expression in d",
          _variance_is_d),
])


def _jacobian64(p: torch.Tensor) -> torch.Tensor:
    return torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), p.log())


def _probabilities(g: torch.Generator) -> list[tuple]:
    return [(torch.softmax(torch.randn(n, generator=g) * scale, -1),) for n, scale in ((4, 1.0), (9, 3.0), (2, 0.1))]


def _norm_at_most_half(answer, g):  # noqa: ANN001, ANN202
    for (p,) in _probabilities(g):
        j = answer(p)
        if not isinstance(j, torch.Tensor):
            return f"the answer should be a tensor, got {describe(j)}"
        norm = float(torch.linalg.matrix_norm(j.double(), ord=2))
        if norm > 0.5 + 1e-6:
            return f"p of {len(p)} entries: ‖J‖₂ = {norm:.4f} > 1/2"
    return None


register("2.2", "the softmax's Jacobian", "build", "softmax_jacobian", [
    agrees("equals ∂softmax(s)/∂s at s = log p (autograd, float64)", _probabilities, _jacobian64, atol=1e-6),
    Check("its spectral norm is at most 1/2", _norm_at_most_half),
])


def _large_norm(answer, g):  # noqa: ANN001, ANN202
    p = answer()
    if not isinstance(p, torch.Tensor) or p.ndim != 1:
        return f"the answer should be a 1-D tensor of probabilities, got {describe(p)}"
    p = p.double()
    if (p < 0).any() or abs(float(p.sum()) - 1) > 1e-6:
        return f"p must be non-negative and sum to 1, got sum {float(p.sum()):.6f}, min {float(p.min()):.3g}"
    norm = float(torch.linalg.matrix_norm(torch.diag(p) - torch.outer(p, p), ord=2))
    return None if norm > 0.499 else f"‖diag(p) − p pᵀ‖₂ = {norm:.4f}, not above 0.499"


register("2.3", "a softmax output whose Jacobian nearly reaches the bound", "measure", "large_jacobian_p", [
    Check("returns probabilities p with ‖diag(p) − p pᵀ‖₂ > 0.499", _large_norm),
])


def _fold_cases(g: torch.Generator) -> list[tuple]:
    return [(torch.randn(16, 4, generator=g), 4), (torch.randn(32, 8, generator=g), 8)]


def _same_scores(answer, g):  # noqa: ANN001, ANN202
    x, w_q, w_k = torch.randn(5, 16, generator=g), torch.randn(16, 4, generator=g), torch.randn(16, 4, generator=g)
    want = (x @ w_q) @ (x @ w_k).T / math.sqrt(4)
    folded = answer(w_q, 4)
    if not isinstance(folded, torch.Tensor):
        return f"the answer should be a tensor, got {describe(folded)}"
    return compare((x @ folded) @ (x @ w_k).T, want, atol=1e-5, what="the unscaled scores with the folded W^Q")


register("2.4", "fold the scale into W^Q", "build", "fold_scale", [
    agrees("equals the reference W', the input left as it was", _fold_cases, lambda w, d_k: w / math.sqrt(d_k)),
    Check("(X W')(X W^K)ᵀ equals the scaled scores (X W^Q)(X W^K)ᵀ / √d_k", _same_scores),
])
