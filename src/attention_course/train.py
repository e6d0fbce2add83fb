"""A small, deterministic training loop for the course's toy experiments (chapters 2–4; the Transformer of
chapter 5 adds its own schedule on top).

The loop is deliberately plain: Adam, cross-entropy with ``ignore_index=-100``, a fixed number of steps, a fresh
batch per step from a seeded sampler. It records the loss every step so notebooks can plot exact curves and
print only robust summaries (final accuracy rounded, mean ± std over seeds).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm  # the plain text bar: tqdm.auto warns (with a local path) when ipywidgets is absent

__all__ = ["History", "fit", "accuracy", "mean_std"]

Inputs = tuple[torch.Tensor, ...]
Sampler = Callable[[int], tuple[Inputs, torch.Tensor]]


@dataclass
class History:
    """What :func:`fit` recorded: the training loss at every step, and any extra per-step measurements."""

    loss: list[float] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)


def fit(
    model: nn.Module,
    sample: Sampler,
    steps: int,
    lr: float = 1e-3,
    *,
    weight_decay: float = 0.0,
    clip: float | None = 1.0,
    track: dict[str, Callable[[nn.Module], float]] | None = None,
    progress: bool = False,
) -> History:
    """Train ``model`` for ``steps`` steps of Adam(W) on batches from ``sample``.

    Args:
        model: maps ``*inputs`` to logits of shape ``(..., n_classes)``.
        sample: ``sample(step) -> (inputs, targets)``; ``targets`` has the logits' shape without the last axis,
            with ``-100`` where there is nothing to predict. Seed it for reproducibility.
        steps: number of optimisation steps.
        lr: learning rate.
        weight_decay: AdamW's decoupled weight decay.
        clip: gradient-norm clipping threshold (None to disable).
        track: optional ``name -> f(model)``, evaluated after every step and stored in ``History.extra``.
        progress: show a tqdm progress bar (off in notebooks checked by nbval: its timings vary).

    Returns:
        A :class:`History`.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    hist = History(extra={name: [] for name in (track or {})})
    model.train()
    for step in tqdm(range(steps), disable=not progress, desc="training"):
        inputs, targets = sample(step)
        logits = model(*inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        hist.loss.append(loss.item())
        with torch.no_grad():
            for name, f in (track or {}).items():
                hist.extra[name].append(float(f(model)))
    model.eval()
    return hist


@torch.no_grad()
def accuracy(model: nn.Module, inputs: Inputs, targets: torch.Tensor) -> float:
    """Fraction of positions whose arg-max logit equals the target (positions with target -100 ignored)."""
    model.eval()
    pred = model(*inputs).argmax(dim=-1)
    keep = targets != -100
    return float((pred[keep] == targets[keep]).float().mean())


def mean_std(values: Sequence[float], digits: int = 3) -> str:
    """``"mean ± std"`` over seeds (sample standard deviation), rounded for printing."""
    m = statistics.fmean(values)
    s = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{m:.{digits}f} ± {s:.{digits}f}"
