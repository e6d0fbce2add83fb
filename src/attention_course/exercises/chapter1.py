"""Chapter 1's exercises: attention as a soft lookup (checks only; the solutions live in ``solutions/ch01.py``)."""

from __future__ import annotations

import math

import torch

from .._checks import describe
from ..attention import scaled_dot_product_attention
from .checking import (
    Check,
    Verdict,
    agrees,
    as_values,
    autograd_saves,
    changed_inputs,
    compare,
    randn,
    register,
    where_off,
)

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


#: (scores, fraction of log n wanted, spread of the scores[, a common offset]) per family
_TARGETS = {"typical": [(5, 0.3, 3.0), (10, 0.8, 3.0), (50, 0.5, 3.0)],
            # scores a thousandth apart (β in the thousands); low targets over wide scores; scores near 500, where
            # exp(β·s) overflows unless the largest score is subtracted
            "extreme": [(20, 0.05, 1e-3), (8, 0.02, 10.0), (12, 0.1, 300.0), (10, 0.5, 1.0, 500.0)],
            "unusual shapes": [(2, 0.5, 1.0), (3, 0.99, 1.0)]}


def _hits_target(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _TARGETS.items():
        for n, frac, spread, *offset in cases:
            s = randn(g, n).double() * spread + (offset[0] if offset else 0.0)
            target = frac * math.log(n)
            beta = float(answer(s.float(), target))
            got = float(_entropy(torch.softmax(beta * s, -1)))
            if not (beta > 0 and abs(got - target) < 1e-3):
                return (f"{family} inputs, {n} scores, target {target:.3f} nats: β = {beta:.4g} gives entropy "
                        f"{got:.4f} nats")
    return None


register("1.3", "the temperature that gives a target entropy", "measure", "temperature_for_entropy", [
    Check("returns β > 0 with H(softmax(β·s)) within 1e-3 of the target, in nats: typical scores, scores a "
          "thousandth apart, low targets over wide scores, two and three keys", _hits_target),
])


def _query_gradient64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    q = q.clone().requires_grad_(True)
    (torch.softmax(k @ q / math.sqrt(q.shape[-1]), -1) @ v @ g).backward()
    return q.grad


def _one_query_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(randn(g, 8), randn(g, 6, 8), randn(g, 6, 3), randn(g, 3)),
                        (randn(g, 16), randn(g, 11, 16), randn(g, 11, 16), randn(g, 16))],
            # scores in the hundreds: the weights must not overflow, and the gradient is tiny but exact
            "extreme": [(randn(g, 8) * 100, randn(g, 9, 8), randn(g, 9, 4), randn(g, 4))],
            "unusual shapes": [(randn(g, 5), randn(g, 1, 5), randn(g, 1, 2), randn(g, 2)),  # one key: 0
                               (randn(g, 7), randn(g, 4, 7), randn(g, 4, 1), randn(g, 1))]}


def _one_query_without_autograd(answer, g):  # noqa: ANN001, ANN202
    args = (randn(g, 8), randn(g, 6, 8), randn(g, 6, 3), randn(g, 3))  # no requires_grad
    saved, _ = autograd_saves(answer, args)
    return f"autograd saved {saved} tensor(s) while the answer ran: it used autograd" if saved else None


register("1.4", "∂L/∂q by hand", "derive", "query_gradient", [
    agrees("equals autograd's gradient of L = g · attention(q, K, V) for one query q: typical inputs, scores "
           "in the hundreds, one key, d_v = 1", _one_query_cases, _query_gradient64, atol=1e-5, rtol=1e-4),
    Check("uses no autograd (the chain rule by hand)", _one_query_without_autograd),
])


# ------------------------------------------------------------------------------- 1.5, the project: the backward
_RETURNED = ("out", "grad_q", "grad_k", "grad_v")


def _attention_and_gradients64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The oracle: the output and autograd's gradients of L = Σ grad_out ⊙ out, in float64."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
        out.backward(grad_out.double())
    return out.detach(), q.grad, k.grad, v.grad


def _four(got: object) -> tuple | str:
    """The answer's (out, grad_q, grad_k, grad_v) as tensors where they are NumPy arrays, or why not four."""
    if not isinstance(got, (tuple, list)) or len(got) != 4:
        return f"the answer should return four tensors (out, grad_q, grad_k, grad_v), got {describe(got)}"
    return tuple(as_values(x, torch.empty(0)) for x in got)


def _term_sizes64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """For each of the four tensors, each entry's sum of the sizes of the terms it adds up: a float32 answer's
    rounding error is a small multiple of it (a one-hot row's key gradients are tiny differences of big terms)."""
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.softmax(q.double() @ k.double().transpose(-2, -1) * scale, dim=-1)
    q, k, v, grad_out = (t.double().abs() for t in (q, k, v, grad_out))
    grad_p = grad_out @ v.transpose(-2, -1)
    grad_s = p * (grad_p + (p * grad_p).sum(-1, keepdim=True))
    return p @ v, grad_s @ k * scale, grad_s.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ grad_out


def _within(got: object, want: torch.Tensor, size: torch.Tensor, tol: float, what: str) -> Verdict:
    """None if ``got`` has ``want``'s shape and every entry is within ``tol`` of the size of its terms."""
    got = as_values(got, want)
    if not isinstance(got, torch.Tensor):
        return f"{what} must be a torch tensor, got {describe(got)}"
    if tuple(got.shape) != tuple(want.shape):
        return f"{what} should have shape {tuple(want.shape)}, got {tuple(got.shape)}"
    ok = (got.double() - want).abs() <= tol * (size + 1e-3)  # NaN fails
    return None if bool(ok.all()) else f"{what}: {where_off(got, want)} (tolerance {tol:.0e} of its terms' size)"


def _compare_four(got: object, want: tuple[torch.Tensor, ...], sizes: tuple[torch.Tensor, ...],
                  tol: float) -> Verdict:
    """The answer's four tensors against the oracle's, each entry within ``tol`` of the size of its terms."""
    got = _four(got)
    if isinstance(got, str):
        return got
    for name, g_x, w_x, size in zip(_RETURNED, got, want, sizes, strict=True):
        verdict = _within(g_x, w_x, size, tol, name)
        if verdict:
            return verdict
    return None


def _dyadic(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Normal numbers rounded to eighths: their dot products are exact in float32 in any order."""
    return (randn(g, *shape) * 8).round() / 8


def _far_rows(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Rows whose scores are shifted by thousands (+3000, −2000, +700, −450), exactly in float32, while each
    row's weights stay spread over the keys: the backward must be stable too, not only the forward."""
    shifts = torch.tensor([3000.0, -2000.0, 700.0, -450.0])
    q, k = _dyadic(g, 4, 16), _dyadic(g, 9, 16)  # d = 16, √d = 4
    q[:, -1], k[:, -1] = shifts / 2, 8.0  # score shift q[-1] · k[-1] / √d = shift, the same for every key
    return q, k, randn(g, 9, 3), randn(g, 4, 3)


def _project_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    rows = torch.tensor([1.0, 3000.0, -2000.0, 0.5])[:, None]  # rows whose largest scores differ by thousands
    return {
        "typical": [(randn(g, 4, 8), randn(g, 6, 8), randn(g, 6, 5), randn(g, 4, 5)),
                    (randn(g, 2, 3, 5, 16), randn(g, 2, 3, 7, 16), randn(g, 2, 3, 7, 16), randn(g, 2, 3, 5, 16))],
        # exp(score) overflows float32 past 88: the forward and the backward must both be stable
        # (eighths, and d = 4 or 16: the scores are exact in float32, so float32 answers are judged on the rest)
        "extreme": [(_dyadic(g, 3, 4) * 500, _dyadic(g, 5, 4), randn(g, 5, 2), randn(g, 3, 2)),
                    (_dyadic(g, 4, 16) * rows, _dyadic(g, 9, 16), randn(g, 9, 3), randn(g, 4, 3)),
                    _far_rows(g)],
        "unusual shapes": [(randn(g, 1, 5), randn(g, 1, 5), randn(g, 1, 3), randn(g, 1, 3)),  # one query, one key
                           (randn(g, 3, 2, 1, 7), randn(g, 3, 2, 11, 7), randn(g, 3, 2, 11, 1),
                            randn(g, 3, 2, 1, 1)),
                           (randn(g, 2, 4, 3), randn(g, 2, 1, 3), randn(g, 2, 1, 6), randn(g, 2, 4, 6)),  # one key
                           (randn(g, 2, 3, 2, 5, 9), randn(g, 2, 3, 2, 6, 9), randn(g, 2, 3, 2, 6, 4),
                            randn(g, 2, 3, 2, 5, 4))],  # three leading axes
    }


def _shapes(args: tuple) -> str:
    return ", ".join(str(tuple(a.shape)) for a in args)


def _values_and_gradients(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _project_cases(g).items():
        for number, args in enumerate(cases, 1):
            kept = [a.clone() for a in args]
            verdict = _compare_four(answer(*args), _attention_and_gradients64(*kept), _term_sizes64(*kept), 1e-4)
            if verdict is None and changed_inputs(args, kept):
                verdict = "the answer changed its inputs in place"
            if verdict:
                return f"{family} inputs, case {number} (shapes {_shapes(kept)}): {verdict}"
    return None


class _HandWritten(torch.autograd.Function):
    """Attention whose backward is the learner's: gradcheck compares it with finite differences of the forward."""

    @staticmethod
    def forward(ctx, q, k, v, answer):  # noqa: ANN001, ANN205
        ctx.answer = answer
        ctx.save_for_backward(q, k, v)
        got = _four(answer(q, k, v, q.new_zeros(*q.shape[:-1], v.shape[-1])))
        if isinstance(got, str):
            raise TypeError(got)
        return got[0]

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        got = _four(ctx.answer(*ctx.saved_tensors, grad_out))
        if isinstance(got, str):
            raise TypeError(got)
        return *got[1:], None


def _passes_gradcheck(answer, g):  # noqa: ANN001, ANN202
    def hand_written(*args: torch.Tensor) -> torch.Tensor:
        return _HandWritten.apply(*args, answer)

    for shapes in (((3, 4), (5, 4), (5, 2)), ((2, 3, 5), (2, 4, 5), (2, 4, 3))):
        inputs = [randn(g, *s).double() for s in shapes]
        if torch.autograd.gradcheck(hand_written, [x.clone().requires_grad_(True) for x in inputs],
                                    raise_exception=False):
            continue
        for which, name in enumerate(_RETURNED[1:]):  # which gradient is off
            args = [x.clone().requires_grad_(i == which) for i, x in enumerate(inputs)]
            if not torch.autograd.gradcheck(hand_written, args, raise_exception=False):
                return (f"shapes {_shapes(inputs)}: {name} disagrees with central differences of out "
                        "(torch.autograd.gradcheck, float64)")
        return f"shapes {_shapes(inputs)}: torch.autograd.gradcheck fails (float64)"
    return None


def _gradient_sums(answer, g):  # noqa: ANN001, ANN202
    q, k, v, grad_out = randn(g, 2, 5, 8), randn(g, 2, 7, 8), randn(g, 2, 7, 3), randn(g, 2, 5, 3)
    got = _four(answer(q, k, v, grad_out))
    if isinstance(got, str):
        return got
    _, _, grad_k, grad_v = got
    for name, total, size in (("the keys' gradients", grad_k.sum(-2), grad_k.abs().sum(-2)),
                              ("the values' gradients minus the upstream ones", grad_v.sum(-2) - grad_out.sum(-2),
                               grad_v.abs().sum(-2) + grad_out.abs().sum(-2))):
        if not bool((total.double().abs() <= 1e-5 * size.double() + 1e-6).all()):
            return f"{name}, summed over the keys, reach {float(total.abs().max()):.2e}, not 0"
    return None


def _without_autograd(answer, g):  # noqa: ANN001, ANN202
    args = (randn(g, 2, 5, 8), randn(g, 2, 7, 8), randn(g, 2, 7, 3), randn(g, 2, 5, 3))  # no requires_grad
    saved, got = autograd_saves(answer, args)  # an answer that builds a graph makes autograd save tensors for it
    if saved:
        return f"autograd saved {saved} tensor(s) for a backward pass while the answer ran: it used autograd"
    four = _four(got)
    if isinstance(four, str):
        return four
    if any(isinstance(x, torch.Tensor) and (x.requires_grad or x.grad_fn is not None) for x in four):
        return "the answer returned tensors attached to an autograd graph"
    with torch.no_grad():
        again = answer(*args)
    verdict = _compare_four(again, tuple(x.double() for x in four), _term_sizes64(*args), 1e-6)
    return verdict and f"under torch.no_grad() the answer changes: {verdict}"


register("1.5", "attention's forward and backward by hand", "project", "attention_by_hand", [
    Check("returns out and ∂L/∂q, ∂L/∂k, ∂L/∂v equal to float64 autograd's, L = Σ grad_out ⊙ out: typical "
          "inputs, scores in the hundreds and rows thousands apart, batch and heads, n_q ≠ n_k, one key, "
          "d_v ≠ d; inputs left as they were", _values_and_gradients),
    Check("as the backward of a torch.autograd.Function, passes torch.autograd.gradcheck (float64)",
          _passes_gradcheck),
    Check("the keys' gradients sum to 0 over the keys; the values' gradients sum to the upstream gradients' sum",
          _gradient_sums),
    Check("uses no autograd: records no graph with grad mode on, and gives the same values under torch.no_grad()",
          _without_autograd),
])
