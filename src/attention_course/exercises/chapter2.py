"""Chapter 2's exercises: why divide by √d_k (checks only; the solutions live in ``solutions/ch02.py``)."""

from __future__ import annotations

import math

import numpy as np
import torch

from .._checks import describe
from .checking import Check, agrees, as_values, compare, randn, register

__all__: list[str] = []


def _symbols():  # noqa: ANN202
    import sympy as sp

    # the statement's symbol, and one of another name (an answer that builds its own Symbol("d") fails there)
    return {"typical": [sp.Symbol("d", positive=True, integer=True)],
            "unusual": [sp.Symbol("width", positive=True, integer=True)]}


def _variance_is_d(answer, g):  # noqa: ANN001, ANN202
    import sympy as sp

    for family, values in _symbols().items():
        for d in values:
            got = answer(d)
            if isinstance(got, (int, np.integer)) and not isinstance(got, bool):
                got = sp.Integer(int(got))
            if not isinstance(got, sp.Expr):
                return f"{family} input d = {d}: the answer should be a SymPy expression, got {describe(got)}"
            stray = [s for s in got.free_symbols if s != d]
            if stray:
                same_name = [s for s in stray if isinstance(d, sp.Symbol) and s.name == d.name]
                if same_name:
                    return (f"{family} input: the answer uses a new Symbol('{d.name}'), which SymPy treats as a "
                            f"different symbol from the d it is given (that one is a positive integer); build "
                            f"the expression from the argument")
                return (f"{family} input d = {d}: the answer should use only the d it is given, got "
                        f"{sorted(map(str, stray))} (an answer that makes its own symbol ignores its argument)")
            if sp.simplify(got - d) != 0:
                shown = ", ".join(f"{got.subs(d, n)} at d = {n}" for n in (1, 2, 8)) if isinstance(
                    d, sp.Symbol) else f"{got} at d = {d}"
                return f"{family} input: not Var(q · k): your expression gives {shown}"
    return None


register("2.1", "the variance of q · k, derived", "derive", "dot_product_variance", [
    Check("Var(q · k) for q, k with independent standard-normal entries: for the symbol d and for a symbol of "
          "another name", _variance_is_d),
])


def _jacobian64(p: torch.Tensor) -> torch.Tensor:
    return torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), p.log())


def _probabilities(g: torch.Generator) -> dict[str, list[tuple]]:
    def p(scores: torch.Tensor) -> tuple:
        return (torch.softmax(scores, -1),)

    apart = torch.tensor([0.0, 1500.0, -1200.0, 3.0])  # entries that underflow to exactly 0
    return {"typical": [p(randn(g, 4)), p(randn(g, 9) * 3)],
            "extreme": [p(randn(g, 6) * 300), p(apart), p(randn(g, 5) * 1e-3)],  # peaked, exact zeros, flat
            "unusual shapes": [p(randn(g, 1)), p(randn(g, 2)), p(randn(g, 65))]}  # one key, two, an odd many


def _norm_at_most_half(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _probabilities(g).items():
        for (p,) in cases:
            j = as_values(answer(p.clone()), p)
            if not isinstance(j, torch.Tensor) or tuple(j.shape) != (len(p), len(p)):
                return f"{family} inputs, p of {len(p)} entries: the answer should be ({len(p)}, {len(p)}), got " \
                       f"{describe(j)}"
            norm = float(torch.linalg.matrix_norm(j, ord=2))  # in the answer's own dtype
            if norm > 0.5 + 1e-6:
                return f"{family} inputs, p of {len(p)} entries: ‖J‖₂ = {norm:.4f} > 1/2"
    return None


register("2.2", "the softmax's Jacobian", "build", "softmax_jacobian", [
    agrees("equals ∂softmax(s)/∂s at s = log p (autograd, float64): p nearly uniform, peaked, with exact zeros; "
           "one, two and 65 entries", _probabilities, _jacobian64, atol=1e-6),
    Check("its spectral norm is at most 1/2", _norm_at_most_half),
])

#: The range of inverse temperatures exercise 2.3 searches.
BETAS = (1e-3, 1e4)


def _norms64(scores: torch.Tensor, betas: torch.Tensor) -> torch.Tensor:
    """‖diag(p) − p pᵀ‖₂ at p = softmax(β s), for each β (float64; the matrix is symmetric, so its top eigenvalue)."""
    p = torch.softmax(betas[:, None] * scores.double()[None], -1)
    return torch.linalg.eigvalsh(torch.diag_embed(p) - p[:, :, None] * p[:, None, :])[:, -1]


def _largest_norm64(scores: torch.Tensor) -> float:
    """The largest ‖J‖₂ over β in BETAS: a grid in log β, then two finer grids around its best point."""
    low, high = math.log(BETAS[0]), math.log(BETAS[1])
    best = -1.0
    for _ in range(3):
        grid = torch.linspace(low, high, 201, dtype=torch.float64)
        values = _norms64(scores, grid.exp())
        at = int(values.argmax())
        best = max(best, float(values[at]))
        low, high = float(grid[max(at - 1, 0)]), float(grid[min(at + 1, len(grid) - 1)])
    return best


def _score_rows(g: torch.Generator) -> dict[str, list[torch.Tensor]]:
    return {"typical": [randn(g, 8), randn(g, 12) * 2],
            # scores in the thousands need β near 10⁻³; a spread of 10⁻³ needs β in the thousands
            "extreme": [randn(g, 8) * 1000, randn(g, 8) * 1e-3],
            "unusual shapes": [randn(g, 1), randn(g, 2), randn(g, 17) * 5]}


def _measures_the_largest_norm(answer, g):  # noqa: ANN001, ANN202
    for family, rows in _score_rows(g).items():
        for s in rows:
            got = answer(s.clone())
            if not isinstance(got, (tuple, list)) or len(got) != 2:
                return f"{family} scores ({len(s)},): the answer should be a pair (β, norm), got {describe(got)}"
            beta, norm = (as_values(x, s) for x in got)
            if not all(isinstance(x, torch.Tensor) and x.numel() == 1 for x in (beta, norm)):
                return f"{family} scores ({len(s)},): β and the norm should be numbers, got {describe(got)}"
            beta, norm = float(beta), float(norm)
            if not BETAS[0] * (1 - 1e-9) <= beta <= BETAS[1] * (1 + 1e-9):
                return f"{family} scores ({len(s)},): β = {beta:.4g} is outside [{BETAS[0]:g}, {BETAS[1]:g}]"
            at_beta = float(_norms64(s, torch.tensor([beta], dtype=torch.float64))[0])
            if abs(norm - at_beta) > 1e-5:
                return f"{family} scores ({len(s)},): the norm {norm:.6f} is not ‖J‖₂ at your β = {beta:.4g}"
            largest = _largest_norm64(s)
            if at_beta < largest - 1e-3:
                return (f"{family} scores ({len(s)},): ‖J‖₂ = {at_beta:.4f} at β = {beta:.4g}, but another β "
                        f"in the range gives more than {at_beta + 1e-3:.4f}")
    return None


register("2.3", "how close a row of scores comes to the bound", "measure", "largest_jacobian_norm", [
    Check("returns (β, ‖J‖₂) with the norm measured at that β and the largest over β in [10⁻³, 10⁴] to within "
          "10⁻³: typical rows, scores in the thousands and a spread of 10⁻³, one, two and 17 keys",
          _measures_the_largest_norm),
])


def _fold_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(randn(g, 16, 4), 4), (randn(g, 32, 8), 8)],
            "extreme": [(randn(g, 8, 1) * 300, 1), (randn(g, 64, 1024) * 1e-3, 1024)],
            "unusual shapes": [(randn(g, 5, 3), np.int64(3)), (randn(g, 1, 5), 5)]}  # odd widths, a NumPy d_k


def _same_scores(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _fold_cases(g).items():
        for w_q, d_k in cases:
            d_model = w_q.shape[0]
            x, w_k = randn(g, 6, d_model), randn(g, d_model, int(d_k))
            want = (x.double() @ w_q.double()) @ (x.double() @ w_k.double()).T / math.sqrt(d_k)
            folded = as_values(answer(w_q.clone(), d_k), w_q)
            if not isinstance(folded, torch.Tensor) or tuple(folded.shape) != tuple(w_q.shape):
                return f"{family} inputs {tuple(w_q.shape)}: the answer should be a tensor like w_q, got " \
                       f"{describe(folded)}"
            x, w_k = x.to(folded.dtype), w_k.to(folded.dtype)  # the property, in the answer's own dtype
            verdict = compare((x @ folded) @ (x @ w_k).T, want, atol=1e-4, rtol=1e-4,
                              what="the unscaled scores with the folded W^Q")
            if verdict:
                return f"{family} inputs {tuple(w_q.shape)}, d_k = {d_k}: {verdict}"
    return None


register("2.4", "fold the scale into W^Q", "build", "fold_scale", [
    agrees("equals the reference W', the input left as it was: typical, weights in the hundreds and d_k = 1024, "
           "odd widths", _fold_cases, lambda w, d_k: w / math.sqrt(d_k), atol=1e-6, rtol=1e-6),
    Check("(X W')(X W^K)ᵀ equals the scaled scores (X W^Q)(X W^K)ᵀ / √d_k", _same_scores),
])
