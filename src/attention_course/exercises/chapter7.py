"""Chapter 7's exercises: the decoder-only model (checks only; the solutions live in ``solutions/ch07.py``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._checks import describe
from ..tokenizer import merge_pair
from .checking import Check, agrees, register

__all__: list[str] = []


def _top_p_properties(answer, g):  # noqa: ANN001, ANN202
    # typical; extreme (logits in the hundreds, a tiny spread); unusual (one token, p = 1)
    for vocab, p, scale in ((10, 0.5, 1.0), (50, 0.9, 2.0), (6, 0.99, 0.5), (8, 0.05, 3.0),
                            (12, 0.7, 300.0), (40, 0.5, 1e-3), (1, 0.5, 1.0), (7, 1.0, 1.0)):
        logits = torch.randn(vocab, generator=g) * scale
        kept_input = logits.clone()
        got = answer(logits, p)
        if not torch.equal(logits, kept_input):
            return f"vocab {vocab}: the answer changed the logits it was given in place"
        if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
            return f"vocab {vocab}: expected logits of shape ({vocab},), got {describe(got)}"
        kept = torch.isfinite(got)
        if not torch.equal(got[kept], logits[kept]) or (got[~kept] != -math.inf).any():
            return f"vocab {vocab}: kept logits must be unchanged and the others −inf"
        probs = torch.softmax(logits.double(), -1)
        mass, weakest = float(probs[kept].sum()), float(probs[kept].min()) if kept.any() else 0.0
        if mass < p - 1e-6:  # 1e-6: the sum of a float64 softmax rounds (p = 1 keeps every token)
            return f"vocab {vocab}, p = {p}: the kept tokens hold {mass:.3f} of the probability, less than p"
        if mass - weakest >= p + 1e-6:
            return f"vocab {vocab}, p = {p}: not minimal, the set still holds {mass - weakest:.3f} ≥ p without " \
                   "its least probable token"
        if (~kept).any() and float(probs[~kept].max()) > weakest:
            return f"vocab {vocab}, p = {p}: a dropped token is more probable than a kept one"
    return None


register("7.1", "top-p (nucleus) filtering", "build", "top_p_filter", [
    Check("keeps the smallest set of most probable tokens holding ≥ p of the probability, others −inf: typical "
          "logits, logits in the hundreds or a thousandth apart, one token, p = 1; the input left as it was",
          _top_p_properties),
])


def _bits_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(torch.randn(2, 5, 7, generator=g), torch.randint(0, 7, (2, 5), generator=g), 10),
                        (torch.randn(1, 9, 30, generator=g) * 2, torch.randint(0, 30, (1, 9), generator=g), 31)],
            # logits in the hundreds: log(softmax(·)) underflows to −inf; the log-sum-exp form does not
            "extreme": [(torch.randn(2, 4, 9, generator=g) * 300, torch.randint(0, 9, (2, 4), generator=g), 6)],
            "unusual shapes": [(torch.randn(1, 1, 2, generator=g), torch.randint(0, 2, (1, 1), generator=g), 3)]}


register("7.2", "bits per character", "measure", "bits_per_character", [
    agrees("the total cross-entropy in bits over the characters the tokens spell", _bits_cases,
           lambda logits, t, chars: F.cross_entropy(logits.flatten(0, 1), t.flatten(), reduction="sum")
           / math.log(2) / chars, atol=1e-4, rtol=1e-4),
])


def _merges(answer, g):  # noqa: ANN001, ANN202
    cases = [([1, 1, 1], (1, 1), 9), ([1, 2, 1, 2, 3], (1, 2), 9), ([3, 1, 2], (2, 3), 9), ([], (0, 1), 9)]
    cases += [(torch.randint(0, 3, (20,), generator=g).tolist(), (1, 2), 9) for _ in range(3)]
    # ids past a byte and of several digits: tricks on strings or bytes of the ids fail here
    cases += [([11, 2, 1, 2, 12], (1, 2), 300), ([300, 12, 300, 12, 3], (300, 12), 4097),
              ([21, 1, 2, 11], (1, 2), 9)]
    for ids, pair, new in cases:
        given = list(ids)
        got = answer(given, pair, new)
        if given != ids:
            return f"ids {ids}: the answer changed the list it was given in place"
        if list(got) != merge_pair(ids, pair, new):  # the tokenizer's own merge
            return f"ids {ids}, pair {pair} → {new}: got {list(got)}, not the merged list"
    return None


register("7.3", "one BPE merge", "build", "merge_pair", [
    Check("replaces each occurrence of the pair by the new id, left to right, occurrences not overlapping; ids past "
          "255 and of several digits; the input list left as it was", _merges),
])


def _loss_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(torch.randn(2, 6, 5, generator=g), torch.randint(0, 5, (2, 6), generator=g)),
                        (torch.randn(3, 4, 11, generator=g), torch.randint(0, 11, (3, 4), generator=g))],
            "extreme": [(torch.randn(2, 5, 8, generator=g) * 300, torch.randint(0, 8, (2, 5), generator=g))],
            "unusual shapes": [(torch.randn(1, 2, 3, generator=g), torch.randint(0, 3, (1, 2), generator=g))]}


register("7.4", "the next-token loss", "build", "next_token_loss", [
    agrees("mean cross-entropy of position t's logits against token t + 1", _loss_cases,
           lambda logits, t: F.cross_entropy(logits[:, :-1].flatten(0, 1), t[:, 1:].flatten()), atol=1e-4,
           rtol=1e-4),
])
