"""Chapter 2's exercises: why divide by √d_k (checks only; the solutions live in ``solutions/ch02.py``)."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from types import FrameType

import numpy as np
import torch

from .._checks import describe
from .checking import Check, Verdict, agrees, as_values, compare, randn, register

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


# ------------------------------------------------------------------------------------------ 2.5, the project
#: The three statistics of a width, in the order of a curve's columns.
_STATISTICS = ("the mean entropy", "the mean largest weight", "the mean ‖J‖_F")
#: Absolute tolerance on each statistic (all three are O(1)). A float32 answer's error comes mostly from its float32
#: q kᵀ: at d_k = 4096 an unscaled score of size ~100 is off by ~1e-5, which moves a nearly tied row's statistics
#: by about as much; over 40 seeds of every case below, the solution's largest error was 2e-6 (AVX2 and
#: ATEN_CPU_CAPABILITY=default). Every wrong formula or draw the project's tests try is off by 3e-2 or more, or NaN.
_PROJECT_TOL = 1e-4


def _saturation64(d_ks: Sequence[int], n_keys: int, rows: int, seed: int) -> torch.Tensor:
    """The oracle, live: the statement's draws from a generator seeded with ``seed`` (per width, q then k, float32)
    and the three statistics of each width in float64. Returns ``(2, len(d_ks), 3)``: scaled, then unscaled."""
    g = torch.Generator().manual_seed(seed)
    curves = torch.empty(2, len(d_ks), 3, dtype=torch.float64)
    for i, d_k in enumerate(d_ks):
        q = torch.randn(rows, int(d_k), generator=g, dtype=torch.float32)
        k = torch.randn(n_keys, int(d_k), generator=g, dtype=torch.float32)
        raw = q.double() @ k.double().T
        for j, scale in enumerate((1 / math.sqrt(d_k), 1.0)):
            log_p = torch.log_softmax(raw * scale, dim=-1)
            p = log_p.exp()
            jacobian = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
            curves[j, i] = torch.stack([-(p * log_p).sum(-1).mean(), p.amax(-1).mean(),
                                        torch.linalg.matrix_norm(jacobian).mean()])
    return curves


def _as_curve(x: object) -> object:
    """A curve as a tensor when it is a tensor, a NumPy array or a nested list of numbers; else unchanged."""
    if isinstance(x, (list, tuple)):
        try:
            return torch.from_numpy(np.asarray(x, dtype=np.float64))
        except (TypeError, ValueError):
            return x
    return as_values(x, torch.empty(0))


def _two_curves(got: object, d_ks: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor] | str:
    """The answer's (scaled, unscaled) as tensors of shape (len(d_ks), 3), or why not."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"the answer should return a pair (scaled, unscaled), got {describe(got)}"
    curves = []
    for name, curve in zip(("scaled", "unscaled"), got, strict=True):
        curve = _as_curve(curve)
        if not isinstance(curve, torch.Tensor) or tuple(curve.shape) != (len(d_ks), 3):
            return (f"the {name} curve should be a tensor of shape ({len(d_ks)}, 3), one row per width, got "
                    f"{describe(curve)}")
        curves.append(curve)
    return curves[0], curves[1]


def _curves_off(got: tuple[torch.Tensor, torch.Tensor], want: torch.Tensor, d_ks: Sequence[int]) -> Verdict:
    """Where the answer's curves differ most from the oracle's (the width and the statistic), beyond the
    tolerance; None if nowhere."""
    for name, curve, reference in zip(("scaled", "unscaled"), got, want, strict=True):
        diff = (curve.double() - reference).abs().nan_to_num(math.inf)
        if bool((diff > _PROJECT_TOL).any()):
            i, j = divmod(int(diff.argmax()), 3)
            nan = " (NaN or inf in the answer)" if not bool(torch.isfinite(curve).all()) else ""
            return (f"the {name} curve at d_k = {d_ks[i]}: {_STATISTICS[j]} is off by {float(diff[i, j]):.2e}"
                    f"{nan} (tolerance {_PROJECT_TOL:.0e})")
    return None


def _saturation_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    """(d_ks, n_keys, rows, seed of the answer's generator) by family."""
    def seed() -> int:
        return int(torch.randint(2**31 - 1, (1,), generator=g))

    return {"typical": [([4, 16, 64, 256], 64, 128, seed()), ([8, 32, 128], 16, 100, seed())],
            # d_k = 4096: unscaled scores in the hundreds (exp overflows float32 past 88) and weights that
            # underflow to exactly 0; 64 rows of 64 keys (a square of scores), and 256 keys
            "extreme": [([1024, 4096], 64, 64, seed()), ([4096], 256, 16, seed())],
            # d_k = 1 and odd widths, one key, two keys, one row, a tuple not in increasing order
            "unusual shapes": [([1, 2, 3, 7, 33], 5, 9, seed()), ([5], 1, 4, seed()), ((7, 1, 33), 2, 1, seed())]}


def _same_draws_same_values(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _saturation_cases(g).items():
        for number, (d_ks, n_keys, rows, seed) in enumerate(cases, 1):
            given = list(d_ks) if isinstance(d_ks, list) else d_ks
            got = answer(given, n_keys, rows, torch.Generator().manual_seed(seed))
            where = f"{family} inputs, case {number} (d_ks {tuple(d_ks)}, n_keys {n_keys}, rows {rows})"
            curves = _two_curves(got, d_ks)
            if isinstance(curves, str):
                return f"{where}: {curves}"
            verdict = _curves_off(curves, _saturation64(d_ks, n_keys, rows, seed), d_ks)
            if verdict:
                return (f"{where}: {verdict}; the check redraws q, then k, width by width, from a generator "
                        "seeded as yours")
            if list(given) != list(d_ks):
                return f"{where}: the answer changed d_ks in place"
    return None


#: The property check's widths: factors of 4 apart, so that each step of the unscaled curves is far beyond the
#: sampling noise of 1024 rows (below).
_PROPERTY_WIDTHS = (1, 4, 16, 64, 256, 1024, 4096)


def _flat_and_saturating(answer, g):  # noqa: ANN001, ANN202
    # Thresholds from 200 seeds of the float64 oracle at these settings (32 keys, 1024 rows). From d_k = 16 on,
    # the scaled curves' range (largest minus smallest) averaged 0.034 nats, 0.010 and 0.004 (at most 0.11,
    # 0.029, 0.013), against 0.25, 0.08 and 0.04 allowed, while the unscaled curves move by 1.1 nats, 0.35 and
    # 0.26 over the same widths. Each factor-4 step moved the unscaled entropy down (from d_k = 4 on), the
    # largest weight up (from 4) and ‖J‖_F down (from 16) by at least 5.6 standard deviations over the seeds
    # (mean step / its standard deviation); at 4096 the unscaled ‖J‖_F was at most 0.16 of the scaled one.
    n_keys, rows, seed = 32, 1024, int(torch.randint(2**31 - 1, (1,), generator=g))
    where = f"typical inputs (d_ks {_PROPERTY_WIDTHS}, n_keys {n_keys}, rows {rows})"
    curves = _two_curves(answer(list(_PROPERTY_WIDTHS), n_keys, rows, torch.Generator().manual_seed(seed)),
                         _PROPERTY_WIDTHS)
    if isinstance(curves, str):
        return f"{where}: {curves}"
    scaled, unscaled = (c.double() for c in curves)  # the answer's own numbers
    bounds = torch.tensor([[0.0, math.log(n_keys)], [1 / n_keys, 1.0], [0.0, 0.5]], dtype=torch.float64)
    for name, curve in (("scaled", scaled), ("unscaled", unscaled)):
        inside = (curve >= bounds[:, 0] - 1e-6) & (curve <= bounds[:, 1] + 1e-6)
        if not bool(inside.all()):
            i, j = divmod(int((~inside).int().argmax()), 3)
            return (f"{where}: the {name} curve at d_k = {_PROPERTY_WIDTHS[i]}: {_STATISTICS[j]} = "
                    f"{float(curve[i, j]):.4g} lies outside [{float(bounds[j, 0]):.4g}, {float(bounds[j, 1]):.4g}]")
    if not bool(((scaled[0] - unscaled[0]).abs() <= 1e-6).all()):
        return f"{where}: at d_k = 1 the scaled and the unscaled curves differ (√1 = 1, the scores are the same)"
    spread = scaled[2:].amax(0) - scaled[2:].amin(0)
    for j, allowed in enumerate((0.25, 0.08, 0.04)):
        if float(spread[j]) > allowed:
            return f"{where}: the scaled curve is not flat from d_k = 16 on: {_STATISTICS[j]} moves by " \
                   f"{float(spread[j]):.3g} (at most {allowed} expected)"
    for j, first, sign, verb in ((0, 1, -1.0, "fall"), (1, 1, 1.0, "rise"), (2, 2, -1.0, "fall")):
        column = unscaled[first:, j]  # from d_k = 4 (entropy, largest weight) or 16 (‖J‖_F) on
        ok = sign * (column[1:] - column[:-1]) > 0
        if not bool(ok.all()):
            at = first + int((~ok).int().argmax())
            return (f"{where}: unscaled, {_STATISTICS[j]} should {verb} from d_k = {_PROPERTY_WIDTHS[at]} to "
                    f"{_PROPERTY_WIDTHS[at + 1]}, got {float(unscaled[at, j]):.4g} then "
                    f"{float(unscaled[at + 1, j]):.4g}")
    if float(unscaled[-1, 2]) > 0.25 * float(scaled[-1, 2]):
        return f"{where}: at d_k = 4096 the unscaled ‖J‖_F should be below a quarter of the scaled one"
    return None


#: The ready-made softmaxes the project rules out, by name: torch's functions and tensor methods, torch.special's
#: (``special_softmax`` ...), torch.nn.functional's, and the course's own ``softmax``.
_READY_MADE = ("softmax", "log_softmax", "logsumexp")


def _ready_made_call(frame: FrameType, event: str, arg: object) -> str | None:
    """The ready-made softmax a profiler event calls ("torch.softmax"), or None."""
    if event == "c_call":  # a builtin: torch.softmax, Tensor.softmax, torch.special.logsumexp
        name = getattr(arg, "__name__", "") or ""
        owner = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
    elif event == "call":  # Python: torch.nn.functional.softmax, attention_course.softmax
        name, owner = frame.f_code.co_name, frame.f_globals.get("__name__", "")
    else:
        return None
    name = name.removeprefix("special_")
    return f"{owner}.{name}" if name in _READY_MADE and str(owner).startswith(("torch", "attention_course")) else None


def _writes_its_own_softmax(answer, g):  # noqa: ANN001, ANN202
    called: list[str] = []

    def watch(frame: FrameType, event: str, arg: object) -> None:
        found = None if called else _ready_made_call(frame, event, arg)
        if found:
            called.append(found)

    seed = int(torch.randint(2**31 - 1, (1,), generator=g))
    previous = sys.getprofile()
    sys.setprofile(watch)  # sees every call the answer makes, Python and builtin
    try:
        answer([4, 64], 8, 16, torch.Generator().manual_seed(seed))
    finally:
        sys.setprofile(previous)
    if called:
        return f"the answer called {called[0]}; the project asks for the softmax written out with exp"
    return None


register("2.5", "the saturation curves, measured from scratch", "project", "saturation_curves", [
    Check("per width, the mean entropy, largest weight and ‖J‖_F of scaled and unscaled scores equal a float64 "
          "recomputation from the same draws: typical widths, d_k = 4096 (unscaled scores in the hundreds) and "
          "256 keys, d_k = 1, odd widths, one key, two keys, one row; d_ks left as it was",
          _same_draws_same_values),
    Check("the curves stay within their bounds, agree at d_k = 1, the scaled one is flat from d_k = 16 on, and "
          "the unscaled one saturates: entropy falls, largest weight rises, ‖J‖_F falls (widths 1 to 4096, "
          "1024 rows)", _flat_and_saturating),
    Check("writes the softmax out: calls none of torch's softmax, log_softmax and logsumexp, nor the course's "
          "softmax", _writes_its_own_softmax),
])
