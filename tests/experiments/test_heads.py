"""experiments/heads.py: the cost counters against PyTorch's FLOP counter, the pattern fit against the rank bound, the
two-query task against its definition, and the head sweep's bookkeeping."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attention_course.experiments import heads as hd
from attention_course.train import run_seeds

SMALL = hd.TwoQueryTask(batch=16, test_size=64)  # a task small enough for a unit test


@pytest.mark.parametrize("n,d_model,h", [(5, 8, 2), (7, 12, 3), (16, 16, 1)])
def test_counts_match_flop_counter_and_scores_agree(n, d_model, h):
    gen = torch.Generator().manual_seed(n)
    d_k = d_model // h
    x = torch.randn(n, d_model, generator=gen, dtype=torch.float64)
    w_q, w_k = (torch.randn(h, d_model, d_k, generator=gen, dtype=torch.float64) for _ in range(2))
    with FlopCounterMode(display=False) as fact:
        s_fact = hd.factorised_scores(x, w_q, w_k)
    w_full = w_q @ w_k.transpose(1, 2)  # formed outside the counter: only the scores are counted
    with FlopCounterMode(display=False) as full:
        s_full = hd.bilinear_scores(x, w_full)
    assert fact.get_total_flops() == hd.score_flops(n, d_model, d_k, h)
    assert full.get_total_flops() == hd.score_flops(n, d_model, d_k, h, factorised=False)
    torch.testing.assert_close(s_fact, s_full)
    for i in range(h):  # head i's scores are (X W_i^Q)(X W_i^K)ᵀ
        torch.testing.assert_close(s_fact[i], (x @ w_q[i]) @ (x @ w_k[i]).T)
    assert hd.qk_parameters(d_model, d_k, h) == 2 * d_model * d_model  # h · 2 · d_model · d_model/h
    assert hd.qk_parameters(d_model, d_k, h, factorised=False) == h * d_model**2


def test_counter_and_shape_errors():
    with pytest.raises(ValueError, match="positive integer"):
        hd.qk_parameters(0, 4, 2)
    with pytest.raises(TypeError, match="num_heads must be an integer"):
        hd.score_flops(4, 8, 4, 1.5)
    with pytest.raises(ValueError, match=r"w_q, w_k \(h, d_model, d_k\)"):
        hd.factorised_scores(torch.randn(3, 4), torch.randn(2, 5, 2), torch.randn(2, 5, 2))
    with pytest.raises(ValueError, match=r"w \(h, d_model, d_model\)"):
        hd.bilinear_scores(torch.randn(3, 4), torch.randn(2, 4, 3))


def test_scores_and_counts_at_the_edges_match_torch():
    x, w_q, w_k = torch.randn(5, 6), torch.randn(2, 6, 3), torch.randn(2, 6, 3)
    cases = [(x[:0], w_q, w_k), (x, w_q[:0], w_k[:0]), (x, w_q[..., :0], w_k[..., :0])]  # n = 0, h = 0, d_k = 0
    for xx, wq, wk in cases:
        ref = (xx @ wq) @ (xx @ wk).transpose(1, 2)  # per head, by broadcasting
        torch.testing.assert_close(hd.factorised_scores(xx, wq, wk), ref)
        w = wq @ wk.transpose(1, 2)
        torch.testing.assert_close(hd.bilinear_scores(xx, w), (xx @ w) @ xx.T)
    # no tokens cost nothing, as PyTorch's FLOP counter agrees
    with FlopCounterMode(display=False) as count:
        hd.factorised_scores(x[:0], w_q, w_k)
    assert hd.score_flops(0, 6, 3, 2) == count.get_total_flops() == 0
    with pytest.raises(TypeError, match="w_k must have the dtype of x"):
        hd.factorised_scores(x, w_q, w_k.double())  # torch's matmul: a raw RuntimeError
    with pytest.raises(ValueError, match="one device"):
        hd.bilinear_scores(x, torch.randn(2, 6, 6, device="meta"))


def test_model_config_checks_its_sizes_and_stays_a_named_tuple():
    c = hd.ModelConfig("tiny", 64, 4, 128, 2, "key")
    assert c.d_k == 16 and tuple(c) == ("tiny", 64, 4, 128, 2, "key") and c._fields[1] == "d_model"
    assert repr(c).startswith("ModelConfig(name='tiny'")
    with pytest.raises(ValueError, match="num_heads must divide d_model=64"):
        hd.ModelConfig("odd", 64, 3, 128, 2, "key")  # d_k would be 21.33, counted as 21
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        hd.ModelConfig("none", 64, 0, 128, 2, "key")  # d_k: ZeroDivisionError


def test_configurations_and_paper_table():
    assert [c.d_k for c in hd.CONFIGURATIONS] == [64, 64, 64, 64]
    assert [(c.d_model, c.num_heads) for c in hd.CONFIGURATIONS] == [(512, 8), (768, 12), (1024, 16), (768, 12)]
    assert all(h * d_k == 512 for h, d_k, _, _ in hd.PAPER_TABLE3_A)


def test_smoothed_permutations():
    p = hd.smoothed_permutations(5, 6, peak=0.8, generator=torch.Generator().manual_seed(0))
    assert p.shape == (5, 6, 6) and p.dtype == torch.float64
    torch.testing.assert_close(p.sum(-1), torch.ones(5, 6, dtype=torch.float64))
    peaks = p.argmax(-1)
    assert all(sorted(row.tolist()) == list(range(6)) for row in peaks)  # the peaks form a permutation
    assert torch.all(p.amax(-1) == 0.8) and torch.allclose(p.amin(-1), torch.full((5, 6), 0.04, dtype=torch.float64))
    with pytest.raises(ValueError, match="peak"):
        hd.smoothed_permutations(1, 4, peak=0.2)
    assert hd.smoothed_permutations(0, 4).shape == (0, 4, 4)  # no patterns: empty, as torch.rand(0, n)


def test_fit_attention_patterns_meets_the_rank_bound():
    n = 6
    gen = torch.Generator().manual_seed(1)
    x = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))[0] * math.sqrt(n)
    targets = hd.smoothed_permutations(2, n, generator=gen)
    fit = hd.fit_attention_patterns(x, targets, [1, 3, 4, 5, 6], steps=800, lr=0.05)
    assert fit.kl.shape == (5, 2) and fit.curve.shape == (5, 800) and fit.weights.shape == (5, 2, n, n)
    best = fit.kl.mean(1)
    assert (best[:3] > 1e-3).all()  # d_k <= n - 2: impossible
    assert (best[3:] < 1e-8).all()  # d_k >= n - 1: exact
    torch.testing.assert_close(fit.weights[3], targets, atol=1e-4, rtol=0)
    again = hd.fit_attention_patterns(x, targets, [1, 3, 4, 5, 6], steps=800, lr=0.05)
    assert torch.equal(again.kl, fit.kl)  # seeded: reproducible


def test_fit_attention_patterns_errors():
    x = torch.randn(4, 4, dtype=torch.float64)
    good = hd.smoothed_permutations(1, 4)
    with pytest.raises(ValueError, match=r"targets \(m, n, n\)"):
        hd.fit_attention_patterns(x, good[:, :3], [1])
    with pytest.raises(ValueError, match="strictly positive"):
        hd.fit_attention_patterns(x, torch.eye(4, dtype=torch.float64)[None], [1])
    with pytest.raises(ValueError, match=r"d_k_values\[0\] must be a positive integer"):
        hd.fit_attention_patterns(x, good, [0, 2])
    with pytest.raises(TypeError, match="targets must have the dtype of x"):
        hd.fit_attention_patterns(x, good.float(), [1])  # was silently converted
    with pytest.raises(ValueError, match="non-empty"):
        hd.fit_attention_patterns(x, good[:0], [1])  # no target: the mean KL would be 0/0


def test_two_query_recall_targets():
    (keys, values, qa, qb), target = hd.two_query_recall(200, 5, 9, 4, torch.Generator().manual_seed(2))
    assert keys.shape == values.shape == (200, 5) and qa.shape == qb.shape == target.shape == (200,)
    assert torch.all(qa != qb)
    for row in range(200):
        pos_a = (keys[row] == qa[row]).nonzero().item()
        pos_b = (keys[row] == qb[row]).nonzero().item()
        assert target[row] == values[row, pos_a] * 4 + values[row, pos_b]
    with pytest.raises(ValueError, match="n_pairs must be an integer ≥ 2"):
        hd.two_query_recall(2, 1, 9, 4)
    # an empty batch: empty tensors, as torch.randint gives
    (keys, values, qa, qb), target = hd.two_query_recall(0, 5, 9, 4)
    assert keys.shape == values.shape == (0, 5) and qa.shape == qb.shape == target.shape == (0,)


def test_model_shapes_and_same_attention_parameters_for_every_h():
    (keys, values, qa, qb), _ = hd.two_query_recall(3, 4, 8, 5)
    sizes = set()
    for h in (1, 2, 4, 8):
        model = hd.TwoQueryRecall(8, h, 8, 5)
        assert model(keys, values, qa, qb).shape == (3, 25)
        sizes.add(sum(p.numel() for p in model.attn.parameters()))
    assert len(sizes) == 1


def test_two_query_model_at_the_edges():
    (keys, values, qa, qb), _ = hd.two_query_recall(3, 4, 8, 5, torch.Generator().manual_seed(3))
    model = hd.TwoQueryRecall(8, 2, 8, 5)
    logits = model(keys, values, qa, qb)
    assert torch.equal(model(keys.int(), values.int(), qa.int(), qb.int()), logits)  # any integer dtype
    assert model(keys[:0], values[:0], qa[:0], qb[:0]).shape == (0, 25)  # an empty batch
    with pytest.raises(ValueError, match=r"query_b must hold token ids in \[0, 8\)"):
        model(keys, values, qa, qb + 8)  # nn.Embedding: a raw IndexError
    with pytest.raises(ValueError, match="num_heads must divide d_model=8"):
        hd.TwoQueryRecall(8, 3, 8, 5)


def test_attention_weights_are_the_forward_pass_weights():
    (keys, values, qa, qb), _ = hd.two_query_recall(5, 4, 8, 5, torch.Generator().manual_seed(3))
    torch.manual_seed(4)
    model = hd.TwoQueryRecall(8, 2, 8, 5)
    w = model.attention_weights(keys, values, qa, qb)
    assert w.shape == (5, 2, 4) and not w.requires_grad
    torch.testing.assert_close(w.sum(-1), torch.ones(5, 2))
    # Recompute the forward pass from these weights: the same logits.
    memory = model.key_embedding(keys) + model.value_embedding(values)
    question = (model.query_a_embedding(qa) + model.query_b_embedding(qb))[:, None]
    _, _, w_v = model.attn.in_proj_weight.split(8)
    _, _, b_v = model.attn.in_proj_bias.split(8)
    v = torch.nn.functional.linear(memory, w_v, b_v).unflatten(-1, (2, 4)).transpose(1, 2)  # (5, 2, 4, d_k)
    read = model.attn.out_proj((w[:, :, None] @ v).squeeze(2).flatten(1))
    torch.testing.assert_close(model.readout(question[:, 0] + read), model(keys, values, qa, qb))


def test_two_query_sampler_is_a_seeded_stream():
    a, b = hd.two_query_sampler(4, 5, 9, 4, seed=1), hd.two_query_sampler(4, 5, 9, 4, seed=1)
    g = torch.Generator().manual_seed(1)
    for step in range(2):
        (inputs, target), (again, target_b) = a(step), b(step)
        direct_inputs, direct_target = hd.two_query_recall(4, 5, 9, 4, g)
        for x, y, z in zip(inputs, again, direct_inputs, strict=True):
            assert torch.equal(x, y) and torch.equal(x, z)
        assert torch.equal(target, target_b) and torch.equal(target, direct_target)


def test_head_sweep_bookkeeping_and_threads():
    before = torch.get_num_threads()
    sweep = hd.head_sweep(d_model=8, heads=(1, 4), seeds=(0, 1), steps=20, task=SMALL)
    assert torch.get_num_threads() == before  # run_seeds restored the setting
    assert sweep.heads == [1, 4] and set(sweep.models) == {1, 4}
    assert all(len(sweep.accuracy[h]) == len(sweep.loss[h]) == 2 for h in (1, 4))
    assert all(0.0 <= a <= 1.0 for h in (1, 4) for a in sweep.accuracy[h])
    again = hd.head_sweep(d_model=8, heads=(1, 4), seeds=(0, 1), steps=20, task=SMALL)
    assert again.loss == sweep.loss  # seeded: reproducible
    # h = 4, seed 1, by hand: weights from seed 1, batches from seed 1001, the test set from seed 10_000
    test = hd.two_query_recall(64, 8, 16, 8, torch.Generator().manual_seed(10_000))
    (run,) = run_seeds(lambda: hd.TwoQueryRecall(8, 4, 16, 8), lambda s: hd.two_query_sampler(16, 8, 16, 8, 1001),
                       test, seeds=[1], steps=20, lr=5e-3)
    assert (sweep.accuracy[4][1], sweep.loss[4][1]) == (run.accuracy, run.test_loss)
    assert sweep.models[4].state_dict().keys() == run.model.state_dict().keys()
    with pytest.raises(ValueError, match="divide d_model"):
        hd.head_sweep(d_model=8, heads=(3,))


def test_score_heads_forms_and_shapes():
    torch.manual_seed(0)
    q, kv = torch.randn(3, 2, 8), torch.randn(3, 5, 8)
    for d_k in (None, 1, 4):
        layer = hd.ScoreHeads(8, 2, d_k, 3)
        out, w = layer(q, kv, kv, average_attn_weights=False)
        assert out.shape == (3, 2, 8) and w.shape == (3, 2, 2, 5)
        assert torch.allclose(w.sum(-1), torch.ones(3, 2, 2))
        assert layer(q, kv, kv, need_weights=False)[1] is None
    assert hd.ScoreHeads(8, 2, None, 3).score_parameters() == hd.qk_parameters(8, 4, 2, factorised=False)
    assert hd.ScoreHeads(8, 2, 4, 3).score_parameters() == hd.qk_parameters(8, 4, 2)
    # the factorised head is a one-W head with W_i = W_i^Q W_i^Kᵀ (and the scale of its own d_k)
    fact, full = hd.ScoreHeads(8, 2, 8, 3), hd.ScoreHeads(8, 2, None, 3)
    full.load_state_dict({**{k: v for k, v in fact.state_dict().items() if not k.startswith("w_q")
                             and not k.startswith("w_k")}, "w": fact.w_q @ fact.w_k.transpose(1, 2)})
    assert torch.allclose(fact(q, kv, kv)[0], full(q, kv, kv)[0], atol=1e-5)


def test_score_heads_scores_are_what_the_softmax_takes():
    torch.manual_seed(0)
    q, kv = torch.randn(3, 2, 8), torch.randn(3, 5, 8)
    for d_k in (None, 2):
        layer = hd.ScoreHeads(8, 2, d_k, 3, score_scale=2.0)
        s = layer.scores(q, kv)
        assert s.shape == (3, 2, 2, 5)
        torch.testing.assert_close(layer(q, kv, kv, average_attn_weights=False)[1], (2.0 * s).softmax(-1))
    layer = hd.ScoreHeads(8, 2, 2, 3)  # by hand, head 1
    by_hand = (q @ layer.w_q[1]) @ (kv @ layer.w_k[1]).transpose(-2, -1) / math.sqrt(2)
    torch.testing.assert_close(layer.scores(q, kv)[:, 1], by_hand)


def test_score_forms_start_with_the_same_score_variance():
    """E[s²] = |x|²|y|²/d_model² for both forms and every d_k (the docstring's claim), over fresh layers."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1, 1, 16, generator=g), torch.randn(1, 1, 16, generator=g)
    expected = (x.square().sum() * y.square().sum() / 16**2).item()
    for d_k in (None, 1, 4, 16):
        torch.manual_seed(1)
        s = torch.cat([hd.ScoreHeads(16, 64, d_k, 1).scores(x, y).flatten() for _ in range(60)])
        assert s.square().mean().item() == pytest.approx(expected, rel=0.12), d_k  # 3840 draws


def test_score_scale_multiplies_the_scores():
    torch.manual_seed(0)
    q, kv = torch.randn(3, 2, 8), torch.randn(3, 5, 8)
    plain, scaled = hd.ScoreHeads(8, 2, 2, 3), hd.ScoreHeads(8, 2, 2, 3, score_scale=4.0)
    scaled.load_state_dict(plain.state_dict())
    with torch.no_grad():  # W^Q x 4 gives the same scores as score_scale 4
        plain.w_q *= 4
    torch.testing.assert_close(scaled(q, kv, kv)[1], plain(q, kv, kv)[1], rtol=0, atol=1e-6)
    recall = hd.ScoreHeadsRecall(8, 4, 2, 2, 16, 8, score_scale=16)
    assert recall.attn.score_scale == 16.0


def test_learned_temperature_starts_at_one_and_learns():
    """θ = 0 at the start: the same weights, scores and outputs as the default head (the other weights are drawn
    identically); e^θ multiplies head i's scores; training moves θ."""
    q, kv = torch.randn(3, 2, 8), torch.randn(3, 5, 8)
    torch.manual_seed(1)
    plain = hd.ScoreHeads(8, 2, 2, 3)
    torch.manual_seed(1)
    learned = hd.ScoreHeads(8, 2, 2, 3, learned_temperature=True)
    assert learned.log_temperature.shape == (2, 1, 1) and plain.log_temperature is None
    for name, p in plain.named_parameters():
        torch.testing.assert_close(p, dict(learned.named_parameters())[name], rtol=0, atol=0)
    torch.testing.assert_close(learned(q, kv, kv)[0], plain(q, kv, kv)[0], rtol=0, atol=0)
    with torch.no_grad():
        learned.log_temperature[1] = math.log(3.0)
        plain.w_q[1] *= 3  # head 1's scores × 3, head 0's unchanged
    torch.testing.assert_close(learned(q, kv, kv)[1], plain(q, kv, kv)[1], rtol=0, atol=1e-6)
    recall = hd.ScoreHeadsRecall(8, 4, 2, 2, 16, 8, learned_temperature=True)
    runs = hd.checkpoint_runs(lambda: hd.ScoreHeadsRecall(8, 4, 2, 2, 16, 8, learned_temperature=True), (0,),
                              (5,), task=SMALL, window=5)
    assert recall.attn.log_temperature.abs().max() == 0
    assert runs.models[0].attn.log_temperature.abs().max() > 0  # trained


def test_checkpoint_runs_match_head_sweep():
    runs = hd.checkpoint_runs(lambda: hd.TwoQueryRecall(8, 2, 16, 8), (0, 1), (5, 10), task=SMALL,
                              window=4)
    short = hd.head_sweep(d_model=8, heads=(2,), seeds=(0, 1), steps=5, task=SMALL)
    full = hd.head_sweep(d_model=8, heads=(2,), seeds=(0, 1), steps=10, task=SMALL)
    assert [s[0] for s in runs.loss] == short.loss[2] and [s[1] for s in runs.loss] == full.loss[2]
    assert [s[1] for s in runs.accuracy] == full.accuracy[2]
    assert len(runs.curve[0]) == 3 and runs.checkpoints == [5, 10]
    assert torch.allclose(torch.tensor(runs.curve[1][2]), torch.tensor(full.runs[2][1].history.loss[8:]).mean())
    recall = hd.ScoreHeadsRecall(8, 2, None, 4, 16, 8)
    assert isinstance(recall.attn, hd.ScoreHeads) and recall.attn.w.shape == (2, 8, 8)



def test_score_heads_weights_follow_multihead_attention():
    """ScoreHeads takes nn.MultiheadAttention's weight arguments: averaged over the heads by default, per head
    with average_attn_weights=False — so TwoQueryRecall.attention_weights works on ScoreHeadsRecall."""
    torch.manual_seed(0)
    q, kv = torch.randn(3, 2, 8), torch.randn(3, 5, 8)
    layer = hd.ScoreHeads(8, 4, 2, 2)
    _, per_head = layer(q, kv, kv, average_attn_weights=False)
    _, averaged = layer(q, kv, kv)
    assert per_head.shape == (3, 4, 2, 5) and averaged.shape == (3, 2, 5)
    torch.testing.assert_close(averaged, per_head.mean(dim=1))
    model = hd.ScoreHeadsRecall(8, 4, 2, 2, 16, 8)
    (keys, values, qa, qb), _ = hd.two_query_recall(6, 8, 16, 8, torch.Generator().manual_seed(0))
    weights = model.attention_weights(keys, values, qa, qb)
    assert weights.shape == (6, 4, 8)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 4))


def test_two_query_task_seeds_its_batches_and_its_held_out_set():
    """Run seed s trains on two_query_sampler(seed=1000 + s); every run is scored on 2000 questions of seed 10 000."""
    import numpy as np

    task = hd.TwoQueryTask(batch=np.int64(16))
    assert type(task.batch) is int and task == hd.TwoQueryTask(batch=16)
    (got, target), (want, want_target) = task.sampler(3)(0), hd.two_query_sampler(16, 8, 16, 8, seed=1003)(0)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)) and torch.equal(target, want_target)
    inputs, targets = hd.TwoQueryTask().test_set()
    again = hd.two_query_recall(2000, 8, 16, 8, torch.Generator().manual_seed(10_000))
    assert torch.equal(targets, again[1]) and all(torch.equal(a, b) for a, b in zip(inputs, again[0], strict=True))
