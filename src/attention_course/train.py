"""A small, deterministic training loop for the course's toy experiments (chapters 2–4; the Transformer of
chapter 5 adds its own schedule on top), with the one training step every loop shares and the multi-seed
runner the experiments use.

The loop is deliberately plain: Adam, cross-entropy with ``ignore_index=-100``, a fixed number of steps, a fresh
batch per step from a seeded sampler. It records the loss every step so notebooks can plot exact curves and
print only robust summaries (final accuracy rounded, mean ± std over seeds).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm  # the plain text bar: tqdm.auto warns (with a local path) when ipywidgets is absent

from .device import seeded
from .measure import cpu_threads

__all__ = ["History", "Evaluation", "SeedRun", "train_step", "fit", "evaluate", "accuracy", "run_seeds", "mean_std"]

Inputs = tuple[torch.Tensor, ...]
Sampler = Callable[[int], tuple[Inputs, torch.Tensor]]


@dataclass
class History:
    """What :func:`fit` recorded: the training loss at every step, and any extra per-step measurements."""

    loss: list[float] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)


def train_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, clip: float | None = None) -> float:
    """One optimisation step on ``loss``: zero the gradients, backpropagate, clip their norm, step.

    Every training loop of the course takes its steps here: :func:`fit`, :func:`fit_seq2seq` and the experiments'
    own loops.

    Args:
        optimizer: holds the parameters to update.
        loss: a scalar tensor, computed from those parameters.
        clip: the largest global L2 norm of the gradients of the optimiser's parameters; larger gradients are
            scaled down to it (None: no clipping).

    Returns:
        ``loss`` as a float.

    Raises:
        ValueError: ``loss`` is not a scalar.
    """
    if loss.ndim != 0:
        raise ValueError(f"loss must be a scalar tensor, got shape {tuple(loss.shape)}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip is not None:
        nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], clip)
    optimizer.step()
    return loss.item()


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
        steps: number of optimisation steps, at least 1.
        lr: learning rate.
        weight_decay: AdamW's decoupled weight decay.
        clip: gradient-norm clipping threshold (None to disable).
        track: optional ``name -> f(model)``, evaluated after every step and stored in ``History.extra``.
        progress: show a tqdm progress bar (off in notebooks checked by nbval: its timings vary).

    Returns:
        A :class:`History`.
    """
    if steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps}")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    hist = History(extra={name: [] for name in (track or {})})
    model.train()
    for step in tqdm(range(steps), disable=not progress, desc="training"):
        inputs, targets = sample(step)
        logits = model(*inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
        hist.loss.append(train_step(opt, loss, clip))
        with torch.no_grad():
            for name, f in (track or {}).items():
                hist.extra[name].append(float(f(model)))
    model.eval()
    return hist


class Evaluation(NamedTuple):
    """What :func:`evaluate` measures on a fixed test set (positions whose target is -100 do not count).

    Attributes:
        accuracy: the fraction of positions whose arg-max logit is the target.
        loss: the mean cross-entropy, in nats.
    """

    accuracy: float
    loss: float


@torch.no_grad()
def evaluate(model: nn.Module, inputs: Inputs, targets: torch.Tensor) -> Evaluation:
    """Accuracy and cross-entropy of ``model(*inputs)`` against ``targets``, in evaluation mode, from one forward pass.

    Returns:
        An :class:`Evaluation`.
    """
    model.eval()
    logits = model(*inputs)
    keep = targets != -100
    correct = logits.argmax(dim=-1)[keep] == targets[keep]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
    return Evaluation(float(correct.float().mean()), float(loss))


def accuracy(model: nn.Module, inputs: Inputs, targets: torch.Tensor) -> float:
    """Fraction of positions whose arg-max logit equals the target (positions with target -100 ignored)."""
    return evaluate(model, inputs, targets).accuracy


class SeedRun(NamedTuple):
    """One seed's run from :func:`run_seeds`.

    Attributes:
        seed: the seed, which fixed the initial weights and the training batches.
        model: the trained model (in evaluation mode).
        history: the training loss at every step, and what ``track`` measured (see :func:`fit`).
        accuracy, test_loss: its :class:`Evaluation` on the test set.
    """

    seed: int
    model: nn.Module
    history: History
    accuracy: float
    test_loss: float


def run_seeds(
    build: Callable[[], nn.Module],
    make_sampler: Callable[[int], Sampler],
    test: tuple[Inputs, torch.Tensor],
    seeds: Sequence[int],
    *,
    steps: int,
    lr: float,
    track: dict[str, Callable[[nn.Module], float]] | None = None,
    threads: int | None = 1,
) -> list[SeedRun]:
    """Train one fresh model per seed and score it on a fixed test set: the multi-seed runner of chapters 2–4.

    For each seed ``s``: ``with seeded(s): model = build()`` (:func:`attention_course.device.seeded`: the initial
    weights are fixed by ``s``, and the caller's random state is left as it was), then
    ``fit(model, make_sampler(s), steps, lr, track=track)`` and :func:`evaluate` on ``test = (inputs, targets)``.
    Everything runs on ``threads`` CPU threads (:func:`attention_course.measure.cpu_threads`; the setting is
    restored afterwards): the course's models are tiny, and one thread is as fast as several and sums in the same
    order on every machine.

    Returns:
        One :class:`SeedRun` per seed, in the order of ``seeds``.

    Raises:
        ValueError: ``seeds`` empty or repeated.
        TypeError: a seed is not an integer.
    """
    if len(seeds) == 0:
        raise ValueError("seeds must name at least one seed, got none")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct (a repeated seed repeats its run exactly), got {list(seeds)}")
    runs = []
    with cpu_threads(threads):
        for seed in seeds:
            with seeded(seed):
                model = build()
            history = fit(model, make_sampler(seed), steps, lr, track=track)
            result = evaluate(model, *test)
            runs.append(SeedRun(seed, model, history, result.accuracy, result.loss))
    return runs


def mean_std(values: Sequence[float], digits: int = 3) -> str:
    """``"mean ± std"`` over seeds (sample standard deviation), rounded for printing."""
    m = statistics.fmean(values)
    s = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{m:.{digits}f} ± {s:.{digits}f}"


# --------------------------------------------------------------------------------------------- chapter 5
def transformer_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    r"""The learning-rate schedule of Vaswani et al. (2017), eq. (3), chapter 5:

    :math:`\text{lr} = \text{factor}\cdot d_\text{model}^{-1/2}\cdot\min(\text{step}^{-1/2},\;
    \text{step}\cdot\text{warmup}^{-3/2})`, for ``step ≥ 1``: a linear warm-up for ``warmup`` steps, then a decay
    proportional to the inverse square root of the step. The two branches meet at ``step = warmup``, where the
    rate peaks at ``factor / sqrt(d_model · warmup)``.

    Raises:
        ValueError: ``step < 1``, ``d_model < 1`` or ``warmup < 1``.
    """
    if step < 1 or d_model < 1 or warmup < 1:
        raise ValueError(f"need step >= 1, d_model >= 1, warmup >= 1; got step={step}, d_model={d_model}, "
                         f"warmup={warmup}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothed_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, smoothing: float = 0.1, ignore_index: int = -100
) -> torch.Tensor:
    r"""Cross-entropy against a smoothed target distribution, written out (chapter 5; the paper uses
    :math:`\epsilon_{ls} = 0.1`).

    The target puts :math:`1 - \epsilon` on the correct class and spreads :math:`\epsilon` uniformly over all
    :math:`K` classes: :math:`q = (1-\epsilon)\,\text{onehot}(y) + \epsilon/K`. The loss
    :math:`-\sum_k q_k \log p_k = (1-\epsilon)\,(-\log p_y) + \epsilon\cdot\text{mean}_k(-\log p_k)` never reaches 0:
    the model is discouraged from becoming over-confident. Equals
    ``F.cross_entropy(logits, targets, label_smoothing=smoothing, ignore_index=ignore_index)`` (tested).

    Args:
        logits: ``(N, K)`` (or ``(..., K)``, flattened). targets: ``(N,)`` class ids (or ``(...)``).
        smoothing: :math:`\epsilon \in [0, 1)`.
        ignore_index: targets equal to it do not count (mean over the others).
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits (..., K) and targets (...) disagree: got {tuple(logits.shape)} and "
                         f"{tuple(targets.shape)}")
    logp = F.log_softmax(logits.reshape(-1, logits.shape[-1]).float(), dim=-1)
    y = targets.reshape(-1)
    keep = y != ignore_index
    logp, y = logp[keep], y[keep]
    nll = -logp.gather(1, y[:, None]).squeeze(1)
    uniform = -logp.mean(dim=-1)
    return ((1.0 - smoothing) * nll + smoothing * uniform).mean()


Seq2SeqSampler = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


def fit_seq2seq(
    model: nn.Module,
    sample: Seq2SeqSampler,
    steps: int,
    *,
    pad_id: int = 0,
    warmup: int = 4000,
    factor: float = 1.0,
    label_smoothing: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    clip: float | None = 1.0,
    progress: bool = False,
) -> History:
    """Train a sequence-to-sequence model with teacher forcing, the paper's optimiser settings and schedule
    (chapter 5).

    Each step: ``src, tgt = sample(step)`` (ids, padded with ``pad_id``; ``tgt`` starts with BOS); the model
    reads ``model(src, tgt[:, :-1])`` and is scored on predicting ``tgt[:, 1:]`` with label-smoothed
    cross-entropy (padding ignored); Adam with ``betas``, ``eps`` and the learning rate
    :func:`transformer_lr` ``(step, model.d_model, warmup, factor)``; gradient-norm clipping at ``clip``.
    Batches are moved to the model's device.

    Args:
        progress: show a tqdm progress bar on stderr (keep it off in notebooks checked by nbval).

    Returns:
        A :class:`History` with the loss per step and ``extra["lr"]``, the learning rate used at each step.
    """
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    d_model = int(model.d_model)
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=betas, eps=eps)
    hist = History(extra={"lr": []})
    model.train()
    # A bar redrawn every 10 s at most: a notebook stores every redraw as an output.
    bar = tqdm(range(steps), disable=not progress, desc="training", mininterval=10.0)
    for step in bar:
        lr = transformer_lr(step + 1, d_model, warmup, factor)
        for group in opt.param_groups:
            group["lr"] = lr
        src, tgt = sample(step)
        src, tgt = src.to(device), tgt.to(device)
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1),
                               ignore_index=pad_id, label_smoothing=label_smoothing)
        hist.loss.append(train_step(opt, loss, clip))
        hist.extra["lr"].append(lr)
    model.eval()
    return hist


@torch.no_grad()
def exact_match(
    model: nn.Module,
    src: torch.Tensor,
    tgt: torch.Tensor,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int = 0,
    batch_size: int = 512,
    use_cache: bool = True,
) -> float:
    """Fraction of sequences that greedy decoding reproduces exactly, up to and including EOS (chapter 5).

    ``tgt`` is ``BOS y_1 … y_m EOS PAD…``; a prediction counts only if every token through EOS is right.
    Decodes with :func:`attention_course.seq2seq.greedy_decode` (at most ``tgt.shape[1] - 1`` tokens).
    """
    from .seq2seq import greedy_decode  # late import: seq2seq.py does not depend on train.py

    device = next(model.parameters()).device
    n_out = tgt.shape[1] - 1
    correct = 0
    for i in range(0, src.shape[0], batch_size):
        s, t = src[i : i + batch_size].to(device), tgt[i : i + batch_size].to(device)
        pred = greedy_decode(model, s, n_out, bos_id, eos_id, pad_id=pad_id, use_cache=use_cache)
        pred = F.pad(pred, (0, tgt.shape[1] - pred.shape[1]), value=pad_id)
        correct += int((pred == t).all(dim=1).sum())
    return correct / src.shape[0]


__all__ += ["exact_match", "fit_seq2seq", "label_smoothed_cross_entropy", "transformer_lr"]
