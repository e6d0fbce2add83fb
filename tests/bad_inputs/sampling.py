"""Bad inputs for sampling.py: logits that are not a vocabulary axis, settings outside their range."""

from __future__ import annotations

import torch

from attention_course.sampling import (
    greedy,
    next_token_probs,
    sample_next,
    scale_by_temperature,
    top_k_filter,
    top_p_filter,
)
from bad_inputs import case

Z = torch.zeros(2, 5)

CASES = [
    case(greedy, lambda: greedy([1.0, 2.0]), TypeError, arg="logits", id="sampling.greedy-list"),
    case(greedy, lambda: greedy(torch.tensor([1, 2])), TypeError, arg="logits", says="floating",
         id="sampling.greedy-int"),
    case(greedy, lambda: greedy(torch.zeros(3, 0)), ValueError, arg="logits", says="vocab",
         id="sampling.greedy-empty-vocab"),
    case(scale_by_temperature, lambda: scale_by_temperature(Z, 0.0), ValueError, arg="temperature",
         id="sampling.scale_by_temperature-zero"),
    case(scale_by_temperature, lambda: scale_by_temperature(Z, float("inf")), ValueError, arg="temperature",
         id="sampling.scale_by_temperature-inf"),
    case(top_k_filter, lambda: top_k_filter(Z, 0), ValueError, arg="k", id="sampling.top_k_filter-zero"),
    case(top_k_filter, lambda: top_k_filter(Z, 2.0), TypeError, arg="k", id="sampling.top_k_filter-float"),
    case(top_p_filter, lambda: top_p_filter(Z, 0.0), ValueError, arg="p", id="sampling.top_p_filter-zero"),
    case(top_p_filter, lambda: top_p_filter(Z, 1.5), ValueError, arg="p", id="sampling.top_p_filter-above-one"),
    case(next_token_probs, lambda: next_token_probs(Z, temperature=-1.0), ValueError, arg="temperature",
         id="sampling.next_token_probs-negative-temperature"),
    case(next_token_probs, lambda: next_token_probs(Z, top_k=-2), ValueError, arg="top_k",
         id="sampling.next_token_probs-top-k"),
    case(next_token_probs, lambda: next_token_probs(Z, top_p=2.0), ValueError, arg="top_p",
         id="sampling.next_token_probs-top-p"),
    case(sample_next, lambda: sample_next(torch.zeros(5)), ValueError, arg="logits", says="(batch, vocab)",
         id="sampling.sample_next-1d"),
    case(sample_next, lambda: sample_next(Z, generator=3), TypeError, arg="generator",
         id="sampling.sample_next-generator"),
]
