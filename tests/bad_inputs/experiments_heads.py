"""Bad inputs for experiments/heads.py: the cost counters, the two score computations, the pattern fit, the
two-query task and its model, and the head sweep."""

from __future__ import annotations

import numpy as np
import torch

from attention_course.experiments.heads import (
    CheckpointRuns,
    HeadSweep,
    ModelConfig,
    PatternFit,
    ScoreHeads,
    ScoreHeadsRecall,
    TwoQueryRecall,
    bilinear_scores,
    checkpoint_runs,
    factorised_scores,
    fit_attention_patterns,
    head_sweep,
    qk_parameters,
    score_flops,
    smoothed_permutations,
    two_query_recall,
    two_query_sampler,
)

from . import case

RESULTS = (PatternFit, HeadSweep, CheckpointRuns)

X, WQ, WK, W = torch.randn(5, 6), torch.randn(2, 6, 3), torch.randn(2, 6, 3), torch.randn(2, 6, 6)
X64 = torch.randn(4, 4, dtype=torch.float64)
TARGETS = torch.full((1, 4, 4), 0.25, dtype=torch.float64)
IDS = two_query_recall(3, 4, 8, 5, torch.Generator().manual_seed(0))[0]  # keys, values, query_a, query_b


def _model() -> TwoQueryRecall:
    return TwoQueryRecall(8, 2, 8, 5)


CASES = [
    # ModelConfig (a record users make: CONFIGURATIONS)
    case(ModelConfig, lambda: ModelConfig("x", 64, 3, 128, 2, "key"), ValueError, arg="num_heads", says="divide",
         id="heads.ModelConfig-heads-do-not-divide"),
    case(ModelConfig, lambda: ModelConfig("x", 64, 0, 128, 2, "key"), ValueError, arg="num_heads",
         id="heads.ModelConfig-num_heads-zero"),
    case(ModelConfig, lambda: ModelConfig("x", 64.0, 4, 128, 2, "key"), TypeError, arg="d_model",
         id="heads.ModelConfig-d_model-float"),
    case(ModelConfig, lambda: ModelConfig("x", 64, 4, -1, 2, "key"), ValueError, arg="n_ctx",
         id="heads.ModelConfig-n_ctx-negative"),
    case(ModelConfig, lambda: ModelConfig(None, 64, 4, 128, 2, "key"), TypeError, arg="name", says="str",
         id="heads.ModelConfig-name-none"),
    # the counters
    case(qk_parameters, lambda: qk_parameters(0, 4, 2), ValueError, arg="d_model", id="heads.qk_parameters-zero"),
    case(qk_parameters, lambda: qk_parameters(8, -4, 2), ValueError, arg="d_k", id="heads.qk_parameters-negative"),
    case(qk_parameters, lambda: qk_parameters(8, 4, 2, factorised="no"), TypeError, arg="factorised",
         id="heads.qk_parameters-factorised-str"),
    case(score_flops, lambda: score_flops(-1, 8, 4, 2), ValueError, arg="n", says="non-negative",
         id="heads.score_flops-n-negative"),
    case(score_flops, lambda: score_flops(4, 8, 4, 1.5), TypeError, arg="num_heads",
         id="heads.score_flops-num_heads-float"),
    case(score_flops, lambda: score_flops(4, 8, 4, True), TypeError, arg="num_heads",
         id="heads.score_flops-num_heads-bool"),
    # the two score computations
    case(factorised_scores, lambda: factorised_scores(X, WQ, WK[:, :5]), ValueError, arg="w_k",
         says="(h, d_model, d_k)", id="heads.factorised_scores-shape"),
    case(factorised_scores, lambda: factorised_scores(X[None], WQ, WK), ValueError, arg="x", says="2-D",
         id="heads.factorised_scores-3d-x"),
    case(factorised_scores, lambda: factorised_scores(X.numpy(), WQ, WK), TypeError, arg="x", says="torch tensor",
         id="heads.factorised_scores-numpy"),
    case(factorised_scores, lambda: factorised_scores(X, WQ, WK.double()), TypeError, arg="w_k", says="float32",
         id="heads.factorised_scores-dtype"),
    case(factorised_scores, lambda: factorised_scores(X, WQ.to("meta"), WK), ValueError, arg="w_q", says="meta",
         id="heads.factorised_scores-device"),
    case(bilinear_scores, lambda: bilinear_scores(X, W[:, :, :5]), ValueError, arg="w",
         says="(h, d_model, d_model)", id="heads.bilinear_scores-shape"),
    case(bilinear_scores, lambda: bilinear_scores(X.long(), W), TypeError, arg="x", says="floating",
         id="heads.bilinear_scores-integer"),
    case(bilinear_scores, lambda: bilinear_scores(X, W.to("meta")), ValueError, arg="w", says="meta",
         id="heads.bilinear_scores-device"),
    # the bottleneck
    case(smoothed_permutations, lambda: smoothed_permutations(2, 4, peak=0.2), ValueError, arg="peak",
         id="heads.smoothed_permutations-peak-too-small"),
    case(smoothed_permutations, lambda: smoothed_permutations(2, 4, peak=1.0), ValueError, arg="peak",
         id="heads.smoothed_permutations-peak-one"),
    case(smoothed_permutations, lambda: smoothed_permutations(2, 1), ValueError, arg="n",
         id="heads.smoothed_permutations-n-one"),
    case(smoothed_permutations, lambda: smoothed_permutations(-1, 4), ValueError, arg="m",
         id="heads.smoothed_permutations-m-negative"),
    case(smoothed_permutations, lambda: smoothed_permutations(2, 4, generator=0), TypeError, arg="generator",
         says="Generator", id="heads.smoothed_permutations-generator-int"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64, TARGETS[:, :3], [1]), ValueError,
         arg="targets", says="(m, n, n)", id="heads.fit_attention_patterns-shape"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64, TARGETS.float(), [1]), TypeError,
         arg="targets", says="float64", id="heads.fit_attention_patterns-dtype"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64, TARGETS, [0, 2]), ValueError, arg="d_k_values",
         id="heads.fit_attention_patterns-d_k-zero"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64, TARGETS, 3), TypeError, arg="d_k_values",
         says="sequence", id="heads.fit_attention_patterns-d_k_values-int"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64, TARGETS, [1], lr=-0.05), ValueError, arg="lr",
         id="heads.fit_attention_patterns-lr-negative"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64, TARGETS, [1], steps=0), ValueError,
         arg="steps", id="heads.fit_attention_patterns-steps-zero"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64, TARGETS, [1], seed=-1), ValueError,
         arg="seed", id="heads.fit_attention_patterns-seed-negative"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64.to("meta"), TARGETS.to("meta"), [1]),
         ValueError, arg="x", says="CPU", id="heads.fit_attention_patterns-device"),
    case(fit_attention_patterns, lambda: fit_attention_patterns(X64, TARGETS * 2, [1]), ValueError, arg="targets",
         says="summing to 1", id="heads.fit_attention_patterns-not-probabilities"),
    # the two-query task and its model
    case(two_query_recall, lambda: two_query_recall(2, 1, 9, 4), ValueError, arg="n_pairs",
         id="heads.two_query_recall-one-pair"),
    case(two_query_recall, lambda: two_query_recall(2, 5, 4, 4), ValueError, arg="key_vocab",
         id="heads.two_query_recall-too-few-keys"),
    case(two_query_recall, lambda: two_query_recall(-2, 5, 9, 4), ValueError, arg="batch",
         id="heads.two_query_recall-batch-negative"),
    case(two_query_recall, lambda: two_query_recall(2, 5, 9, 4, generator=np.random.default_rng(0)), TypeError,
         arg="generator", id="heads.two_query_recall-numpy-generator"),
    case(two_query_sampler, lambda: two_query_sampler(16, 8, 16, 8, seed=-1), ValueError, arg="seed",
         id="heads.two_query_sampler-seed-negative"),
    case(two_query_sampler, lambda: two_query_sampler(16, 8, 16, 1, seed=0), ValueError, arg="value_vocab",
         id="heads.two_query_sampler-value_vocab-one"),
    case(TwoQueryRecall, lambda: TwoQueryRecall(8, 3, 8, 5), ValueError, arg="num_heads", says="divide",
         id="heads.TwoQueryRecall-heads-do-not-divide"),
    case(TwoQueryRecall, lambda: TwoQueryRecall(0, 1, 8, 5), ValueError, arg="d_model",
         id="heads.TwoQueryRecall-d_model-zero"),
    case(TwoQueryRecall, lambda: _model()(IDS[0].float(), *IDS[1:]), TypeError, arg="keys", says="integer",
         id="heads.TwoQueryRecall.forward-float-ids"),
    case(TwoQueryRecall, lambda: _model()(*IDS[:3], IDS[3][:2]), ValueError, arg="query_b", says="(batch,)",
         id="heads.TwoQueryRecall.forward-shape"),
    case(TwoQueryRecall, lambda: _model()(IDS[0], IDS[1] + 5, *IDS[2:]), ValueError, arg="values", says="[0, 5)",
         id="heads.TwoQueryRecall.forward-value-id-out-of-range"),
    case(TwoQueryRecall, lambda: _model().attention_weights(*(t.to("meta") for t in IDS)), ValueError, arg="keys",
         says="meta", id="heads.TwoQueryRecall.attention_weights-device"),
    # the sweep (checked before the first run)
    case(head_sweep, lambda: head_sweep(d_model=8, heads=(3,)), ValueError, arg="heads", says="divide",
         id="heads.head_sweep-heads-do-not-divide"),
    case(head_sweep, lambda: head_sweep(heads=()), ValueError, arg="heads", id="heads.head_sweep-no-heads"),
    case(head_sweep, lambda: head_sweep(seeds=(0, 0)), ValueError, arg="seeds", says="distinct",
         id="heads.head_sweep-repeated-seed"),
    case(head_sweep, lambda: head_sweep(seeds=3), TypeError, arg="seeds", id="heads.head_sweep-seeds-int"),
    case(head_sweep, lambda: head_sweep(lr=-5e-3), ValueError, arg="lr", id="heads.head_sweep-lr-negative"),
    case(head_sweep, lambda: head_sweep(n_pairs=1), ValueError, arg="n_pairs", id="heads.head_sweep-n_pairs"),
    case(head_sweep, lambda: head_sweep(test_size=0), ValueError, arg="test_size", id="heads.head_sweep-test_size"),
    # one W per head, d_k apart from d_v
    case(ScoreHeads, lambda: ScoreHeads(8, 2, 0, 4), ValueError, arg="d_k", id="heads.ScoreHeads-d_k-zero"),
    case(ScoreHeads, lambda: ScoreHeads(8, 2, 4, 2.0), TypeError, arg="d_v", id="heads.ScoreHeads-d_v-float"),
    case(ScoreHeads, lambda: ScoreHeads(8, 2, None, 4)(torch.randn(2, 1, 8), torch.randn(2, 3, 6),
                                                       torch.randn(2, 3, 6)), ValueError, arg="query",
         says="(batch, n_q, 8)", id="heads.ScoreHeads.forward-width"),
    case(ScoreHeads, lambda: ScoreHeads(8, 2, 4, 4)(torch.randn(1, 8), torch.randn(3, 8), torch.randn(3, 8)),
         ValueError, arg="query", says="3-D", id="heads.ScoreHeads.forward-2d"),
    case(ScoreHeadsRecall, lambda: ScoreHeadsRecall(8, 2, -1, 4, 8, 5), ValueError, arg="d_k",
         id="heads.ScoreHeadsRecall-d_k-negative"),
    case(ScoreHeads, lambda: ScoreHeads(8, 2, 4, 4, score_scale=0.0), ValueError, arg="score_scale",
         id="heads.ScoreHeads-score_scale-zero"),
    case(ScoreHeads, lambda: ScoreHeads(8, 2, 4, 4, learned_temperature=1), TypeError,
         arg="learned_temperature", id="heads.ScoreHeads-learned_temperature-int"),
    case(ScoreHeadsRecall, lambda: ScoreHeadsRecall(8, 2, 2, 4, 8, 5, score_scale="big"), TypeError,
         arg="score_scale", id="heads.ScoreHeadsRecall-score_scale-string"),
    case(checkpoint_runs, lambda: checkpoint_runs(_model(), (0,), (2,)), TypeError, arg="build", says="function",
         id="heads.checkpoint_runs-model-not-builder"),
    case(checkpoint_runs, lambda: checkpoint_runs(_model, (0,), (2, 2)), ValueError, arg="checkpoints",
         says="distinct", id="heads.checkpoint_runs-repeated-checkpoint"),
    case(checkpoint_runs, lambda: checkpoint_runs(_model, (0,), (0,)), ValueError, arg="checkpoints",
         id="heads.checkpoint_runs-checkpoint-zero"),
    case(checkpoint_runs, lambda: checkpoint_runs(_model, (-1,), (2,)), ValueError, arg="seeds",
         id="heads.checkpoint_runs-seed-negative"),
    case(checkpoint_runs, lambda: checkpoint_runs(_model, (0,), (2,), window=0), ValueError, arg="window",
         id="heads.checkpoint_runs-window-zero"),
]
