"""A small, deterministic training loop for the course's toy experiments (chapters 2–4; the Transformer of
chapter 5 adds its own schedule on top), with the one training step every loop shares and the multi-seed
runner the experiments use.

The loop is deliberately plain: Adam, cross-entropy with ``ignore_index=-100``, a fixed number of steps, a fresh
batch per step from a seeded sampler. It records the loss every step so notebooks can plot exact curves and
print only robust summaries (final accuracy rounded, mean ± std over seeds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm  # the plain text bar: tqdm.auto warns (with a local path) when ipywidgets is absent

from ._checks import (
    check_callable,
    check_flag,
    check_instance,
    check_int,
    check_ints,
    check_real,
    check_tensor,
    check_token_ids,
    describe,
)
from .device import seeded
from .measure import cpu_threads
from .objectives import label_smoothed_cross_entropy, transformer_lr
from .seeded import mean_and_std

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
        TypeError: ``optimizer`` not an optimiser, ``loss`` not a floating-point tensor.
        ValueError: ``loss`` not a scalar or not connected to any parameter; ``clip`` not positive.
    """
    check_instance("optimizer", optimizer, torch.optim.Optimizer)
    check_tensor("loss", loss, layout="()")
    if loss.ndim != 0:
        raise ValueError(f"loss must be a scalar tensor, got shape {tuple(loss.shape)}")
    if not loss.requires_grad:
        raise ValueError("loss must be computed from parameters that require gradients, got a loss with "
                         "requires_grad=False (computed under torch.no_grad(), or detached?)")
    clip = None if clip is None else check_real("clip", clip, low=0.0, open_low=True)
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
    schedule: Callable[[int], float] | None = None,
    autocast: torch.dtype | None = None,
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
        schedule: ``schedule(step)`` multiplies ``lr`` at each step (counted from 0), e.g. a
            :func:`~attention_course.objectives.warmup_cosine`; None: a constant rate.
        autocast: run the forward pass and the loss under ``torch.autocast`` in this dtype (``torch.bfloat16`` on
            a GPU: mixed precision, the weights and optimiser staying float32); None: the model's own dtype.

    Returns:
        A :class:`History`.

    Raises:
        TypeError: ``model`` not a module, ``sample``, ``schedule`` or a ``track`` value not callable, a sampled
            batch that is not ``(inputs, targets)``, ``autocast`` not a dtype.
        ValueError: ``steps < 1``, ``lr < 0``, ``weight_decay < 0``, ``clip ≤ 0``; logits and targets whose
            shapes disagree; ``autocast`` not a 16-bit floating dtype.
    """
    _check_model("model", model)
    check_callable("sample", sample, "a function step -> (inputs, targets)")
    check_int("steps", steps)
    check_real("lr", lr, low=0.0)
    check_real("weight_decay", weight_decay, low=0.0)
    track = _check_track(track)
    check_flag("progress", progress)
    if schedule is not None:
        check_callable("schedule", schedule, "a function step -> multiplier of lr")
    if autocast is not None:
        check_instance("autocast", autocast, torch.dtype)
        if autocast not in (torch.bfloat16, torch.float16):
            raise ValueError(f"autocast must be torch.bfloat16 or torch.float16, got {autocast}")
    device_type = next(model.parameters()).device.type
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    hist = History(extra={name: [] for name in (track or {})})
    model.train()
    for step in tqdm(range(steps), disable=not progress, desc="training"):
        if schedule is not None:
            for group in opt.param_groups:
                group["lr"] = lr * _number("schedule(step)", schedule(step))
        inputs, targets = _batch(sample(step))
        with torch.autocast(device_type, dtype=autocast, enabled=autocast is not None):
            loss = _cross_entropy(model(*inputs), targets)
        hist.loss.append(train_step(opt, loss, clip))
        with torch.no_grad():
            for name, f in track.items():
                hist.extra[name].append(_number(f"track[{name!r}]", f(model)))
    model.eval()
    return hist


def _check_model(name: str, model: object) -> nn.Module:
    check_instance(name, model, nn.Module)
    if next(model.parameters(), None) is None:
        raise ValueError(f"{name} must have parameters to train, got a {type(model).__name__} without any")
    return model


def _check_track(track: object) -> dict[str, Callable[[nn.Module], float]]:
    if track is not None and not isinstance(track, dict):
        raise TypeError(f"track must be a dict name -> f(model), got {describe(track)}")
    for name, f in (track or {}).items():
        check_callable(f"track[{name!r}]", f, "a function f(model) -> float")
    return track or {}


_TARGETS = {"kind": "integer", "layout": "of class ids (...)"}  # how targets are checked


def _batch(batch: object) -> tuple[Inputs, torch.Tensor]:
    """A sampler's ``(inputs, targets)``, checked: inputs a tuple or list of tensors, targets a tensor."""
    if not (isinstance(batch, tuple) and len(batch) == 2 and isinstance(batch[0], (tuple, list))):
        raise TypeError(f"sample(step) must return (inputs, targets) with inputs a tuple of tensors, got "
                        f"{describe(batch)}")
    return tuple(batch[0]), check_tensor("targets", batch[1], **_TARGETS)


def _number(name: str, value: object) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must return a number, got {describe(value)}") from None


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore: int = -100, **options) -> torch.Tensor:
    """Mean cross-entropy of ``(..., K)`` logits against ``(...)`` class ids in ``[0, K)``, ``ignore`` skipped."""
    check_tensor("logits", logits, layout="(..., n_classes)")
    if logits.ndim == 0 or logits.shape[:-1] != targets.shape:
        raise ValueError(f"targets must have the model's logits' shape without the last axis: got logits "
                         f"{tuple(logits.shape)} = (..., n_classes) and targets {tuple(targets.shape)}")
    check_token_ids("targets", targets, logits.shape[-1], ndim=None, layout="(...)", what="class ids", ignore=ignore)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(),
                           ignore_index=ignore, **options)


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
        An :class:`Evaluation`. At the edges: with no position to score (empty batch, or every target ``-100``)
        both are NaN, as the mean of nothing is (and as ``F.cross_entropy`` returns).

    Raises:
        TypeError: ``model`` not a module, ``inputs`` not a tuple, ``targets`` not integer class ids.
        ValueError: logits and targets whose shapes disagree.
    """
    check_instance("model", model, nn.Module)
    if not isinstance(inputs, (tuple, list)):
        raise TypeError(f"inputs must be a tuple of the model's inputs, got {describe(inputs)}")
    targets = check_tensor("targets", targets, **_TARGETS)
    was_training = model.training
    model.eval()
    try:
        logits = model(*inputs)
    finally:
        model.train(was_training)  # the caller's mode, as before the call
    loss = _cross_entropy(logits, targets)
    keep = targets != -100
    correct = logits.argmax(dim=-1)[keep] == targets[keep]
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
    threads: int | None = 1, clip: float | None = 1.0,  # clip: fit's gradient clipping; pass it explicitly
) -> list[SeedRun]:
    """Train one fresh model per seed and score it on a fixed test set: the multi-seed runner of chapters 2–4.

    For each seed ``s``: ``with seeded(s): model = build()`` (:func:`attention_course.device.seeded`: the initial
    weights are fixed by ``s``, and the caller's random state is left as it was), then
    ``fit(model, make_sampler(s), steps, lr, clip=clip, track=track)`` and :func:`evaluate` on ``test``.
    Everything runs on ``threads`` CPU threads (:func:`attention_course.measure.cpu_threads`; the setting is
    restored afterwards): the course's models are tiny, and one thread is as fast as several and sums in the same
    order on every machine.

    Returns:
        One :class:`SeedRun` per seed, in the order of ``seeds``.

    Raises:
        ValueError: ``seeds`` empty or repeated, a negative seed; the settings :func:`fit` refuses.
        TypeError: a seed is not an integer; ``build`` or ``make_sampler`` not callable; ``test`` not a pair.
    """
    if isinstance(build, nn.Module) or not callable(build):  # a model is callable, but is not a builder
        raise TypeError(f"build must be a function () -> a new model, called once per seed; got {describe(build)}")
    check_callable("make_sampler", make_sampler, "a function seed -> sampler")
    if not (isinstance(test, tuple) and len(test) == 2):
        raise TypeError(f"test must be a pair (inputs, targets), got {describe(test)}")
    if not isinstance(seeds, Sequence) or isinstance(seeds, str):
        raise TypeError(f"seeds must be a sequence of integers, got {describe(seeds)}")
    for i, seed in enumerate(seeds):
        check_int(f"seeds[{i}]", seed, low=0)
    check_int("steps", steps)
    check_real("lr", lr, low=0.0)
    if threads is not None:
        check_int("threads", threads)
    if len(seeds) == 0:
        raise ValueError("seeds must name at least one seed, got none")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct (a repeated seed repeats its run exactly), got {list(seeds)}")
    runs = []
    with cpu_threads(threads):
        for seed in seeds:
            with seeded(seed):
                model = build()
            history = fit(model, make_sampler(seed), steps, lr, clip=clip, track=track)
            result = evaluate(model, *test)
            runs.append(SeedRun(seed, model, history, result.accuracy, result.loss))
    return runs


def mean_std(values: Sequence[float], digits: int = 3) -> str:
    """``"mean ± std"`` over seeds (:func:`~attention_course.seeded.mean_and_std`), rounded for printing.

    Raises:
        TypeError: a value that is not a real number, ``digits`` not an integer.
        ValueError: no values, a NaN or infinite value, negative ``digits``.
    """
    mean, std = mean_and_std(values)
    check_int("digits", digits, low=0)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


# --------------------------------------------------------------------------------------------- chapter 5
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
    ramp: bool = True,
    smooth_over: Sequence[int] | None = None,
) -> History:
    """Train a sequence-to-sequence model with teacher forcing, the paper's optimiser settings and schedule
    (chapter 5).

    Each step: ``src, tgt = sample(step)`` (ids, padded with ``pad_id``; ``tgt`` starts with BOS); the model
    reads ``model(src, tgt[:, :-1])`` and is scored on predicting ``tgt[:, 1:]`` with label-smoothed
    cross-entropy (padding ignored); Adam with ``betas``, ``eps`` and the learning rate
    :func:`transformer_lr` ``(step, model.d_model, warmup, factor, ramp=ramp)``; gradient-norm clipping at ``clip``.
    Batches are moved to the model's device.

    Args:
        progress: show a tqdm progress bar on stderr (keep it off in notebooks checked by nbval).
        ramp: ``False`` removes the warm-up's linear ramp and keeps its peak (see :func:`transformer_lr`).
        smooth_over: the token ids label smoothing spreads its share over (see
            :func:`label_smoothed_cross_entropy`); ``None`` (default): every id, as ``F.cross_entropy`` does.

    Returns:
        A :class:`History` with the loss per step and ``extra["lr"]``, the learning rate used at each step.

    Raises:
        TypeError: ``model`` not a module with an integer ``d_model``; ``sample`` not callable or a batch that
            is not two integer tensors; settings of the wrong kind.
        ValueError: ``steps < 1``, ``warmup < 1``, ``label_smoothing`` outside ``[0, 1)``, ``betas`` outside
            ``[0, 1)``, ``eps ≤ 0``, ``clip ≤ 0``.
    """
    _check_model("model", model)
    if not isinstance(getattr(model, "d_model", None), int):
        raise TypeError(f"model must have an integer d_model (the schedule's width), got {type(model).__name__} "
                        f"with d_model={getattr(model, 'd_model', None)!r}")
    check_callable("sample", sample, "a function step -> (src, tgt)")
    check_int("steps", steps)
    check_int("pad_id", pad_id, low=None)
    check_int("warmup", warmup)
    check_real("factor", factor, low=0.0, open_low=True)
    check_real("label_smoothing", label_smoothing, low=0.0, high=1.0, open_high=True)
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise TypeError(f"betas must be a pair (beta1, beta2), got {describe(betas)}")
    for i, b in enumerate(betas):
        check_real(f"betas[{i}]", b, low=0.0, high=1.0, open_high=True)
    check_real("eps", eps, low=0.0, open_low=True)
    check_flag("progress", progress)
    check_flag("ramp", ramp)
    if smooth_over is not None:
        smooth_over = check_ints("smooth_over", smooth_over, low=0)
    d_model = int(model.d_model)
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=betas, eps=eps)
    hist = History(extra={"lr": []})
    model.train()
    # A bar redrawn every 10 s at most: a notebook stores every redraw as an output.
    bar = tqdm(range(steps), disable=not progress, desc="training", mininterval=10.0)
    for step in bar:
        lr = transformer_lr(step + 1, d_model, warmup, factor, ramp=ramp)
        for group in opt.param_groups:
            group["lr"] = lr
        src, tgt = _seq2seq_batch(sample(step))
        src, tgt = src.to(device), tgt.to(device)
        logits = model(src, tgt[:, :-1])
        if smooth_over is None:
            loss = _cross_entropy(logits, tgt[:, 1:], pad_id, label_smoothing=label_smoothing)
        else:
            loss = label_smoothed_cross_entropy(logits, tgt[:, 1:], label_smoothing, pad_id, smooth_over)
        hist.loss.append(train_step(opt, loss, clip))
        hist.extra["lr"].append(lr)
    model.eval()
    return hist


def _seq2seq_batch(batch: object) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(batch, tuple) and len(batch) >= 2):
        raise TypeError(f"sample(step) must return (src, tgt) token ids, got {describe(batch)}")
    src = check_tensor("src", batch[0], kind="integer", ndim=2, layout="of token ids (batch, n_src)")
    tgt = check_tensor("tgt", batch[1], kind="integer", ndim=2, layout="of token ids (batch, n_tgt)")
    if tgt.shape[1] < 2:
        raise ValueError(f"tgt must hold BOS and at least one token to predict, got shape {tuple(tgt.shape)}")
    return src, tgt


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

    Raises:
        TypeError: ``src``/``tgt`` not 2-D integer tensors, ids or ``batch_size`` not integers.
        ValueError: ``src`` and ``tgt`` of different batch sizes, an empty batch (a fraction of no sequences is
            undefined), ``batch_size < 1``.
    """
    from .seq2seq import greedy_decode  # late import: seq2seq.py does not depend on train.py

    check_instance("model", model, nn.Module)
    src, tgt = _seq2seq_batch((src, tgt))
    if src.shape[0] != tgt.shape[0]:
        raise ValueError(f"src and tgt must hold the same number of sequences, got src {tuple(src.shape)} and "
                         f"tgt {tuple(tgt.shape)}")
    if src.shape[0] == 0:
        raise ValueError("src must hold at least one sequence (exact match over none is undefined), got batch 0")
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        check_int(name, value, low=0)
    check_int("batch_size", batch_size)
    check_flag("use_cache", use_cache)
    limit = getattr(getattr(model, "positions", None), "max_len", None)
    if limit is not None and tgt.shape[1] - 1 > limit:
        raise ValueError(f"tgt must have at most the model's max_len + 1 = {limit + 1} columns (BOS and the tokens "
                         f"to decode), got shape {tuple(tgt.shape)}")
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
