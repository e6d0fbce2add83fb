"""Bad inputs for experiments/transformer.py: chapter 5's training plan and head ablation."""

from __future__ import annotations

from attention_course.device import DeviceInfo
from attention_course.experiments.transformer import ReversalPlan, reversal_plan, zeroed_head
from attention_course.multihead import MultiHeadAttention

from . import case

RESULTS = (ReversalPlan,)


def _enter(attention, head):
    with zeroed_head(attention, head):
        pass


CASES = [
    case(reversal_plan, lambda: reversal_plan("cuda"), TypeError, arg="info", id="transformer.reversal_plan-str"),
    case(reversal_plan, lambda: reversal_plan(DeviceInfo("cuda", "x", 2**30, 2**30, None)), ValueError,
         arg="info", says="capability", id="transformer.reversal_plan-capability"),
    case(zeroed_head, lambda: _enter(object(), 0), TypeError, arg="attention", id="transformer.zeroed_head-module"),
    case(zeroed_head, lambda: _enter(MultiHeadAttention(8, 2), 2), ValueError, arg="head",
         id="transformer.zeroed_head-range"),
    case(zeroed_head, lambda: _enter(MultiHeadAttention(8, 2), 1.0), TypeError, arg="head",
         id="transformer.zeroed_head-float"),
]
