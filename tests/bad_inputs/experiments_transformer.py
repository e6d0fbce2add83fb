"""Bad inputs for experiments/transformer.py: chapter 5's training plan and head ablation."""

from __future__ import annotations

import torch

from attention_course.device import DeviceInfo
from attention_course.experiments.transformer import ReversalPlan, ablated_head, mean_head_outputs, reversal_plan
from attention_course.multihead import MultiHeadAttention

from . import case

RESULTS = (ReversalPlan,)


def _enter(attention, head, mean=None):
    with ablated_head(attention, head, mean):
        pass


def _means(where):
    mha = MultiHeadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 3, 8)
    return mean_head_outputs(mha, lambda: mha(x, x, x), where)


CASES = [
    case(reversal_plan, lambda: reversal_plan("cuda"), TypeError, arg="info", id="transformer.reversal_plan-str"),
    case(reversal_plan, lambda: reversal_plan(DeviceInfo("cuda", "x", 2**30, 2**30, None)), ValueError,
         arg="info", says="capability", id="transformer.reversal_plan-capability"),
    case(ablated_head, lambda: _enter(object(), 0), TypeError, arg="attention", id="transformer.ablated_head-module"),
    case(ablated_head, lambda: _enter(MultiHeadAttention(8, 2), 2), ValueError, arg="head",
         id="transformer.ablated_head-range"),
    case(ablated_head, lambda: _enter(MultiHeadAttention(8, 2), 1.0), TypeError, arg="head",
         id="transformer.ablated_head-float"),
    case(ablated_head, lambda: _enter(MultiHeadAttention(8, 2), 0, torch.zeros(3)), ValueError, arg="mean",
         says="(4,)", id="transformer.ablated_head-mean-shape"),
    case(ablated_head, lambda: _enter(MultiHeadAttention(8, 2), 0, torch.zeros(4, dtype=torch.long)), TypeError,
         arg="mean", id="transformer.ablated_head-mean-int"),
    case(ablated_head, lambda: _enter(MultiHeadAttention(8, 2, bias=False), 0, torch.zeros(4)), ValueError,
         arg="mean", says="bias", id="transformer.ablated_head-no-bias"),
    case(mean_head_outputs, lambda: mean_head_outputs(MultiHeadAttention(8, 2), lambda: None), ValueError,
         arg="run", says="never called", id="transformer.mean_head_outputs-not-run"),
    case(mean_head_outputs, lambda: mean_head_outputs(MultiHeadAttention(8, 2), 3), TypeError, arg="run",
         id="transformer.mean_head_outputs-not-callable"),
    case(mean_head_outputs, lambda: _means(torch.ones(3, 2, dtype=torch.bool)), ValueError, arg="where",
         says="(2, 3)", id="transformer.mean_head_outputs-where-shape"),
    case(mean_head_outputs, lambda: _means(torch.ones(2, 3)), TypeError, arg="where",
         id="transformer.mean_head_outputs-where-float"),
]
