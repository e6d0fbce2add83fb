"""The training loop learns a task it should, deterministically, and its helpers compute what they say."""

import torch
from torch import nn

from attention_course.train import accuracy, fit, mean_std


def _linear_task(seed: int):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(4, 3, generator=g)

    def sample(step):
        x = torch.randn(64, 4, generator=g)
        return (x,), (x @ w).argmax(-1)

    return sample


def test_fit_learns_and_is_deterministic():
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        hist = fit(model, _linear_task(0), steps=150, lr=0.05, track={"w_norm": lambda m: m.weight.norm()})
        runs.append(hist)
    assert runs[0].loss == runs[1].loss  # same seeds, same curve
    assert runs[0].loss[-1] < 0.5 * runs[0].loss[0]
    assert len(runs[0].extra["w_norm"]) == 150


def test_accuracy_ignores_minus_100():
    class Fixed(nn.Module):
        def forward(self, x):
            return torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]])

    assert accuracy(Fixed(), (torch.zeros(1),), torch.tensor([[1, 0, -100]])) == 1.0
    assert accuracy(Fixed(), (torch.zeros(1),), torch.tensor([[0, 0, -100]])) == 0.5


def test_mean_std():
    assert mean_std([1.0, 2.0, 3.0], digits=2) == "2.00 ± 1.00"
    assert mean_std([0.5]) == "0.500 ± 0.000"
