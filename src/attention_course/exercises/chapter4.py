"""Chapter 4's exercises: multi-head attention (checks only; the solutions live in ``solutions/ch04.py``)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .._checks import describe
from .checking import Check, agrees, randn, register

__all__: list[str] = []


def _split64(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, n, d_model = x.shape
    return x.reshape(batch, n, heads, d_model // heads).transpose(1, 2)


register("4.1", "split the model width into heads", "build", "split_heads", [
    agrees("(batch, n, d_model) → (batch, heads, n, d_model / heads), head i holding features i·d_h to (i+1)·d_h",
           lambda g: [(randn(g, 2, 5, 12), 3), (randn(g, 1, 7, 16), 4), (randn(g, 3, 4, 8), 1)], _split64,
           atol=0),
])


def _mha64(x, in_w, in_b, out_w, out_b, heads):  # noqa: ANN001, ANN202
    d = x.shape[-1]
    out, _ = F.multi_head_attention_forward(
        x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), d, heads, in_w, in_b, None, None, False, 0.0,
        out_w, out_b, training=False, need_weights=False)
    return out.transpose(0, 1)


def _mha_cases(g: torch.Generator) -> list[tuple]:
    return [(randn(g, 2, 5, d), randn(g, 3 * d, d) / d**0.5, randn(g, 3 * d), randn(g, d, d) / d**0.5,
             randn(g, d), heads) for d, heads in ((8, 2), (12, 4))]


register("4.2", "multi-head attention from nn.MultiheadAttention's weights", "build", "mha_forward", [
    agrees("equals nn.MultiheadAttention (batch first, self-attention, no mask) given its in_proj and out_proj",
           _mha_cases, _mha64, atol=1e-4),
])


def _counts_like_flop_counter(answer, g):  # noqa: ANN001, ANN202
    from torch.utils.flop_counter import FlopCounterMode

    for n, d_model, heads in ((16, 32, 4), (10, 24, 1), (7, 64, 8)):
        q = torch.zeros(heads, n, d_model // heads)
        with FlopCounterMode(display=False) as counter:
            torch.matmul(q, q.transpose(-2, -1))
        got, want = answer(n, d_model, heads), counter.get_total_flops()
        if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
            return f"the answer should be an integer, got {describe(got)}"
        if got != want:
            return (f"n = {n}, d_model = {d_model}, heads = {heads}: {got} is too "
                    f"{'small' if got < want else 'large'} for FlopCounterMode's count")
    return None


register("4.3", "what the heads' scores cost", "measure", "score_flops", [
    Check("an int equal to FlopCounterMode's count of every head's Q Kᵀ, whatever the number of heads",
          _counts_like_flop_counter),
])


def _gqa_cases(g: torch.Generator) -> list[tuple]:
    return [(randn(g, 2, 4, 5, 8), randn(g, 2, 2, 6, 8), randn(g, 2, 2, 6, 8)),
            (randn(g, 1, 6, 3, 4), randn(g, 1, 3, 3, 4), randn(g, 1, 3, 3, 4))]


register("4.4", "grouped-query attention", "build", "grouped_query_attention", [
    agrees("query head h reads key-value head h // (heads / kv_heads), as F.scaled_dot_product_attention("
           "enable_gqa=True)", _gqa_cases,
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
])
