"""Sampling the next token (chapter 7): each filter keeps what it promises, the temperature's limits are greedy and
uniform (chapter 1's limits of a softmax), and a seed fixes the draw."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_course.sampling import (
    greedy,
    next_token_probs,
    sample_next,
    scale_by_temperature,
    top_k_filter,
    top_p_filter,
)

logit_rows = st.lists(st.floats(-20, 20, allow_nan=False, width=32), min_size=1, max_size=40)


def test_greedy_is_the_argmax_first_on_ties():
    z = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, -1.0, 0.0, 5.0]])
    assert greedy(z).tolist() == [1, 0]
    assert greedy(torch.zeros(2, 3, 7)).shape == (2, 3)


@given(logit_rows, st.integers(1, 45))
def test_top_k_keeps_exactly_k(row, k):
    z = torch.tensor(row)
    kept = torch.isfinite(top_k_filter(z, k))
    assert int(kept.sum()) == min(k, len(row))
    # the kept logits are the largest: every kept one is >= every dropped one
    if kept.any() and (~kept).any():
        assert z[kept].min() >= z[~kept].max()
    assert torch.equal(top_k_filter(z, k)[kept], z[kept])  # kept logits are unchanged


def test_top_k_keeps_exactly_k_with_ties():
    z = torch.zeros(3, 10)  # every logit tied: a filter by threshold would keep all ten
    assert (torch.isfinite(top_k_filter(z, 4)).sum(dim=-1) == 4).all()


@given(logit_rows, st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_set_with_mass_at_least_p(row, p):
    z = torch.tensor(row, dtype=torch.float64)
    probs = torch.softmax(z, dim=-1)
    kept = torch.isfinite(top_p_filter(z, p))
    mass = float(probs[kept].sum())
    assert mass >= p - 1e-12, (mass, p)
    # smallest: dropping the least probable kept token falls below p (unless it is the only one)
    if int(kept.sum()) > 1:
        assert mass - float(probs[kept].min()) < p + 1e-12
    # the kept tokens are the most probable ones
    if (~kept).any():
        assert probs[kept].min() >= probs[~kept].max()


def test_top_p_by_hand():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    z = probs.log()
    assert torch.isfinite(top_p_filter(z, 0.5)).tolist() == [True, False, False, False]
    assert torch.isfinite(top_p_filter(z, 0.55)).tolist() == [True, True, False, False]
    assert torch.isfinite(top_p_filter(z, 0.79)).tolist() == [True, True, False, False]
    assert torch.isfinite(top_p_filter(z, 0.81)).tolist() == [True, True, True, False]
    assert torch.isfinite(top_p_filter(z, 0.96)).tolist() == [True, True, True, True]
    assert torch.isfinite(top_p_filter(z, 1.0)).all()


def test_temperature_to_zero_is_greedy_and_to_infinity_uniform():
    """Chapter 1: softmax(z/τ) → one-hot on the arg-max as τ → 0 and → uniform as τ → ∞; τ = 0 is greedy exactly."""
    z = torch.tensor([[0.3, 2.0, -1.0, 1.2, 0.0]], dtype=torch.float64)
    one_hot = torch.nn.functional.one_hot(greedy(z), 5).double()
    gaps = [float((next_token_probs(z, temperature=t) - one_hot).abs().max()) for t in (1.0, 0.1, 0.01)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-30
    torch.testing.assert_close(next_token_probs(z, temperature=0.0), one_hot, rtol=0, atol=0)
    uniform = torch.full_like(z, 1 / 5)
    spread = [float((next_token_probs(z, temperature=t) - uniform).abs().max()) for t in (1.0, 1e2, 1e6)]
    assert spread[0] > spread[1] > spread[2] and spread[2] < 1e-6
    # with a filter, the high-temperature limit is uniform over the tokens kept
    hot = next_token_probs(z, temperature=1e8, top_k=2)
    torch.testing.assert_close(hot, torch.tensor([[0, 0.5, 0, 0.5, 0]], dtype=torch.float64), rtol=0, atol=1e-7)


def test_temperature_divides_the_logits():
    z = torch.randn(3, 6)
    torch.testing.assert_close(scale_by_temperature(z, 2.0), z / 2)
    torch.testing.assert_close(next_token_probs(z, temperature=0.5), torch.softmax(2 * z, dim=-1))


def test_next_token_probs_are_distributions():
    z = torch.randn(4, 3, 11)
    for options in ({}, {"top_k": 3}, {"top_p": 0.7}, {"top_k": 5, "top_p": 0.5, "temperature": 0.7}):
        p = next_token_probs(z, **options)
        torch.testing.assert_close(p.sum(-1), torch.ones(4, 3))
        assert (p >= 0).all()


def test_sampling_is_reproducible_with_a_seed_and_follows_the_distribution():
    z = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(20000, 1)
    a = sample_next(z, generator=torch.Generator().manual_seed(7))
    b = sample_next(z, generator=torch.Generator().manual_seed(7))
    c = sample_next(z, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    freq = torch.bincount(a, minlength=4).double() / a.numel()
    expected = torch.softmax(z[0].double(), dim=-1)
    # 20000 draws: the standard error of each frequency is below 0.004; 5 of them is a loose, robust bound
    assert float((freq - expected).abs().max()) < 5 * math.sqrt(0.25 / a.numel())
    topk = sample_next(z, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(topk.tolist()) == {0, 1}
    assert torch.equal(sample_next(z[:3], temperature=0.0), torch.zeros(3, dtype=torch.long))


def test_sampling_edges():
    assert sample_next(torch.zeros(0, 5)).shape == (0,)
    assert sample_next(torch.tensor([[1.0]])).tolist() == [0]  # a vocabulary of one
    half = torch.randn(2, 9).half()
    assert next_token_probs(half, top_p=0.9).dtype == torch.float32


@pytest.mark.parametrize("k", [1, 3])
def test_top_k_one_row_per_batch_entry(k):
    z = torch.randn(5, 7, 13)
    assert (torch.isfinite(top_k_filter(z, k)).sum(-1) == k).all()
