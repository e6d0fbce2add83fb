"""Bad inputs for experiments/transformer.py: chapter 5's training plan and head ablation."""

from __future__ import annotations

import torch

from attention_course.device import DeviceInfo
from attention_course.experiments.transformer import (
    AblationStudy,
    AntiDiagonal,
    ReversalPlan,
    ablated_head,
    ablation_study,
    anti_diagonal_shares,
    held_out_loss,
    mean_head_outputs,
    reversal_plan,
    train_reversal,
)
from attention_course.multihead import MultiHeadAttention
from attention_course.seq2seq import Seq2SeqTransformer

from . import case

RESULTS = (ReversalPlan, AntiDiagonal, AblationStudy)


def _enter(attention, head, mean=None):
    with ablated_head(attention, head, mean):
        pass


def _means(where):
    mha = MultiHeadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 3, 8)
    return mean_head_outputs(mha, lambda: mha(x, x, x), where)


def _tiny():
    return Seq2SeqTransformer(13, d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                              dim_feedforward=8, dropout=0.0, max_len=32)


SRC, TGT = torch.tensor([[4, 5, 0]]), torch.tensor([[1, 5, 4, 2]])

CASES = [
    case(train_reversal, lambda: train_reversal(-1), ValueError, arg="seed", id="transformer.train_reversal-seed"),
    case(train_reversal, lambda: train_reversal(0, norm_first="yes"), TypeError, arg="norm_first",
         id="transformer.train_reversal-norm_first"),
    case(held_out_loss, lambda: held_out_loss(torch.nn.Linear(2, 2), SRC, TGT), TypeError, arg="model",
         id="transformer.held_out_loss-model"),
    case(held_out_loss, lambda: held_out_loss(_tiny(), SRC.float(), TGT), TypeError, arg="src",
         id="transformer.held_out_loss-float-src"),
    case(anti_diagonal_shares, lambda: anti_diagonal_shares(_tiny(), SRC, TGT[:, :1], torch.tensor([2])),
         ValueError, arg="src and tgt", id="transformer.anti_diagonal_shares-short-tgt"),
    case(anti_diagonal_shares, lambda: anti_diagonal_shares(_tiny(), SRC, TGT, torch.tensor([4])), ValueError,
         arg="lengths", id="transformer.anti_diagonal_shares-lengths"),
    case(ablation_study, lambda: ablation_study(_tiny(), SRC, TGT, torch.zeros(2, 2)), ValueError, arg="exact",
         says="(1, 2)", id="transformer.ablation_study-shape"),
    case(ablation_study, lambda: ablation_study(_tiny(), SRC, TGT, torch.zeros(1, 2), threshold=2), ValueError,
         arg="threshold", id="transformer.ablation_study-threshold"),
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
