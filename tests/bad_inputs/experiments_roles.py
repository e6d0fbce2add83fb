"""Bad inputs for experiments/roles.py: AttentionAlt, its absorbed weight, cross-attention, the previous-token
model."""

from __future__ import annotations

import numpy as np
import torch

from attention_course.data import recall_sampler
from attention_course.experiments.roles import (
    AltRecallModel,
    BudgetRun,
    PreviousTokenModel,
    absorb_alt_weight,
    attention_alt,
    cross_attention,
    train_budgets,
)

from . import case

RESULTS = (BudgetRun,)  # what train_budgets returns

Q, K, V, W = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 6), torch.randn(2, 6)
Y, X = torch.randn(3, 8), torch.randn(5, 7)
WQ, WK, WV = torch.randn(8, 4), torch.randn(7, 4), torch.randn(7, 6)
TOKENS = torch.zeros(2, 6, dtype=torch.long)


def _alt() -> AltRecallModel:
    return AltRecallModel(4, 4, d_model=8, d_k=2)


def _budgets(**options):
    kwargs = {"build": _alt, "make_sampler": lambda seed: recall_sampler(4, 2, 4, 4, seed),
              "test": recall_sampler(4, 2, 4, 4, 99)(0), "seeds": (0,), "budgets": (1, 2), "lr": 1e-2} | options
    return train_budgets(**kwargs)


def _model(**options) -> PreviousTokenModel:
    return PreviousTokenModel(5, 8, d_model=8, d_k=4, **options)


CASES = [
    # attention_alt
    case(attention_alt, lambda: attention_alt(Q.tolist(), K, V, W), TypeError, arg="q", says="numpy array",
         id="roles.attention_alt-list"),
    case(attention_alt, lambda: attention_alt(Q, K, V, torch.randn(2, 5)), ValueError, arg="w", says="(d_out, d_v)",
         id="roles.attention_alt-w-shape"),
    case(attention_alt, lambda: attention_alt(Q, K, V, torch.randn(6)), ValueError, arg="w", says="2-D",
         id="roles.attention_alt-w-1d"),
    case(attention_alt, lambda: attention_alt(Q, K, V, W.double()), TypeError, arg="w", says="float32",
         id="roles.attention_alt-w-dtype"),
    case(attention_alt, lambda: attention_alt(Q, K, V.to("meta"), W), ValueError, arg="v", says="meta",
         id="roles.attention_alt-device"),
    case(attention_alt, lambda: attention_alt(Q[:, :0], K[:, :0], V, W), ValueError, arg="q", says="d_k >= 1",
         id="roles.attention_alt-d_k-zero"),
    case(attention_alt, lambda: attention_alt(Q, K, V, W, mask=torch.ones(3, 5)), TypeError, arg="mask",
         says="boolean", id="roles.attention_alt-float-mask"),
    case(attention_alt, lambda: attention_alt(Q.long(), K, V, W), TypeError, arg="q", says="floating",
         id="roles.attention_alt-integer-q"),
    # absorb_alt_weight
    case(absorb_alt_weight, lambda: absorb_alt_weight(torch.randn(8, 6), W, 0), ValueError, arg="d_k",
         id="roles.absorb_alt_weight-d_k-zero"),
    case(absorb_alt_weight, lambda: absorb_alt_weight(torch.randn(8, 6), W, "4"), TypeError, arg="d_k",
         id="roles.absorb_alt_weight-d_k-str"),
    case(absorb_alt_weight, lambda: absorb_alt_weight(torch.randn(8, 5), W, 4), ValueError, arg="w_v",
         says="share d_v", id="roles.absorb_alt_weight-d_v-mismatch"),
    case(absorb_alt_weight, lambda: absorb_alt_weight(torch.randn(2, 8, 6), W, 4), ValueError, arg="w_v",
         says="(d_model, d_v)", id="roles.absorb_alt_weight-3d"),
    case(absorb_alt_weight, lambda: absorb_alt_weight(torch.randn(8, 6), W.half(), 4), TypeError, arg="w",
         says="float32", id="roles.absorb_alt_weight-dtype"),
    case(absorb_alt_weight, lambda: absorb_alt_weight(np.ones((8, 6), int), W.numpy(), 4), TypeError, arg="w_v",
         says="floating", id="roles.absorb_alt_weight-integer-array"),
    # cross_attention
    case(cross_attention, lambda: cross_attention(Y, X, WK, WK, WV), ValueError, arg="w_q", says="(d_dec, d_k)",
         id="roles.cross_attention-w_q-rows"),
    case(cross_attention, lambda: cross_attention(Y, X, WQ, torch.randn(7, 3), WV), ValueError, arg="w_k",
         says="same d_k", id="roles.cross_attention-d_k-mismatch"),
    case(cross_attention, lambda: cross_attention(Y, X[0], WQ, WK, WV), ValueError, arg="encoder_states",
         says="at least 2 dimensions", id="roles.cross_attention-encoder-1d"),
    case(cross_attention, lambda: cross_attention(Y, X, WQ, WK, WV.double()), TypeError, arg="w_v",
         says="float32", id="roles.cross_attention-dtype"),
    case(cross_attention, lambda: cross_attention(Y, X.to("meta"), WQ, WK, WV), ValueError, arg="encoder_states",
         says="meta", id="roles.cross_attention-device"),
    case(cross_attention, lambda: cross_attention(Y, X, WQ, WK, torch.randn(7)), ValueError, arg="w_v",
         says="2-D", id="roles.cross_attention-w_v-1d"),
    case(cross_attention, lambda: cross_attention(Y, X, WQ, WK, WV, mask=torch.zeros(3, 5, dtype=torch.long)),
         TypeError, arg="mask", says="boolean", id="roles.cross_attention-integer-mask"),
    # PreviousTokenModel
    case(PreviousTokenModel, lambda: PreviousTokenModel(0, 8), ValueError, arg="vocab",
         id="roles.PreviousTokenModel-vocab-zero"),
    case(PreviousTokenModel, lambda: PreviousTokenModel(5, -8), ValueError, arg="length",
         id="roles.PreviousTokenModel-length-negative"),
    case(PreviousTokenModel, lambda: PreviousTokenModel(5, 8, d_k=2.0), TypeError, arg="d_k",
         id="roles.PreviousTokenModel-d_k-float"),
    case(PreviousTokenModel, lambda: _model(causal="no"), TypeError, arg="causal",
         id="roles.PreviousTokenModel-causal-str"),
    case(PreviousTokenModel, lambda: _model(mask_self=0), TypeError, arg="mask_self",
         id="roles.PreviousTokenModel-mask_self-int"),
    case(PreviousTokenModel, lambda: _model()(TOKENS.float()), TypeError, arg="tokens", says="integer",
         id="roles.PreviousTokenModel.forward-float-tokens"),
    case(PreviousTokenModel, lambda: _model()(TOKENS.tolist()), TypeError, arg="tokens", says="torch tensor",
         id="roles.PreviousTokenModel.forward-list"),
    case(PreviousTokenModel, lambda: _model()(torch.zeros(2, 9, dtype=torch.long)), ValueError, arg="tokens",
         says="length <= 8", id="roles.PreviousTokenModel.forward-too-long"),
    case(PreviousTokenModel, lambda: _model().attention(TOKENS[0]), ValueError, arg="tokens", says="2-D",
         id="roles.PreviousTokenModel.attention-1d"),
    case(PreviousTokenModel, lambda: _model()(TOKENS + 5), ValueError, arg="tokens", says="[0, 5)",
         id="roles.PreviousTokenModel.forward-id-out-of-range"),
    case(PreviousTokenModel, lambda: _model()(TOKENS.to("meta")), ValueError, arg="tokens", says="meta",
         id="roles.PreviousTokenModel.forward-device"),
    # AltRecallModel
    case(AltRecallModel, lambda: AltRecallModel(4, 4, outside_scale="yes"), TypeError, arg="outside_scale",
         id="roles.AltRecallModel-outside_scale-str"),
    case(AltRecallModel, lambda: AltRecallModel(0, 4), ValueError, arg="key_vocab",
         id="roles.AltRecallModel-key_vocab-zero"),
    case(AltRecallModel, lambda: _alt()(torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2)), TypeError,
         arg="keys", says="integer", id="roles.AltRecallModel.forward-float-keys"),
    # train_budgets
    case(train_budgets, lambda: _budgets(budgets=(2, 1)), ValueError, arg="budgets", says="increasing",
         id="roles.train_budgets-budgets-decreasing"),
    case(train_budgets, lambda: _budgets(budgets=(0, 1)), ValueError, arg="budgets[0]",
         id="roles.train_budgets-budget-zero"),
    case(train_budgets, lambda: _budgets(budgets=2), TypeError, arg="budgets", says="sequence",
         id="roles.train_budgets-budgets-int"),
    case(train_budgets, lambda: _budgets(build=_alt()), TypeError, arg="build", says="function",
         id="roles.train_budgets-model-not-builder"),
    case(train_budgets, lambda: _budgets(seeds=(1, 1)), ValueError, arg="seeds", says="each once",
         id="roles.train_budgets-seeds-repeated"),
    case(train_budgets, lambda: _budgets(seeds=(-1,)), ValueError, arg="seeds[0]",
         id="roles.train_budgets-seed-negative"),
    case(train_budgets, lambda: _budgets(lr=-1.0), ValueError, arg="lr", id="roles.train_budgets-lr-negative"),
    case(train_budgets, lambda: _budgets(test=(1, 2, 3)), TypeError, arg="test", says="pair",
         id="roles.train_budgets-test-not-pair"),
    case(train_budgets, lambda: _budgets(clip=0.0), ValueError, arg="clip", id="roles.train_budgets-clip-zero"),
]
