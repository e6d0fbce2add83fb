"""Bad inputs for experiments/scaling.py (chapter 2) and the training runs it re-exports from
experiments/retrieval.py."""

from __future__ import annotations

import numpy as np
import sympy as sp
import torch
from sympy import stats

from attention_course.experiments.recall import RecallModel
from attention_course.experiments.scaling import (
    AttentionInputs,
    DotProductMoments,
    HeadGradients,
    PairingRatios,
    PlacementFactors,
    SaturationCurves,
    SaturationStats,
    ScoreGradients,
    arm_settings,
    dot_product_moments,
    head_gradients,
    independence_ratio,
    initial_retrieval_head,
    logit_std,
    measure_saturation,
    pairing_ratios,
    placement_factors,
    random_attention_inputs,
    recall_test_set,
    sample_dot_products,
    saturation_sweep,
    score_gradients,
    softmax_jacobian,
    softmax_jacobian_norm,
    steps_to,
    train_retrieval,
)

from . import case

RESULTS = (DotProductMoments, PlacementFactors, ScoreGradients, SaturationStats, SaturationCurves, AttentionInputs,
           HeadGradients, PairingRatios)


def _normal(name: str) -> sp.Expr:
    return stats.Normal(name, 0, 1)


Q, K, V, UP = random_attention_inputs(4, n_q=3, n_k=5, d_v=2, batch=2)
INPUTS = (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, dtype=torch.long))
SMALL = dict(d_k=4, d_model=8, n_pairs=3, key_vocab=6, value_vocab=4, batch=4)


def _model() -> RecallModel:
    return RecallModel(6, 4, d_model=8, d_k=4)


CASES = [
    # the variance argument
    case(dot_product_moments, lambda: dot_product_moments("normal", _normal, 4), TypeError, arg="make_q",
         says="function", id="scaling.dot_product_moments-make_q-str"),
    case(dot_product_moments, lambda: dot_product_moments(_normal, lambda n: sp.Symbol(n), 4), TypeError,
         arg="make_k", says="random symbol", id="scaling.dot_product_moments-not-random"),
    case(dot_product_moments, lambda: dot_product_moments(lambda n: stats.Normal("x", 0, 1), _normal, 4),
         ValueError, arg="make_q", says="new random symbol", id="scaling.dot_product_moments-same-symbol"),
    case(dot_product_moments, lambda: dot_product_moments(_normal, _normal, 0), ValueError, arg="d_k",
         id="scaling.dot_product_moments-d_k-zero"),
    case(dot_product_moments, lambda: dot_product_moments(_normal, _normal, 2.5), TypeError, arg="d_k",
         id="scaling.dot_product_moments-d_k-float"),
    case(dot_product_moments, lambda: dot_product_moments(_normal, _normal, sp.Rational(1, 2)), ValueError,
         arg="d_k", says="SymPy", id="scaling.dot_product_moments-d_k-fraction"),
    case(sample_dot_products, lambda: sample_dot_products(-1, 10), ValueError, arg="d_k",
         id="scaling.sample_dot_products-d_k-negative"),
    case(sample_dot_products, lambda: sample_dot_products(4, 10.0), TypeError, arg="n_samples",
         id="scaling.sample_dot_products-n_samples-float"),
    case(sample_dot_products, lambda: sample_dot_products(4, 10, sigma_k=-0.5), ValueError, arg="sigma_k",
         id="scaling.sample_dot_products-sigma-negative"),
    case(sample_dot_products, lambda: sample_dot_products(4, 10, sigma_q=float("nan")), ValueError, arg="sigma_q",
         id="scaling.sample_dot_products-sigma-nan"),
    case(sample_dot_products, lambda: sample_dot_products(4, 10, chunk=0), ValueError, arg="chunk",
         id="scaling.sample_dot_products-chunk-zero"),
    case(sample_dot_products, lambda: sample_dot_products(4, 10, generator=0), TypeError, arg="generator",
         id="scaling.sample_dot_products-generator-int"),
    # the softmax Jacobian
    case(softmax_jacobian, lambda: softmax_jacobian([0.5, 0.5]), TypeError, arg="p", says="numpy array",
         id="scaling.softmax_jacobian-list"),
    case(softmax_jacobian, lambda: softmax_jacobian(np.array([0, 1])), TypeError, arg="p", says="floating",
         id="scaling.softmax_jacobian-integer"),
    case(softmax_jacobian, lambda: softmax_jacobian(np.array(0.5)), ValueError, arg="p", says="scalar",
         id="scaling.softmax_jacobian-scalar"),
    case(softmax_jacobian_norm, lambda: softmax_jacobian_norm(torch.tensor(0.5)), ValueError, arg="scores",
         says="scalar", id="scaling.softmax_jacobian_norm-scalar"),
    case(softmax_jacobian_norm, lambda: softmax_jacobian_norm(torch.arange(4)), TypeError, arg="scores",
         says="floating", id="scaling.softmax_jacobian_norm-integer"),
    case(softmax_jacobian_norm, lambda: softmax_jacobian_norm((1.0, 2.0)), TypeError, arg="scores",
         id="scaling.softmax_jacobian_norm-tuple"),
    # placements and the gradient through the softmax
    case(placement_factors, lambda: placement_factors("after", 16), ValueError, arg="placement",
         says="'inside'", id="scaling.placement_factors-unknown"),
    case(placement_factors, lambda: placement_factors("inside", 0), ValueError, arg="d_k",
         id="scaling.placement_factors-d_k-zero"),
    case(placement_factors, lambda: placement_factors("inside", 16.0), TypeError, arg="d_k",
         id="scaling.placement_factors-d_k-float"),
    case(score_gradients, lambda: score_gradients(Q.numpy(), K, V, UP), TypeError, arg="q", says="torch tensor",
         id="scaling.score_gradients-numpy"),
    case(score_gradients, lambda: score_gradients(Q, K, V, UP[..., :1]), ValueError, arg="upstream",
         says="(..., n_q, d_v)", id="scaling.score_gradients-upstream-shape"),
    case(score_gradients, lambda: score_gradients(Q, K, V, UP.float()), TypeError, arg="upstream",
         says="float64", id="scaling.score_gradients-upstream-dtype"),
    case(score_gradients, lambda: score_gradients(Q, K.to("meta"), V, UP), ValueError, arg="k", says="meta",
         id="scaling.score_gradients-device"),
    case(score_gradients, lambda: score_gradients(Q, K[..., :3], V, UP), ValueError, arg="k", says="d_k",
         id="scaling.score_gradients-d_k-mismatch"),
    case(score_gradients, lambda: score_gradients(Q[..., :0], K[..., :0], V, UP), ValueError, arg="q",
         says="d_k >= 1", id="scaling.score_gradients-d_k-zero"),
    case(score_gradients, lambda: score_gradients(Q, K, V, UP, placement=None), ValueError, arg="placement",
         id="scaling.score_gradients-placement-none"),
    case(measure_saturation, lambda: measure_saturation(Q, K, V, UP, "sideways"), ValueError, arg="placement",
         id="scaling.measure_saturation-placement"),
    case(measure_saturation, lambda: measure_saturation(Q[:, :0], K, V, UP[:, :0]), ValueError, arg="q",
         says="at least one", id="scaling.measure_saturation-no-rows"),
    case(measure_saturation, lambda: measure_saturation(Q, K.long(), V, UP), TypeError, arg="k", says="floating",
         id="scaling.measure_saturation-integer-k"),
    # the sweep and its inputs
    case(random_attention_inputs, lambda: random_attention_inputs(-4), ValueError, arg="d_k",
         id="scaling.random_attention_inputs-d_k-negative"),
    case(random_attention_inputs, lambda: random_attention_inputs(4, batch=2.0), TypeError, arg="batch",
         id="scaling.random_attention_inputs-batch-float"),
    case(random_attention_inputs, lambda: random_attention_inputs(4, seed=-1), ValueError, arg="seed",
         id="scaling.random_attention_inputs-seed-negative"),
    case(saturation_sweep, lambda: saturation_sweep([]), ValueError, arg="d_ks", id="scaling.saturation_sweep-empty"),
    case(saturation_sweep, lambda: saturation_sweep(64), TypeError, arg="d_ks", says="sequence",
         id="scaling.saturation_sweep-d_ks-int"),
    case(saturation_sweep, lambda: saturation_sweep([4, 0]), ValueError, arg="d_ks",
         id="scaling.saturation_sweep-d_k-zero"),
    case(saturation_sweep, lambda: saturation_sweep([4], placements="inside"), TypeError, arg="placements",
         id="scaling.saturation_sweep-placements-str"),
    case(saturation_sweep, lambda: saturation_sweep([4], placements=("inside", "after")), ValueError,
         arg="placements", says="'none'", id="scaling.saturation_sweep-placement-unknown"),
    case(saturation_sweep, lambda: saturation_sweep([4], n_k=0), ValueError, arg="n_k",
         id="scaling.saturation_sweep-n_k-zero"),
    # the training runs (experiments/retrieval.py)
    case(initial_retrieval_head, lambda: initial_retrieval_head(1, 0), TypeError, arg="scaled",
         id="scaling.initial_retrieval_head-scaled-int"),
    case(initial_retrieval_head, lambda: initial_retrieval_head(True, -1), ValueError, arg="seed",
         id="scaling.initial_retrieval_head-seed-negative"),
    case(initial_retrieval_head, lambda: initial_retrieval_head(True, 0, d_k=0), ValueError, arg="d_k",
         id="scaling.initial_retrieval_head-d_k-zero"),
    case(logit_std, lambda: logit_std(torch.nn.Linear(2, 2), INPUTS), TypeError, arg="model", says="RecallModel",
         id="scaling.logit_std-model"),
    case(logit_std, lambda: logit_std(_model(), INPUTS[:2]), TypeError, arg="inputs", says="length 2",
         id="scaling.logit_std-two-inputs"),
    case(logit_std, lambda: logit_std(_model(), (INPUTS[0] + 6, *INPUTS[1:])), ValueError, arg="keys",
         says="[0, 6)", id="scaling.logit_std-key-id-out-of-range"),
    case(independence_ratio, lambda: independence_ratio(_model(), INPUTS[0]), TypeError, arg="inputs",
         id="scaling.independence_ratio-tensor"),
    case(independence_ratio, lambda: independence_ratio(_model(), (INPUTS[0].float(), *INPUTS[1:])), TypeError,
         arg="keys", says="integer", id="scaling.independence_ratio-float-ids"),
    case(train_retrieval, lambda: train_retrieval(True, [0, 0], 10, **SMALL), ValueError, arg="seeds",
         says="distinct", id="scaling.train_retrieval-repeated-seed"),
    case(train_retrieval, lambda: train_retrieval(True, 0, 10, **SMALL), TypeError, arg="seeds",
         id="scaling.train_retrieval-seeds-int"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 0, **SMALL), ValueError, arg="steps",
         id="scaling.train_retrieval-steps-zero"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 10, lr=-1e-3, **SMALL), ValueError, arg="lr",
         id="scaling.train_retrieval-lr-negative"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 10, **{**SMALL, "n_pairs": 8}), ValueError,
         arg="key_vocab", id="scaling.train_retrieval-more-pairs-than-keys"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 10, test=INPUTS, **SMALL), TypeError, arg="test",
         id="scaling.train_retrieval-test-not-a-pair"),
    case(train_retrieval, lambda: train_retrieval("yes", [0], 10, **SMALL), TypeError, arg="scaled",
         id="scaling.train_retrieval-scaled-str"),
    case(initial_retrieval_head, lambda: initial_retrieval_head(False, 0, w_q_gain=0.0), ValueError, arg="w_q_gain",
         id="scaling.initial_retrieval_head-w_q_gain-zero"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 10, optimizer="adam", **SMALL), ValueError,
         arg="optimizer", says="sgd", id="scaling.train_retrieval-optimizer-unknown"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 10, clip=-1.0, **SMALL), ValueError, arg="clip",
         id="scaling.train_retrieval-clip-negative"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 10, track=1, **SMALL), TypeError, arg="track",
         id="scaling.train_retrieval-track-int"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 10, w_q_gain=float("inf"), **SMALL), ValueError,
         arg="w_q_gain", id="scaling.train_retrieval-w_q_gain-inf"),
    case(train_retrieval, lambda: train_retrieval(True, [0], 10, qk_lr_scale=0.0, **SMALL), ValueError,
         arg="qk_lr_scale", id="scaling.train_retrieval-qk_lr_scale-zero"),
    # gradients at the parameters
    case(head_gradients, lambda: head_gradients(nn_linear(), INPUTS, torch.zeros(2, dtype=torch.long)), TypeError,
         arg="model", id="scaling.head_gradients-not-recall-model"),
    case(head_gradients, lambda: head_gradients(_model(), INPUTS, torch.zeros(2)), TypeError, arg="targets",
         id="scaling.head_gradients-targets-float"),
    case(head_gradients, lambda: head_gradients(_model(), INPUTS, torch.zeros(3, dtype=torch.long)), ValueError,
         arg="targets", says="shape", id="scaling.head_gradients-targets-length"),
    case(head_gradients, lambda: head_gradients(_model(), INPUTS[:2], torch.zeros(2, dtype=torch.long)),
         TypeError, arg="inputs", id="scaling.head_gradients-inputs-pair"),
    case(steps_to, lambda: steps_to("0.5 0.4", 0.5), TypeError, arg="loss", id="scaling.steps_to-str"),
    case(steps_to, lambda: steps_to([1.0, "x"], 0.5, window=1), TypeError, arg="loss[1]",
         id="scaling.steps_to-not-number"),
    case(steps_to, lambda: steps_to([1.0, 0.4], 0.5, window=3), ValueError, arg="window",
         id="scaling.steps_to-short"),
    case(steps_to, lambda: steps_to([1.0, 0.4], float("nan")), ValueError, arg="level",
         id="scaling.steps_to-level-nan"),
    case(pairing_ratios, lambda: pairing_ratios(_model(), tuple(x[:1] for x in INPUTS)), ValueError,
         arg="inputs", says="2 examples", id="scaling.pairing_ratios-one-example"),
    case(pairing_ratios, lambda: pairing_ratios(_model(), INPUTS), ValueError, arg="inputs",
         says="one of their own keys", id="scaling.pairing_ratios-query-not-one-key"),
    case(pairing_ratios, lambda: pairing_ratios(_model(), INPUTS[:2]), TypeError, arg="inputs",
         id="scaling.pairing_ratios-inputs-pair"),
    case(recall_test_set, lambda: recall_test_set(n_pairs=40), ValueError, arg="n_pairs",
         id="scaling.recall_test_set-more-pairs-than-keys"),
    case(recall_test_set, lambda: recall_test_set(n_pairs=2.5), TypeError, arg="n_pairs",
         id="scaling.recall_test_set-n_pairs-float"),
    case(arm_settings, lambda: arm_settings("fast", 16), ValueError, arg="arm", says="scaled",
         id="scaling.arm_settings-unknown-arm"),
    case(arm_settings, lambda: arm_settings("slowed", 0), ValueError, arg="d_k",
         id="scaling.arm_settings-d_k-zero"),
    case(arm_settings, lambda: arm_settings("slowed", 16, "adam"), ValueError, arg="optimizer",
         says="adamw", id="scaling.arm_settings-optimizer"),
]


def nn_linear() -> torch.nn.Module:
    return torch.nn.Linear(2, 2)
