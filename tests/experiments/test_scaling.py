"""experiments/scaling.py (chapter 2): the moments of q·k, the softmax Jacobian against autograd, the saturation
measurement against a hand-written chain rule, and the recall head (scaled or not) against PyTorch's attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch
import torch.nn.functional as F
from sympy import stats

from attention_course import softmax
from attention_course.data import associative_recall, recall_sampler
from attention_course.experiments.recall import RecallModel
from attention_course.experiments.scaling import (
    PLACEMENTS,
    dot_product_moments,
    independence_ratio,
    initial_retrieval_head,
    logit_std,
    measure_saturation,
    placement_factors,
    random_attention_inputs,
    sample_dot_products,
    saturation_sweep,
    score_gradients,
    softmax_jacobian,
    softmax_jacobian_norm,
    train_retrieval,
)

# ---------------------------------------------------------------------------------------------------- moments

SQ, SK, MQ, MK = sp.symbols("sigma_q sigma_k mu_q mu_k", positive=True)
D = sp.Symbol("d_k", integer=True, positive=True)


def test_moments_of_normal_components():
    m = dot_product_moments(lambda n: stats.Normal(n, 0, SQ), lambda n: stats.Normal(n, 0, SK), D)
    assert m.component_mean == 0 and m.cross_covariance == 0
    assert sp.simplify(m.component_variance - SQ**2 * SK**2) == 0
    assert m.mean == 0
    assert sp.simplify(m.variance - D * SQ**2 * SK**2) == 0


def test_moments_agree_with_sympy_stats_on_the_whole_sum():
    # An independent check of the "sum over d_k" step: sympy.stats on the whole sum for d_k = 2.
    q = [stats.Normal(f"q{i}", 0, SQ) for i in range(2)]
    k = [stats.Normal(f"k{i}", 0, SK) for i in range(2)]
    dot = sum(a * b for a, b in zip(q, k, strict=True))
    m = dot_product_moments(lambda n: stats.Normal(n, 0, SQ), lambda n: stats.Normal(n, 0, SK), 2)
    assert sp.simplify(m.mean - stats.E(dot)) == 0
    assert sp.simplify(m.variance - stats.variance(dot)) == 0


def test_moments_with_non_zero_means():
    m = dot_product_moments(lambda n: stats.Normal(n, MQ, SQ), lambda n: stats.Normal(n, MK, SK), D)
    assert m.cross_covariance == 0
    assert sp.simplify(m.mean - D * MQ * MK) == 0  # the mean grows like d_k
    assert sp.simplify(m.variance - D * (SQ**2 * SK**2 + MQ**2 * SK**2 + MK**2 * SQ**2)) == 0


def test_moments_do_not_need_normality():
    a, b = sp.symbols("a b", positive=True)  # Uniform(-a, a) has variance a²/3; Laplace(0, b) has 2 b²
    m = dot_product_moments(lambda n: stats.Uniform(n, -a, a), lambda n: stats.Laplace(n, 0, b), D)
    assert m.mean == 0
    assert sp.simplify(m.variance - D * (a**2 / 3) * (2 * b**2)) == 0


def test_moments_reject_bad_factories():
    with pytest.raises(TypeError, match="random symbol"):
        dot_product_moments(lambda n: sp.Symbol(n), lambda n: stats.Normal(n, 0, 1), D)
    same = stats.Normal("x", 0, 1)
    with pytest.raises(ValueError, match="new random symbol"):
        dot_product_moments(lambda n: same, lambda n: stats.Normal(n, 0, 1), D)


def test_sample_dot_products_variance_and_determinism():
    g = torch.Generator().manual_seed(0)
    x = sample_dot_products(64, 20_000, sigma_q=1.5, sigma_k=0.5, generator=g, chunk=3000)
    assert x.shape == (20_000,) and x.dtype == torch.float64
    # Var = 64 · 2.25 · 0.25 = 36; the sample variance's relative standard error is about √(2/20000) = 1 %.
    assert abs(float(x.var()) / 36.0 - 1) < 0.05
    assert abs(float(x.mean())) < 4 * 6 / math.sqrt(20_000)
    g = torch.Generator().manual_seed(0)
    y = sample_dot_products(64, 20_000, sigma_q=1.5, sigma_k=0.5, generator=g, chunk=3000)
    assert torch.equal(x, y)
    with pytest.raises(ValueError, match="d_k must be a non-negative integer"):
        sample_dot_products(-1, 10)
    with pytest.raises(ValueError, match="sigma_q"):
        sample_dot_products(4, 10, sigma_q=-1.0)
    # at the edges: no draws is an empty tensor (torch.randn(0)); d_k = 0 is an empty sum, exactly 0
    assert torch.equal(sample_dot_products(4, 0), torch.empty(0, dtype=torch.float64))
    assert torch.equal(sample_dot_products(0, 5), torch.zeros(5, dtype=torch.float64))


# --------------------------------------------------------------------------------------------------- Jacobian


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_softmax_jacobian_matches_autograd(n):
    g = torch.Generator().manual_seed(n)
    logits = 3 * torch.randn(4, 3, n, generator=g, dtype=torch.float64)
    ours = softmax_jacobian(torch.softmax(logits, dim=-1))
    for idx in np.ndindex(4, 3):
        ref = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), logits[idx])
        torch.testing.assert_close(ours[idx], ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(ours, ours.transpose(-2, -1))  # symmetric
    torch.testing.assert_close(ours.sum(-1), torch.zeros_like(logits), atol=1e-12, rtol=0)


def test_softmax_jacobian_numpy_and_errors():
    p = np.array([0.2, 0.3, 0.5])
    j = softmax_jacobian(p)
    assert isinstance(j, np.ndarray) and j.shape == (3, 3)
    np.testing.assert_allclose(j, np.diag(p) - np.outer(p, p))
    assert np.all(softmax_jacobian(np.array([0.0, 1.0, 0.0])) == 0)  # one-hot: no gradient at all
    with pytest.raises(ValueError, match="scalar"):
        softmax_jacobian(np.array(0.5))
    with pytest.raises(ValueError, match="scalar"):
        softmax_jacobian_norm(torch.tensor(0.5))
    with pytest.raises(TypeError, match="floating"):
        softmax_jacobian(np.array([0, 1]))
    with pytest.raises(TypeError):
        softmax_jacobian([0.5, 0.5])


def test_softmax_jacobian_norm():
    assert math.isclose(float(softmax_jacobian_norm(torch.zeros(2, dtype=torch.float64))), 0.5)
    # uniform weights over n keys: J = (I - 11ᵀ/n)/n, of norm 1/n
    assert math.isclose(float(softmax_jacobian_norm(torch.zeros(16, dtype=torch.float64))), 1 / 16)
    g = torch.Generator().manual_seed(0)
    z = torch.randn(200, 16, generator=g, dtype=torch.float64)
    norms = torch.stack([softmax_jacobian_norm(c * z).median() for c in (2.0, 8.0, 32.0)])
    assert torch.all(softmax_jacobian_norm(3 * z) <= 0.5 + 1e-12)
    assert torch.all(norms[1:] < norms[:-1])  # collapses as the scores spread out
    assert norms[-1] < 1e-3 * norms[0]
    ref = torch.linalg.matrix_norm(torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), z[0]), ord=2)
    torch.testing.assert_close(softmax_jacobian_norm(z[0]), ref)


def test_softmax_jacobian_and_its_norm_at_the_edges():
    # n = 0: J is 0 × 0 (as torch.func.jacrev of torch.softmax) and its spectral norm 0 (torch.linalg.matrix_norm)
    empty = torch.zeros(3, 0, dtype=torch.float64)
    ref = torch.func.vmap(torch.func.jacrev(lambda s: torch.softmax(s, -1)))(empty)
    assert softmax_jacobian(empty).shape == ref.shape == (3, 0, 0)
    torch.testing.assert_close(softmax_jacobian_norm(empty), torch.linalg.matrix_norm(ref, ord=2))
    # float16/bfloat16 (eigvalsh has no half kernel): computed in float32, returned in the input's dtype
    z = torch.randn(5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16):
        norm = softmax_jacobian_norm(z.to(dtype))
        assert norm.dtype == dtype
        torch.testing.assert_close(norm.double(), softmax_jacobian_norm(z), atol=1e-2, rtol=1e-2)
        jac = softmax_jacobian(torch.softmax(z, -1).to(dtype))
        torch.testing.assert_close(jac.double(), softmax_jacobian(torch.softmax(z, -1)), atol=1e-2, rtol=1e-2)
    assert softmax_jacobian_norm(np.zeros((2, 4), np.float32)).dtype == np.float32


def test_moments_accept_numpy_integers_and_refuse_non_integers():
    m = dot_product_moments(lambda n: stats.Normal(n, 0, SQ), lambda n: stats.Normal(n, 0, SK), np.int64(3))
    assert sp.simplify(m.variance - 3 * SQ**2 * SK**2) == 0
    with pytest.raises(TypeError, match="d_k must be an integer"):
        dot_product_moments(lambda n: stats.Normal(n, 0, 1), lambda n: stats.Normal(n, 0, 1), 2.5)
    with pytest.raises(ValueError, match="d_k must be a positive integer or an integer SymPy symbol"):
        dot_product_moments(lambda n: stats.Normal(n, 0, 1), lambda n: stats.Normal(n, 0, 1), sp.Integer(0))


# ------------------------------------------------------------------------------------------------- saturation


def test_placement_factors():
    assert placement_factors("inside", 16) == (0.25, 1.0)
    assert placement_factors("none", 16) == (1.0, 1.0)
    assert placement_factors("outside", 16) == (1.0, 0.25)
    assert placement_factors("both", 16) == (0.25, 0.25)
    assert placement_factors("outside", 4)._asdict() == {"inside": 1.0, "outside": 0.5}
    with pytest.raises(ValueError, match="placement"):
        placement_factors("after", 16)
    with pytest.raises(ValueError, match="d_k"):
        placement_factors("inside", 0)


def _qkvu(d_k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, 5, d_k), (2, 7, d_k), (2, 7, 3), (2, 5, 3)]
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_measure_saturation_matches_the_chain_rule(placement):
    q, k, v, up = _qkvu(16)
    got = measure_saturation(q, k, v, up, placement)
    inside, outside = placement_factors(placement, 16)
    s = (q @ k.transpose(-2, -1)) * inside
    p = torch.softmax(s, dim=-1)
    dl_dp = outside * up @ v.transpose(-2, -1)  # ∂L/∂p for L = Σ outside · (p v) ⊙ up
    dl_ds = (softmax_jacobian(p) @ dl_dp[..., None])[..., 0]
    dl_dq = inside * dl_ds @ k
    assert math.isclose(got.grad_scores_mean, float(dl_ds.norm(dim=-1).mean()), rel_tol=1e-10)
    assert math.isclose(got.grad_scores_median, float(dl_ds.norm(dim=-1).median()), rel_tol=1e-10)
    assert math.isclose(got.grad_q_mean, float(dl_dq.norm(dim=-1).mean()), rel_tol=1e-10)
    assert math.isclose(got.grad_q_median, float(dl_dq.norm(dim=-1).median()), rel_tol=1e-10)
    ent = -(p * p.log()).sum(-1).mean()
    assert math.isclose(got.entropy, float(ent), rel_tol=1e-10)
    assert math.isclose(got.max_weight, float(p.amax(-1).mean()), rel_tol=1e-12)
    assert math.isclose(got.score_std, float(s.std()), rel_tol=1e-12)


def test_score_gradients_match_the_chain_rule_per_row():
    q, k, v, up = _qkvu(16, seed=2)
    r = score_gradients(q, k, v, up, "both")
    s = (q @ k.transpose(-2, -1)) * 0.25
    p = torch.softmax(s, dim=-1)
    dl_ds = (softmax_jacobian(p) @ (0.25 * up @ v.transpose(-2, -1))[..., None])[..., 0]
    torch.testing.assert_close(r.scores, s)
    torch.testing.assert_close(r.weights, p)
    torch.testing.assert_close(r.grad_scores, dl_ds)
    torch.testing.assert_close(r.grad_q, 0.25 * dl_ds @ k)
    assert not any(t.requires_grad for t in r)
    stats_ = measure_saturation(q, k, v, up, "both")
    assert stats_.grad_scores_median == float(r.grad_scores.norm(dim=-1).median())


def test_random_attention_inputs_are_the_sweeps_draws():
    q, k, v, up = random_attention_inputs(8, n_q=5, n_k=7, d_v=3, batch=2, seed=4)
    assert [t.shape for t in (q, k, v, up)] == [(2, 5, 8), (2, 7, 8), (2, 7, 3), (2, 5, 3)]
    assert all(t.dtype == torch.float64 for t in (q, k, v, up))
    assert random_attention_inputs(8, n_q=5, n_k=7, d_v=3, batch=2, seed=4).upstream.shape == (2, 5, 3)
    r = saturation_sweep([8], placements=("none",), n_k=7, n_q=5, d_v=3, batch=2, seed=4)
    assert r["none"] == tuple([x] for x in measure_saturation(q, k, v, up, "none"))
    assert r["none"].entropy == [measure_saturation(q, k, v, up, "none").entropy]
    again = random_attention_inputs(8, n_q=5, n_k=7, d_v=3, batch=2, seed=4)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, up), again, strict=True))
    with pytest.raises(ValueError, match="d_k must be a non-negative integer"):
        random_attention_inputs(-1)
    # a size of 0 gives empty tensors, as torch.randn does
    assert [tuple(t.shape) for t in random_attention_inputs(4, n_q=0, batch=3)] == [
        (3, 0, 4), (3, 64, 4), (3, 64, 16), (3, 0, 16)]


def test_outside_factor_only_rescales_the_gradient():
    q, k, v, up = _qkvu(64, seed=3)
    none, out = measure_saturation(q, k, v, up, "none"), measure_saturation(q, k, v, up, "outside")
    inside, both = measure_saturation(q, k, v, up, "inside"), measure_saturation(q, k, v, up, "both")
    assert (none.entropy, none.max_weight) == (out.entropy, out.max_weight)  # same weights
    assert (inside.entropy, inside.max_weight) == (both.entropy, both.max_weight)
    assert math.isclose(out.grad_scores_mean, none.grad_scores_mean / 8, rel_tol=1e-12)
    assert math.isclose(both.grad_scores_median, inside.grad_scores_median / 8, rel_tol=1e-12)
    assert inside.entropy > none.entropy


def test_measure_saturation_errors():
    q, k, v, up = _qkvu(8)
    with pytest.raises(ValueError, match="upstream"):
        measure_saturation(q, k, v, up[..., :2], "inside")
    with pytest.raises(ValueError, match="d_k"):
        measure_saturation(q, k[..., :4], v, up, "inside")
    with pytest.raises(TypeError, match="torch tensor"):
        measure_saturation(q.numpy(), k, v, up, "inside")
    with pytest.raises(ValueError, match="placement"):
        measure_saturation(q, k, v, up, "sideways")
    with pytest.raises(TypeError, match=r"upstream must have the dtype of q \(torch.float64\)"):
        measure_saturation(q, k, v, up.float(), "inside")  # was promoted silently
    with pytest.raises(ValueError, match="one device"):
        measure_saturation(q, k, v, up.to("meta"), "inside")


def test_score_gradients_and_saturation_at_the_edges():
    q, k, v, up = _qkvu(8)
    r = score_gradients(q[:, :0], k, v, up[:, :0])  # no queries: empty results of the right shapes
    assert r.scores.shape == r.grad_scores.shape == (2, 0, 7) and r.grad_q.shape == (2, 0, 8)
    r = score_gradients(q[:0], k[:0], v[:0], up[:0])  # an empty batch
    assert r.scores.shape == r.grad_scores.shape == (0, 5, 7) and r.grad_q.shape == (0, 5, 8)
    # ... but there is nothing to summarise: no median over no rows
    with pytest.raises(ValueError, match="at least one score"):
        measure_saturation(q[:, :0], k, v, up[:, :0])
    with pytest.raises(ValueError, match="d_k >= 1"):
        score_gradients(q[..., :0], k[..., :0], v, up, "none")  # the scale 1/√0
    # float16: the same gradients as float64, to float16's precision
    r16 = score_gradients(*(t.half() for t in (q, k, v, up)))
    r64 = score_gradients(q, k, v, up)
    assert r16.grad_q.dtype == torch.float16
    torch.testing.assert_close(r16.grad_q.double(), r64.grad_q, atol=1e-2, rtol=1e-2)
    # a single score has no spread: NaN, torch.std's answer (with its warning)
    with pytest.warns(UserWarning):
        assert math.isnan(measure_saturation(q[:1, :1], k[:1, :1], v[:1, :1], up[:1, :1]).score_std)


def test_saturation_sweep_checks_everything_first():
    with pytest.raises(TypeError, match="placements must be a non-empty sequence"):
        saturation_sweep([4], placements="inside")  # a string is not a list of names
    with pytest.raises(ValueError, match=r"placements\[1\] must be one of"):
        saturation_sweep([4], placements=("inside", "after"))
    with pytest.raises(ValueError, match=r"d_ks\[1\] must be a positive integer"):
        saturation_sweep([4, 0])
    assert saturation_sweep(np.array([2]), placements=["none"], n_k=3, n_q=2, batch=1)["none"].entropy[0] > 0


def test_saturation_sweep_scaled_flat_unscaled_collapses():
    r = saturation_sweep([4, 1024], placements=("inside", "none"), n_k=32, n_q=32, batch=8, seed=1)
    assert set(r) == {"inside", "none"}
    inside, none = r["inside"], r["none"]
    assert all(abs(s - 1) < 0.1 for s in inside.score_std)  # unit-variance scores at every d_k
    assert 0.8 < inside.grad_scores_median[1] / inside.grad_scores_median[0] < 1.25
    assert none.grad_scores_median[1] < 1e-2 * none.grad_scores_median[0]
    assert none.entropy[1] < 0.2 * math.log(32) < inside.entropy[1]
    assert none.max_weight[1] > 0.8
    with pytest.raises(ValueError, match="d_ks must hold at least one integer"):
        saturation_sweep([])
    with pytest.raises(ValueError, match="placement"):
        saturation_sweep([4], placements=("sideways",))


# ---------------------------------------------------------------------------------------- the recall model


def _batch(batch=16, n_pairs=6, key_vocab=20, value_vocab=10, seed=0):
    b = associative_recall(batch, n_pairs, key_vocab, value_vocab, torch.Generator().manual_seed(seed))
    return b.inputs, b.target


@pytest.mark.parametrize("scaled", [True, False])
def test_recall_head_matches_torch_sdpa(scaled):
    torch.manual_seed(0)
    m = RecallModel(20, 10, d_model=8, d_k=16, scaled=scaled, init="unit")
    (keys, values, query), _ = _batch()
    logits = m(keys, values, query)
    assert logits.shape == (16, 10)
    x_q, seq = m.states(keys, values, query)
    w = m.head
    ref = F.scaled_dot_product_attention(x_q @ w.w_q, seq @ w.w_k, seq @ w.w_v, scale=m.scale)
    torch.testing.assert_close(logits, m.unembed(ref[:, 0]))
    s = m.scores(keys, values, query)
    assert s.shape == (16, 7)
    torch.testing.assert_close(torch.softmax(s, -1), softmax(s))
    torch.testing.assert_close(m.attention(keys, values, query), softmax(s))


def test_scale_is_a_reparametrisation_of_w_q():
    torch.manual_seed(0)
    scaled = RecallModel(20, 10, d_model=8, d_k=64, scaled=True)
    plain = RecallModel(20, 10, d_model=8, d_k=64, scaled=False)
    assert (scaled.scale, plain.scale) == (1 / 8, 1.0)
    plain.load_state_dict(scaled.state_dict())
    with torch.no_grad():
        plain.head.w_q.div_(8.0)
    inputs, _ = _batch()
    torch.testing.assert_close(plain(*inputs), scaled(*inputs))
    torch.testing.assert_close(plain.scores(*inputs), scaled.scores(*inputs))


def test_unit_init_gives_unit_scores():
    inputs, _ = _batch(batch=512, n_pairs=8, key_vocab=32, value_vocab=32)
    for scaled, expected in ((True, 1.0), (False, 16.0)):
        torch.manual_seed(1)
        m = RecallModel(32, 32, d_model=64, d_k=256, scaled=scaled, init="unit")
        assert abs(logit_std(m, inputs) / expected - 1) < 0.35
        assert abs(independence_ratio(m, inputs) - 1) < 0.2
    torch.manual_seed(1)  # PyTorch's N(0, 1) embeddings: states of variance 2, so scores about twice as spread
    m = RecallModel(32, 32, d_model=64, d_k=256, init="torch")
    assert abs(logit_std(m, inputs) / 2.0 - 1) < 0.35


def test_initial_retrieval_head_is_shared_by_both_variants():
    scaled = initial_retrieval_head(True, 3, d_k=16, d_model=8, key_vocab=10, value_vocab=6)
    plain = initial_retrieval_head(False, 3, d_k=16, d_model=8, key_vocab=10, value_vocab=6)
    assert scaled.scale == 0.25 and plain.scale == 1.0
    a, b = scaled.state_dict(), plain.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    other = initial_retrieval_head(True, 4, d_k=16, d_model=8, key_vocab=10, value_vocab=6)
    assert not torch.equal(other.head.w_q, scaled.head.w_q)
    # train_retrieval starts from it: with a learning rate of 0 the weights stay the initial ones
    kw = dict(d_k=16, d_model=8, n_pairs=3, key_vocab=10, value_vocab=6, batch=4, n_probe=4)
    (run,) = train_retrieval(False, seeds=[3], steps=1, lr=0.0, **kw)
    assert run.seed == 3 and all(torch.equal(run.model.state_dict()[n], b[n]) for n in b)


def test_initial_retrieval_head_leaves_the_global_generator_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    initial_retrieval_head(True, 0, d_k=16, d_model=8, key_vocab=10, value_vocab=6)
    assert torch.equal(torch.rand(3), expected)


def test_train_retrieval_learns_and_is_deterministic():
    kw = dict(d_k=16, d_model=16, n_pairs=4, key_vocab=8, value_vocab=8, batch=32, lr=1e-2, n_probe=64)
    r1, r2 = train_retrieval(True, seeds=[0, 1], steps=100, **kw)
    (again,) = train_retrieval(True, seeds=[0], steps=100, **kw)
    assert r1.history.loss == again.history.loss and r1.accuracy == again.accuracy
    assert r1.history.loss != r2.history.loss
    assert set(r1.history.extra) == {"logit_std", "independence_ratio", "score_step"}
    assert len(r1.history.extra["logit_std"]) == 100
    for r in (r1, r2):
        assert r.history.loss[-1] < 0.5 * r.history.loss[0]
        assert r.accuracy > 0.5  # chance is 1/8
    with pytest.raises(ValueError):
        train_retrieval(True, seeds=[0], steps=0, **kw)


def test_probes_at_the_edges_and_a_bad_test_set_fails_before_training():
    torch.manual_seed(0)
    model = RecallModel(10, 6, d_model=8, d_k=4)
    inputs, _ = _batch(8, 4, 10, 6)
    assert logit_std(model, inputs) > 0 and independence_ratio(model, inputs) > 0
    empty = tuple(t[:0] for t in inputs)
    with pytest.warns(UserWarning):  # torch.std over nothing: NaN, with PyTorch's warning
        assert math.isnan(logit_std(model, empty))
    assert math.isnan(independence_ratio(model, empty))
    bad = ((inputs[0] + 10, *inputs[1:]), torch.zeros(8, dtype=torch.long))  # key ids beyond key_vocab = 10
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    with pytest.raises(ValueError, match=r"keys must hold token ids in \[0, 10\)"):
        train_retrieval(True, [0], 10_000, d_k=4, d_model=8, n_pairs=4, key_vocab=10, value_vocab=6, test=bad)
    assert torch.equal(torch.rand(3), expected)  # the check left the caller's random state alone


def test_control_head_computes_the_scaled_function_at_step_0():
    from attention_course.data import associative_recall
    from attention_course.experiments.scaling import initial_retrieval_head

    b = associative_recall(16, 8, 32, 32, torch.Generator().manual_seed(1))
    scaled = initial_retrieval_head(True, 3, d_k=64)
    control = initial_retrieval_head(False, 3, d_k=64, w_q_gain=1 / 8)
    torch.testing.assert_close(control(*b.inputs), scaled(*b.inputs), rtol=1e-5, atol=1e-6)


def test_head_gradients_chain_rule_and_control_factor():
    from attention_course.data import associative_recall
    from attention_course.experiments.scaling import head_gradients, initial_retrieval_head

    b = associative_recall(32, 8, 32, 32, torch.Generator().manual_seed(2))
    g_s = head_gradients(initial_retrieval_head(True, 0, d_k=64), b.inputs, b.target)
    g_c = head_gradients(initial_retrieval_head(False, 0, d_k=64, w_q_gain=1 / 8), b.inputs, b.target)
    # same function, so the same ∂L/∂s; W^Q divided by 8 gets a gradient 8 times larger
    torch.testing.assert_close(g_c.scores, g_s.scores, rtol=1e-4, atol=1e-8)
    torch.testing.assert_close(g_c.w_q, 8 * g_s.w_q, rtol=1e-4, atol=0.0)
    assert g_s.scores.shape == (32,) and g_s.q.shape == (32,)
    # the model's own gradients are untouched
    model = initial_retrieval_head(True, 0, d_k=64)
    head_gradients(model, b.inputs, b.target)
    assert model.head.w_q.grad is None


def test_train_retrieval_sgd_and_steps_to():
    from attention_course.experiments.scaling import steps_to, train_retrieval

    small = dict(d_k=4, d_model=8, n_pairs=3, key_vocab=6, value_vocab=4, batch=4)
    runs = train_retrieval(True, [0], 5, optimizer="sgd", lr=0.1, clip=None, track=False, **small)
    assert len(runs[0].history.loss) == 5 and runs[0].history.extra == {}
    again = train_retrieval(True, [0], 5, optimizer="sgd", lr=0.1, clip=None, track=True, **small)
    assert again[0].history.loss == runs[0].history.loss  # tracking does not change the run
    assert steps_to([3.0, 2.0, 1.0, 0.4, 0.2], 1.0, window=2) == 4
    assert steps_to([3.0, float("nan"), 0.1, 0.1], 1.0, window=2) == 4
    assert steps_to([3.0, 2.0], 1.0, window=1) is None


def test_head_gradients_match_autograd_through_the_model():
    from attention_course.data import associative_recall
    from attention_course.experiments.scaling import head_gradients, initial_retrieval_head

    b = associative_recall(16, 8, 32, 32, torch.Generator().manual_seed(7))
    for scaled in (True, False):
        model = initial_retrieval_head(scaled, 1, d_k=32)
        g = head_gradients(model, b.inputs, b.target)
        F.cross_entropy(model(*b.inputs), b.target).backward()
        torch.testing.assert_close(g.w_q, model.head.w_q.grad.norm(), rtol=1e-5, atol=0.0)
        torch.testing.assert_close(g.w_k, model.head.w_k.grad.norm(), rtol=1e-5, atol=0.0)


def test_train_retrieval_qk_lr_scale_slows_only_w_q_and_w_k():
    # with qk_lr_scale the AdamW steps of W^Q and W^K shrink by that factor, the other parameters' do not
    kw = dict(d_k=16, d_model=8, n_pairs=2, key_vocab=4, value_vocab=4, batch=8, clip=None, track=False)
    start = initial_retrieval_head(False, 0, d_k=16, d_model=8, key_vocab=4, value_vocab=4)
    (fast,) = train_retrieval(False, seeds=[0], steps=1, **kw)
    (slow,) = train_retrieval(False, seeds=[0], steps=1, qk_lr_scale=0.25, **kw)
    for name in ("w_q", "w_k"):
        d_fast = getattr(fast.model.head, name) - getattr(start.head, name)
        d_slow = getattr(slow.model.head, name) - getattr(start.head, name)
        torch.testing.assert_close(d_slow, 0.25 * d_fast, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(slow.model.head.w_v, fast.model.head.w_v)


def test_control_is_the_scaled_head_with_w_q_learning_rate_times_root_d_k_under_adam():
    # chapter 2's lab, §2.G: Adam cancels the √d_k of the control's W^Q gradient, so the control trains exactly as
    # the scaled head with W^Q's learning rate multiplied by √d_k (up to Adam's ε, made negligible here)
    d = 64
    control = initial_retrieval_head(False, 0, d_k=d, w_q_gain=1 / 8)
    fast = initial_retrieval_head(True, 0, d_k=d)

    def adam(model, w_q_lr):
        rest = [p for p in model.parameters() if p is not model.head.w_q]
        groups = [{"params": [model.head.w_q], "lr": w_q_lr}, {"params": rest}]
        return torch.optim.Adam(groups, lr=1e-3, eps=1e-12)

    pairs = ((control, adam(control, 1e-3)), (fast, adam(fast, 8e-3)))
    sample = recall_sampler(32, 8, 32, 32, 0)
    for step in range(20):
        inputs, targets = sample(step)
        for model, opt in pairs:
            opt.zero_grad()
            F.cross_entropy(model(*inputs), targets).backward()
            opt.step()
    torch.testing.assert_close(control(*inputs), fast(*inputs), rtol=1e-3, atol=1e-3)
    moved = (fast.head.w_q - initial_retrieval_head(True, 0, d_k=d).head.w_q).abs().max()
    assert moved > 1e-2  # the heads did train


def test_score_step_is_how_far_each_step_moves_the_scores():
    """history.extra["score_step"][t] is the mean |Δs| between the runs after t and after t + 1 steps: the
    first from the initial head, the second from the 1-step run; tracking changes nothing in the run; a slowed
    learning rate of W^Q and W^K shrinks the first step."""
    from attention_course.data import associative_recall
    from attention_course.experiments.scaling import initial_retrieval_head, train_retrieval

    sizes = dict(d_k=16, d_model=8, n_pairs=3, key_vocab=6, value_vocab=4, batch=8)
    b = associative_recall(32, 3, 6, 4, torch.Generator().manual_seed(7))
    test, probe = (b.inputs, b.target), b.inputs
    run = train_retrieval(False, [3], 2, test=test, n_probe=32, **sizes)[0]
    moved = run.history.extra["score_step"]
    start = initial_retrieval_head(False, 3, d_k=16, d_model=8, key_vocab=6, value_vocab=4).scores(*probe)
    one, two = (train_retrieval(False, [3], t, test=test, track=False, **sizes)[0].model for t in (1, 2))
    with torch.no_grad():
        want = [(one.scores(*probe) - start).abs().mean().item(),
                (two.scores(*probe) - one.scores(*probe)).abs().mean().item()]
        assert torch.equal(two.scores(*probe), run.model.scores(*probe))  # tracking changed nothing
    assert moved == pytest.approx(want, rel=1e-6) and min(moved) > 0
    slowed = train_retrieval(False, [3], 1, test=test, n_probe=32, qk_lr_scale=0.01, **sizes)[0]
    assert slowed.history.extra["score_step"][0] < moved[0]
    # every step is measured from the step before, per seed: two seeds in one call give each its own
    both = train_retrieval(False, [3, 4], 2, test=test, n_probe=32, **sizes)
    assert both[0].history.extra["score_step"] == pytest.approx(moved, rel=1e-6)


def test_arm_settings_make_the_four_heads():
    """The 2 × 2 of chapter 2: the control starts as the scaled head's function, the slowed head is the
    unscaled one with W^Q, W^K's learning rate divided by √d_k (AdamW) or d_k (SGD)."""
    from attention_course.experiments.scaling import ARMS, arm_settings, initial_retrieval_head

    assert ARMS == ("scaled", "control", "slowed", "unscaled")
    assert arm_settings("scaled", 64) == {"scaled": True, "w_q_gain": 1.0, "qk_lr_scale": 1.0, "d_k": 64,
                                          "optimizer": "adamw"}
    assert arm_settings("slowed", 64)["qk_lr_scale"] == 0.125
    assert arm_settings("slowed", 64, "sgd")["qk_lr_scale"] == 1 / 64
    assert arm_settings("unscaled", 64, "sgd")["scaled"] is False
    ctl, ref = arm_settings("control", 64), arm_settings("scaled", 64)
    keys, values, query = torch.randint(0, 32, (4, 8)), torch.randint(0, 32, (4, 8)), torch.randint(0, 32, (4,))
    heads = [initial_retrieval_head(a["scaled"], 0, d_k=64, w_q_gain=a["w_q_gain"]) for a in (ctl, ref)]
    with torch.no_grad():
        torch.testing.assert_close(heads[0].scores(keys, values, query), heads[1].scores(keys, values, query))


def test_pairing_ratios_separate_the_target_from_the_subspace():
    """At initialisation every pairing is independent (ratios near 1); a head built so that the query is its
    target key (W^Q = W^K, no value or marker in the states) has the target's ratio far above the others'; the
    other-example entry is the pooled ratio of the batch with its keys rolled by one example."""
    from attention_course.experiments.scaling import initial_retrieval_head, pairing_ratios, recall_test_set

    (keys, values, query), _ = recall_test_set()
    probe = (keys[:256], values[:256], query[:256])
    start = pairing_ratios(initial_retrieval_head(True, 0, d_k=256), probe)
    assert all(abs(r - 1) < 0.2 for r in start), start
    model = initial_retrieval_head(True, 0, d_k=256)
    with torch.no_grad():
        model.value_embed.weight.zero_()
        model.query_marker.zero_()
        model.head.w_q.copy_(model.head.w_k)
    built = pairing_ratios(model, probe)
    assert built.target > 3 * max(built.others, built.other_example), built
    q, k = model.queries_keys(*probe)
    with torch.no_grad():
        rolled = (q @ k.roll(1, 0).transpose(-2, -1))[:, 0, :-1]
        norm = 16 * q.pow(2).mean().sqrt() * k.pow(2).mean().sqrt()
    unrelated = keys[:256].roll(1, 0) != query[:256, None]  # the query's own id left out
    assert 0 < (~unrelated).sum() < unrelated.sum()  # some matches exist, and are dropped
    want = float(rolled[unrelated].pow(2).mean().sqrt() / norm)
    assert built.other_example == pytest.approx(want, rel=1e-6)
    assert built.other_example < float(rolled.pow(2).mean().sqrt() / norm)  # matches had inflated it


def test_sweep_arms_trains_every_arm_as_train_retrieval_does():
    """One entry per seed for every optimiser, width and arm, each the summary of train_retrieval's run."""
    from attention_course.data import associative_recall
    from attention_course.experiments.scaling import ARMS, arm_settings, sweep_arms, train_retrieval

    b = associative_recall(16, 8, 32, 32, torch.Generator().manual_seed(3))
    test = (b.inputs, b.target)
    results = sweep_arms(lambda run: {"seed": run.seed, "loss": run.history.loss},
                         {"sgd": ("sgd", 0.1, None)}, (4,), (0, 1), 2, test=test)
    assert list(results) == ["sgd"] and list(results["sgd"]) == ["4"] and list(results["sgd"]["4"]) == list(ARMS)
    want = train_retrieval(seeds=(0, 1), steps=2, test=test, lr=0.1, clip=None, track=False,
                           **arm_settings("slowed", 4, "sgd"))
    assert results["sgd"]["4"]["slowed"] == [{"seed": r.seed, "loss": r.history.loss} for r in want]


def test_score_factors_split_a_score_into_length_and_angle():
    """length · cos is each score; the scale multiplies the length only; by hand on the probe."""
    from attention_course.experiments.scaling import initial_retrieval_head, recall_test_set, score_factors

    (keys, values, query), _ = recall_test_set()
    probe = (keys[:64], values[:64], query[:64])
    scaled, unscaled = initial_retrieval_head(True, 0, d_k=64), initial_retrieval_head(False, 0, d_k=64)
    f_s, f_u = score_factors(scaled, probe), score_factors(unscaled, probe)
    assert f_u.length == pytest.approx(8 * f_s.length, rel=1e-6)  # the same weights, scale 1/8 against 1
    assert f_u.cos == pytest.approx(f_s.cos, rel=1e-6) and 0 < f_s.cos < 1
    q, k = scaled.queries_keys(*probe)
    with torch.no_grad():
        lengths = q.norm(dim=-1) * k.norm(dim=-1) / 8
        cos = (q @ k.transpose(-2, -1))[:, 0] / (q.norm(dim=-1) * k.norm(dim=-1))
    assert f_s.length == pytest.approx(lengths.mean().item(), rel=1e-6)
    assert f_s.cos == pytest.approx(cos.abs().mean().item(), rel=1e-6)
