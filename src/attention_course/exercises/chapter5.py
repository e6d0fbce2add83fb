"""Chapter 5's exercises: the full Transformer (checks only; the solutions live in ``solutions/ch05.py``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import describe
from ..positional import sinusoidal_encoding
from .checking import Check, agrees, compare, register

__all__: list[str] = []


def _lower_right64(n_q: int, n_k: int) -> torch.Tensor:
    return torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)


def _mask_agrees(answer, g):  # noqa: ANN001, ANN202
    for n_q, n_k in ((4, 4), (1, 6), (3, 8), (5, 2), (1, 1), (9, 3), (2, 17)):
        got = answer(n_q, n_k)
        want = _lower_right64(n_q, n_k)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or tuple(got.shape) != (n_q, n_k):
            return f"n_q = {n_q}, n_k = {n_k}: the answer should be a bool tensor of shape ({n_q}, {n_k}), " \
                   f"got {describe(got)}"
        if not torch.equal(got, want):
            i, j = (got != want).nonzero()[0].tolist()
            return f"n_q = {n_q}, n_k = {n_k}: query {i} and key {j} are {'' if got[i, j] else 'not '}allowed"
    return None


def _new_token_sees_the_cache(answer, g):  # noqa: ANN001, ANN202
    got = answer(1, 9)
    return None if bool(torch.as_tensor(got).all()) else "one new query after 8 cached keys must see all 9 keys"


register("5.1", "the causal mask for new queries after a cache", "build", "cached_causal_mask", [
    Check("equals the reference mask, square and not, n_q > n_k included", _mask_agrees),
    Check("one new token sees every cached key and itself", _new_token_sees_the_cache),
])


def _smoothing_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(torch.randn(6, 5, generator=g), torch.randint(0, 5, (6,), generator=g), 0.1),
                        (torch.randn(4, 11, generator=g) * 3, torch.randint(0, 11, (4,), generator=g), 0.3)],
            # logits in the hundreds: log(softmax(·)) underflows to −inf where log-sum-exp does not
            "extreme": [(torch.randn(5, 7, generator=g) * 300, torch.randint(0, 7, (5,), generator=g), 0.2)],
            "unusual shapes": [(torch.randn(1, 2, generator=g), torch.randint(0, 2, (1,), generator=g), 0.0),
                               (torch.randn(3, 4, generator=g), torch.randint(0, 4, (3,), generator=g), 1.0)]}


register("5.2", "label-smoothed cross-entropy", "build", "smoothed_cross_entropy", [
    agrees("equals the label-smoothed cross-entropy, a mean over the batch: typical logits, logits in the "
           "hundreds, one example of two classes, ε = 0 and ε = 1", _smoothing_cases,
           lambda logits, t, eps: F.cross_entropy(logits, t, label_smoothing=eps), atol=1e-4, rtol=1e-5),
])


register("5.3", "the sinusoidal encoding", "build", "sinusoidal_positions", [
    agrees("PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))",
           lambda g: {"typical": [(7, 8), (50, 16)], "unusual shapes": [(3, 2), (1, 6), (128, 64)]},
           lambda n, d: sinusoidal_encoding(n, d).double(), atol=1e-4),
])


def _pre_ln_cases(g: torch.Generator) -> list[tuple]:
    """Typical (width 8), unusual (width 3, one token of one sequence) and extreme (inputs in the hundreds)."""
    cases = []
    for shape, scale in (((2, 5, 8), 1.0), ((1, 1, 3), 1.0), ((3, 4, 8), 300.0)):
        width = shape[-1]
        sublayer, norm = torch.nn.Linear(width, width), torch.nn.LayerNorm(width)
        with torch.no_grad():  # every parameter drawn from the check's generator, the LayerNorm's too
            for p in (*sublayer.parameters(), *norm.parameters()):
                p.copy_(torch.randn(p.shape, generator=g))
        cases.append((torch.randn(*shape, generator=g) * scale, sublayer, norm))
    return cases


def _pre_ln64(x, sublayer, norm):  # noqa: ANN001, ANN202
    h = F.layer_norm(x, norm.normalized_shape, norm.weight.double(), norm.bias.double(), norm.eps)
    return x + F.linear(h, sublayer.weight.double(), sublayer.bias.double())


def _not_post_ln(answer, g):  # noqa: ANN001, ANN202
    for x, sublayer, norm in _pre_ln_cases(g):
        with torch.no_grad():
            want = _pre_ln64(x.double(), sublayer, norm)
            kept = x.clone()
            got = answer(x, sublayer, norm)
        if not torch.equal(x, kept):
            return "the answer changed x in place (the residual stream is needed unchanged)"
        verdict = compare(got, want, atol=1e-4, rtol=1e-5, what="the block's output")
        if verdict:
            return f"x of shape {tuple(x.shape)}: {verdict}"
    return None


register("5.4", "a pre-LN residual block", "build", "pre_ln_residual", [
    Check("equals the reference block (pre-LN, as GPT-2), x left as it was: width 8, width 3 with one token, "
          "inputs in the hundreds", _not_post_ln),
])
