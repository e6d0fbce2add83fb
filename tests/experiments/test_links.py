"""Chapter 1's experiment: training W^Q and W^K to point each token at a chosen one (experiments.links)."""

from __future__ import annotations

import pytest
import torch

from attention_course.experiments.links import train_links


def _tokens(n: int = 10, d: int = 16) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(1234), dtype=torch.float64)


def test_it_learns_a_target_and_rows_are_distributions():
    x, target = _tokens(), torch.tensor([3, 0, 1, 2, 5, 4, 9, 6, 7, 8])
    weights = train_links(x, target)
    assert weights.shape == (10, 10) and weights.dtype == torch.float64
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(10, dtype=torch.float64))
    assert torch.equal(weights.argmax(dim=1), target)
    assert not weights.requires_grad
    # the same run with int32 targets, and tokens that carry a gradient of their own: none reaches them
    x.requires_grad_()
    assert torch.equal(train_links(x, target.int()), weights) and x.grad is None


def test_the_loss_is_the_cross_entropy_of_the_weights_it_returns():
    """One step from seed 0 by hand: the log of the returned weights, against the target, is the loss the step
    lowered (cross_entropy of the scores is the negative log of those weights)."""
    x, target = _tokens(), torch.arange(10).roll(1)
    before, after = train_links(x, target, steps=0), train_links(x, target, steps=1)
    loss = lambda w: -torch.log(w[torch.arange(10), target]).mean()  # noqa: E731
    assert loss(after) < loss(before)


def test_no_steps_is_the_untrained_layer_and_a_seed_fixes_it():
    x, target = _tokens(), torch.arange(10).roll(1)
    untrained = train_links(x, target, steps=0)
    assert not torch.equal(untrained.argmax(dim=1), target)  # the target is learned, not there from the start
    assert torch.equal(train_links(x, target, seed=3), train_links(x, target, seed=3))
    assert not torch.equal(train_links(x, target, seed=3), train_links(x, target, seed=4))


@pytest.mark.parametrize("call, error, says", [
    (lambda x, t: train_links(x.numpy(), t), TypeError, "x must be a torch tensor"),
    (lambda x, t: train_links(x[0], t), ValueError, "x must be a 2-D tensor"),
    (lambda x, t: train_links(x, t.float()), TypeError, "target must be"),
    (lambda x, t: train_links(x, t[:5]), ValueError, "one index per token"),
    (lambda x, t: train_links(x, t + 1), ValueError, r"target must hold token indices in \[0, 10\)"),
    (lambda x, t: train_links(x, t, d_k=0), ValueError, "d_k"),
    (lambda x, t: train_links(x, t, steps=-1), ValueError, "steps"),
])
def test_bad_input_is_refused_by_name(call, error, says):
    with pytest.raises(error, match=says):
        call(_tokens(), torch.arange(10))
