"""experiments/scaling.py (chapter 2): the moments of q·k, the softmax Jacobian against autograd, the saturation
measurement against a hand-written chain rule, and the retrieval head against PyTorch's attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch
import torch.nn.functional as F
from sympy import stats

from attention_course import softmax
from attention_course.experiments.scaling import (
    PLACEMENTS,
    RetrievalHead,
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
    with pytest.raises(ValueError):
        sample_dot_products(0, 10)
    with pytest.raises(ValueError):
        sample_dot_products(4, 10, sigma_q=-1.0)


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


# ------------------------------------------------------------------------------------------------- saturation


def test_placement_factors():
    assert placement_factors("inside", 16) == (0.25, 1.0)
    assert placement_factors("none", 16) == (1.0, 1.0)
    assert placement_factors("outside", 16) == (1.0, 0.25)
    assert placement_factors("both", 16) == (0.25, 0.25)
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
    q, k, v, up = random_attention_inputs(8, n_queries=5, n_keys=7, d_v=3, batch=2, seed=4)
    assert [t.shape for t in (q, k, v, up)] == [(2, 5, 8), (2, 7, 8), (2, 7, 3), (2, 5, 3)]
    assert all(t.dtype == torch.float64 for t in (q, k, v, up))
    r = saturation_sweep([8], placements=("none",), n_keys=7, n_queries=5, d_v=3, batch=2, seed=4)
    assert r["none"]["entropy"] == [measure_saturation(q, k, v, up, "none").entropy]
    again = random_attention_inputs(8, n_queries=5, n_keys=7, d_v=3, batch=2, seed=4)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, up), again, strict=True))
    with pytest.raises(ValueError, match="sizes"):
        random_attention_inputs(0)


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


def test_saturation_sweep_scaled_flat_unscaled_collapses():
    r = saturation_sweep([4, 1024], placements=("inside", "none"), n_keys=32, n_queries=32, batch=8, seed=1)
    inside, none = r["inside"], r["none"]
    assert all(abs(s - 1) < 0.1 for s in inside["score_std"])  # unit-variance scores at every d_k
    assert 0.8 < inside["grad_scores_median"][1] / inside["grad_scores_median"][0] < 1.25
    assert none["grad_scores_median"][1] < 1e-2 * none["grad_scores_median"][0]
    assert none["entropy"][1] < 0.2 * math.log(32) < inside["entropy"][1]
    assert none["max_weight"][1] > 0.8


# ------------------------------------------------------------------------------------------- retrieval model


def _batch(batch=16, n_pairs=6, n_keys=20, n_values=10, seed=0):
    from attention_course.data import associative_recall

    b = associative_recall(batch, n_pairs, n_keys, n_values, torch.Generator().manual_seed(seed))
    return (b.keys, b.values, b.query), b.target


@pytest.mark.parametrize("scaled", [True, False])
def test_retrieval_head_matches_torch_sdpa(scaled):
    torch.manual_seed(0)
    m = RetrievalHead(20, 10, d_model=8, d_k=16, scaled=scaled)
    (keys, values, query), _ = _batch()
    logits = m(keys, values, query)
    assert logits.shape == (16, 10)
    x_q, seq = m._states(keys, values, query)
    ref = F.scaled_dot_product_attention(x_q @ m.w_q, seq @ m.w_k, seq @ m.w_v, scale=m.scale)
    torch.testing.assert_close(logits, m.unembed(ref[:, 0]))
    s = m.scores(keys, values, query)
    assert s.shape == (16, 7)
    torch.testing.assert_close(torch.softmax(s, -1), softmax(s))


def test_scale_is_a_reparametrisation_of_w_q():
    torch.manual_seed(0)
    scaled = RetrievalHead(20, 10, d_model=8, d_k=64, scaled=True)
    plain = RetrievalHead(20, 10, d_model=8, d_k=64, scaled=False)
    plain.load_state_dict(scaled.state_dict())
    with torch.no_grad():
        plain.w_q.div_(8.0)
    inputs, _ = _batch()
    torch.testing.assert_close(plain(*inputs), scaled(*inputs))
    torch.testing.assert_close(plain.scores(*inputs), scaled.scores(*inputs))


def test_retrieval_head_initial_logit_scale():
    inputs, _ = _batch(batch=512, n_pairs=8, n_keys=32, n_values=32)
    for scaled, expected in ((True, 1.0), (False, 16.0)):
        torch.manual_seed(1)
        m = RetrievalHead(32, 32, d_model=64, d_k=256, scaled=scaled)
        assert abs(logit_std(m, inputs) / expected - 1) < 0.35
        assert abs(independence_ratio(m, inputs) - 1) < 0.2


def test_initial_retrieval_head_is_shared_by_both_variants():
    scaled = initial_retrieval_head(True, 3, d_k=16, d_model=8, n_keys=10, n_values=6)
    plain = initial_retrieval_head(False, 3, d_k=16, d_model=8, n_keys=10, n_values=6)
    assert scaled.scale == 0.25 and plain.scale == 1.0
    a, b = scaled.state_dict(), plain.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    other = initial_retrieval_head(True, 4, d_k=16, d_model=8, n_keys=10, n_values=6)
    assert not torch.equal(other.w_q, scaled.w_q)
    # train_retrieval starts from it: with a learning rate of 0 the weights stay the initial ones
    kw = dict(d_k=16, d_model=8, n_pairs=3, n_keys=10, n_values=6, batch=4, n_probe=4)
    trained, _, _ = train_retrieval(False, seed=3, steps=1, lr=0.0, **kw)
    assert all(torch.equal(trained.state_dict()[n], b[n]) for n in b)


def test_retrieval_head_errors():
    m = RetrievalHead(20, 10, d_model=8, d_k=16)
    (keys, values, query), _ = _batch()
    with pytest.raises(ValueError, match="batch, n_pairs"):
        m(keys, values[:, :3], query)
    with pytest.raises(TypeError, match="integer ids"):
        m(keys.float(), values, query)
    with pytest.raises(ValueError, match="sizes"):
        RetrievalHead(0, 10)


@pytest.fixture
def one_thread():
    """Tiny matrices: one thread is faster than several, and much faster on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_train_retrieval_learns_and_is_deterministic(one_thread):
    kw = dict(d_k=16, d_model=16, n_pairs=4, n_keys=8, n_values=8, batch=32, lr=1e-2, n_probe=64)
    m1, h1, acc1 = train_retrieval(True, seed=0, steps=100, **kw)
    _, h2, acc2 = train_retrieval(True, seed=0, steps=100, **kw)
    assert h1.loss == h2.loss and acc1 == acc2
    assert set(h1.extra) == {"logit_std", "independence_ratio"} and len(h1.extra["logit_std"]) == 100
    assert h1.loss[-1] < 0.5 * h1.loss[0]
    assert acc1 > 0.5  # chance is 1/8
    with pytest.raises(ValueError):
        train_retrieval(True, seed=0, steps=0, **kw)
