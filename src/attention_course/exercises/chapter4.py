"""Chapter 4's exercises: multi-head attention (checks only; the solutions live in ``solutions/ch04.py``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import describe
from .checking import Check, agrees, as_values, randn, register

__all__: list[str] = []


def _split64(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, n, d_model = x.shape
    return x.reshape(batch, n, heads, d_model // heads).transpose(1, 2)


def _split_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(randn(g, 2, 5, 12), 3), (randn(g, 3, 4, 16), 4)],
            # one head; as many heads as features; an x that is a transposed view (strided in memory)
            "extreme": [(randn(g, 2, 3, 8), 1), (randn(g, 2, 3, 8), 8), (randn(g, 2, 12, 6).transpose(1, 2), 2)],
            "unusual shapes": [(randn(g, 1, 7, 16), 4), (randn(g, 4, 1, 15), 5), (randn(g, 1, 1, 9), 3)]}


register("4.1", "split the model width into heads", "build", "split_heads", [
    agrees("(batch, n, d_model) → (batch, heads, n, d_model / heads), head i holding features i·d_h to (i+1)·d_h: "
           "one head to one feature per head, a strided x, one batch row, one token, odd widths",
           _split_cases, _split64, atol=0),
])


def _mha64(x, in_w, in_b, out_w, out_b, heads):  # noqa: ANN001, ANN202
    d = x.shape[-1]
    out, _ = F.multi_head_attention_forward(
        x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), d, heads, in_w, in_b, None, None, False, 0.0,
        out_w, out_b, training=False, need_weights=False)
    return out.transpose(0, 1)


def _mha_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    def case(batch: int, n: int, d: int, heads: int, scale: float = 1.0) -> tuple:
        return (randn(g, batch, n, d) * scale, randn(g, 3 * d, d) / d**0.5, randn(g, 3 * d), randn(g, d, d) / d**0.5,
                randn(g, d), heads)

    return {"typical": [case(2, 5, 8, 2), case(2, 5, 12, 4)],
            "extreme": [case(2, 6, 8, 2, scale=100.0), case(1, 4, 16, 4, scale=40.0)],  # scores in the thousands
            "unusual shapes": [case(1, 1, 6, 3), case(3, 4, 6, 1), case(2, 3, 6, 6), case(2, 5, 15, 5)]}


register("4.2", "multi-head attention from nn.MultiheadAttention's weights", "build", "mha_forward", [
    agrees("equals nn.MultiheadAttention (batch first, self-attention, no mask) given its in_proj and out_proj: "
           "typical, scores in the thousands, one token, one head, one feature per head, odd head widths",
           _mha_cases, _mha64, atol=1e-4, rtol=1e-4),
])

_FLOP_CASES = {"typical": [(16, 32, 4), (10, 24, 1)],
               "extreme": [(4096, 4096, 32), (8192, 8192, 64)],  # counts past 2³¹
               "unusual shapes": [(1, 8, 8), (7, 63, 9), (5, 64, 64)]}


def _counts_like_flop_counter(answer, g):  # noqa: ANN001, ANN202
    from torch.utils.flop_counter import FlopCounterMode

    for family, cases in _FLOP_CASES.items():
        for n, d_model, heads in cases:
            q = torch.zeros(heads, n, d_model // heads, device="meta")  # shapes only: nothing is computed
            with FlopCounterMode(display=False) as counter:
                torch.matmul(q, q.transpose(-2, -1))
            got, want = answer(n, d_model, heads), counter.get_total_flops()
            value = as_values(got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got,
                              torch.zeros(()))
            if isinstance(got, bool) or not isinstance(value, torch.Tensor) or value.ndim != 0:
                return f"{family} inputs: the answer should be a number, got {describe(got)}"
            if float(value) != want:
                return (f"{family} inputs n = {n}, d_model = {d_model}, heads = {heads}: {got} is too "
                        f"{'small' if float(value) < want else 'large'} for FlopCounterMode's count")
    return None


register("4.3", "what the heads' scores cost", "measure", "score_flops", [
    Check("a number equal to FlopCounterMode's count of every head's Q Kᵀ: small sizes, counts past 2³¹, one "
          "token, one feature per head", _counts_like_flop_counter),
])


def _gqa_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    def case(batch: int, heads: int, kv_heads: int, n_q: int, n_k: int, d: int, d_v: int | None = None,
             scale: float = 1.0) -> tuple:
        return (randn(g, batch, heads, n_q, d) * scale, randn(g, batch, kv_heads, n_k, d),
                randn(g, batch, kv_heads, n_k, d_v or d))

    return {"typical": [case(2, 4, 2, 5, 6, 8), case(1, 6, 3, 3, 3, 4)],
            "extreme": [case(1, 4, 2, 5, 7, 8, scale=300.0), case(2, 8, 2, 3, 4, 16, scale=80.0)],
            # groups of 1 (every head its own), 3 and 4 (one key-value head), n_q ≠ n_k, one key, odd widths
            "unusual shapes": [case(1, 3, 3, 4, 2, 5), case(2, 6, 2, 1, 7, 3, d_v=5), case(1, 4, 1, 3, 1, 8),
                               case(3, 9, 3, 2, 5, 7, d_v=1)]}


register("4.4", "grouped-query attention", "build", "grouped_query_attention", [
    agrees("query head h reads key–value head h // (heads / kv_heads): groups of 1, 2, 3 and 4, scores in the "
           "hundreds, n_q ≠ n_k, one key, odd widths", _gqa_cases,
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), atol=1e-4, rtol=1e-4),
])
