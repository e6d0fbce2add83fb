"""Chapter 2's trained experiment (§2.5; its lab, §2.F–§2.G): one attention layer, the recall model of
:mod:`attention_course.experiments.recall`, trained on :func:`attention_course.data.associative_recall` with and
without the 1/√d_k of its scores, and what the runs record along the way (the scores' spread and how far q and k
are from independent).

:mod:`attention_course.experiments.scaling` re-exports these names with the rest of chapter 2.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from .._checks import (
    check_choice,
    check_flag,
    check_instance,
    check_int,
    check_ints,
    check_real,
    check_tensor,
    describe,
)
from ..attention import softmax
from ..data import associative_recall, recall_sampler
from ..device import seeded
from ..measure import cpu_threads
from ..train import History, SeedRun, evaluate, run_seeds, train_step
from .recall import RecallModel

__all__ = [
    "OPTIMIZERS",
    "initial_retrieval_head",
    "train_retrieval",
    "logit_std",
    "independence_ratio",
    "ScoreFactors",
    "score_factors",
    "HeadGradients",
    "head_gradients",
    "steps_to",
    "ARMS",
    "arm_settings",
    "recall_test_set",
    "sweep_arms",
    "sweep_settings",
    "PairingRatios",
    "pairing_ratios",
]

#: The optimisers :func:`train_retrieval` can train with.
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")

#: Chapter 2's four heads, the 2 × 2 of its lab's §2.G: start matched (scaled, control), start saturated (slowed,
#: unscaled).
ARMS: tuple[str, ...] = ("scaled", "control", "slowed", "unscaled")


def arm_settings(arm: str, d_k: int, optimizer: str = "adamw") -> dict[str, object]:
    """The keywords of :func:`train_retrieval` that make ``arm`` at width ``d_k`` (chapter 2, §2.5; its lab, §2.G).

    ``scaled``: the paper's head. ``unscaled``: no 1/√d_k. ``control``: unscaled, W^Q divided by √d_k at
    initialisation (the scaled head's function at step 0). ``slowed``: unscaled, the learning rate of W^Q and
    W^K divided by √d_k under AdamW (whose step does not grow with the gradient) and by d_k under SGD (whose step
    is the gradient, √d_k times the scaled head's): the unscaled head's saturated start with first score steps of
    the scaled head's size. Returns ``{"scaled", "w_q_gain", "qk_lr_scale", "d_k", "optimizer"}``.

    >>> arm_settings("control", 64)["w_q_gain"]
    0.125
    """
    check_choice("arm", arm, ARMS)
    d_k = check_int("d_k", d_k)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    slow = 1 / math.sqrt(d_k) if optimizer == "adamw" else 1 / d_k
    return {"scaled": arm == "scaled", "w_q_gain": 1 / math.sqrt(d_k) if arm == "control" else 1.0,
            "qk_lr_scale": slow if arm == "slowed" else 1.0, "d_k": d_k, "optimizer": optimizer}


def recall_test_set(n_pairs: int = 8, key_vocab: int = 32, value_vocab: int = 32) -> tuple[tuple[torch.Tensor, ...],
                                                                                       torch.Tensor]:
    """Chapter 2's fixed evaluation set: 1024 examples of :func:`~attention_course.data.associative_recall` drawn
    with seed 10 000 (no training batch uses that seed), as ``((keys, values, query), targets)``."""
    b = associative_recall(1024, n_pairs, key_vocab, value_vocab, torch.Generator().manual_seed(10_000))
    return b.inputs, b.target


def initial_retrieval_head(
    scaled: bool,
    seed: int,
    *,
    d_k: int = 256,
    d_model: int = 32,
    key_vocab: int = 32,
    value_vocab: int = 32,
    w_q_gain: float = 1.0,
) -> RecallModel:
    """The untrained :class:`~attention_course.experiments.recall.RecallModel` that :func:`train_retrieval` starts
    from for ``seed`` (chapter 2): one head, no tied projections, ``init="unit"``, built under
    :func:`~attention_course.device.seeded` ``(seed)``, then W^Q multiplied by ``w_q_gain``.

    The scaled and the unscaled head of one seed have identical weights and differ only in the factor applied
    to the scores. ``scaled=False, w_q_gain=1/√d_k`` is chapter 2's *control*: the unscaled head that computes,
    at step 0, exactly the function of the scaled one.
    """
    check_flag("scaled", scaled)
    seed = check_int("seed", seed, low=0)
    sizes = {"d_k": d_k, "d_model": d_model, "key_vocab": key_vocab, "value_vocab": value_vocab}
    d_k, d_model, key_vocab, value_vocab = (check_int(*kv) for kv in sizes.items())
    w_q_gain = check_real("w_q_gain", w_q_gain, low=0.0, open_low=True)
    return _built(scaled, d_k, d_model, key_vocab, value_vocab, w_q_gain, seed)


def _built(scaled: bool, d_k: int, d_model: int, key_vocab: int, value_vocab: int, w_q_gain: float,
           seed: int | None = None) -> RecallModel:
    """The head of :func:`initial_retrieval_head`; under ``seeded(seed)`` unless the caller already seeded."""
    if seed is not None:
        with seeded(seed):
            return _built(scaled, d_k, d_model, key_vocab, value_vocab, w_q_gain)
    model = _retrieval_head(scaled, d_k, d_model, key_vocab, value_vocab)
    if w_q_gain != 1.0:
        with torch.no_grad():
            model.head.w_q.mul_(w_q_gain)
    return model


def _check_probe(model: object, inputs: object) -> None:
    check_instance("model", model, RecallModel)
    if not isinstance(inputs, (tuple, list)) or len(inputs) != 3:
        raise TypeError(f"inputs must be a tuple (keys, values, query) of token-id tensors, got {describe(inputs)}"
                        + (f" of length {len(inputs)}" if isinstance(inputs, (tuple, list)) else ""))


def _retrieval_head(scaled: bool, d_k: int, d_model: int, key_vocab: int, value_vocab: int) -> RecallModel:
    return RecallModel(key_vocab, value_vocab, d_model, d_k, scaled=scaled, init="unit")


@torch.no_grad()
def logit_std(model: RecallModel, inputs: tuple[torch.Tensor, ...]) -> float:
    """Standard deviation of the model's scores (the softmax's input) on a fixed probe batch ``inputs`` =
    ``(keys, values, query)``, checked by the model. At the edges: NaN for an empty batch (``torch.std``'s answer)."""
    _check_probe(model, inputs)
    return float(model.scores(*inputs).std())


@torch.no_grad()
def independence_ratio(model: RecallModel, inputs: tuple[torch.Tensor, ...]) -> float:
    r"""Measured std of :math:`q\cdot k` over what independence predicts, :math:`\sqrt{d_k}\,σ_q σ_k` (chapter 2).

    :math:`σ_q`, :math:`σ_k` are the root-mean-square components of the probe batch's queries and keys, so the
    ratio is about 1 when q and k behave like independent vectors (at initialisation) and grows when training
    aligns them. ``inputs`` = ``(keys, values, query)``, as :func:`logit_std`. At the edges: NaN for an empty
    batch (a mean over nothing).
    """
    _check_probe(model, inputs)
    q, k = model.queries_keys(*inputs)
    dots = (q @ k.transpose(-2, -1))[:, 0]
    sigma_q, sigma_k = q.pow(2).mean().sqrt(), k.pow(2).mean().sqrt()
    return float(dots.pow(2).mean().sqrt() / (math.sqrt(q.shape[-1]) * sigma_q * sigma_k))


class PairingRatios(NamedTuple):
    """:func:`pairing_ratios`: the independence ratio of the query with three sets of keys (floats).

    Attributes:
        target: the key the query asks for (the position whose key id is the query's).
        others: the other keys of the same example (the query's own position left out).
        other_example: the keys of another example (the one before it in the batch), leaving out any that has
            the query's key id, so that the query has no reason to match them: above 1 only where q and k, though
            unrelated, have aligned unequal variances across their components (training lining up the
            subspaces they live in).
    """

    target: float
    others: float
    other_example: float


@torch.no_grad()
def pairing_ratios(model: RecallModel, inputs: tuple[torch.Tensor, ...]) -> PairingRatios:
    r""":func:`independence_ratio` split by which keys the query meets (chapter 2's lab, §2.I's control).

    Each entry is :math:`\sqrt{E[(q\cdot k)^2]}` over its pairs divided by :math:`\sqrt{d_k}\,σ_q σ_k`, with
    :math:`σ_q`, :math:`σ_k` the root-mean-square components of all the probe's queries and keys (the same
    normalisation as :func:`independence_ratio`). Pairing a query with the keys of another example keeps every
    statistic of q and k but their joint content, so the ratio there measures how far training lined up the
    *subspaces* of queries and keys (independent vectors with aligned, unequal component variances give a ratio
    above 1); the target key's ratio above it is the query turning towards its own key.

    Args:
        model: a :class:`~attention_course.experiments.recall.RecallModel`.
        inputs: ``(keys, values, query)`` token ids of :func:`~attention_course.data.associative_recall`, whose
            query is one of its example's keys; at least two examples.
    """
    _check_probe(model, inputs)
    keys, _, query = inputs
    q, k = model.queries_keys(*inputs)  # (batch, 1, d_k), (batch, n_pairs + 1, d_k); checks the ids
    if keys.shape[0] < 2:
        raise ValueError(f"inputs must hold at least 2 examples (one is paired with another's keys), "
                         f"got {keys.shape[0]}")
    target = keys == query[:, None]  # (batch, n_pairs)
    if not torch.equal(target.sum(1), torch.ones_like(query)):
        raise ValueError("inputs must ask for one of their own keys in every example (associative_recall's "
                         f"query), got {int((target.sum(1) != 1).sum())} examples that do not")
    norm = math.sqrt(q.shape[-1]) * q.pow(2).mean().sqrt() * k.pow(2).mean().sqrt()
    dots = (q @ k.transpose(-2, -1))[:, 0, :-1]  # (batch, n_pairs): the last position is the query's own
    elsewhere = (q @ k.roll(1, 0).transpose(-2, -1))[:, 0, :-1]
    unrelated = keys.roll(1, 0) != query[:, None]  # another example's keys, minus the query's own id

    def ratio(d: torch.Tensor) -> float:
        return float(d.pow(2).mean().sqrt() / norm)

    return PairingRatios(ratio(dots[target]), ratio(dots[~target]), ratio(elsewhere[unrelated]))


class ScoreFactors(NamedTuple):
    """:func:`score_factors`: the two factors of a score ``scale · ‖q‖ ‖k‖ cos θ``, averaged (floats).

    Attributes:
        length: the mean of ``scale · ‖q‖ ‖k‖`` over the probe's query–key pairs.
        cos: the mean of ``|cos θ|`` over the same pairs.
    """

    length: float
    cos: float


@torch.no_grad()
def score_factors(model: RecallModel, inputs: tuple[torch.Tensor, ...]) -> ScoreFactors:
    """Did the scores grow because q and k got longer or because they turned towards each other (chapter 2, §2.6; its
    lab, §2.I)?
    The means of ``scale · ‖q‖ ‖k‖`` and of ``|cos θ|`` over every query–key pair of the probe ``inputs`` =
    ``(keys, values, query)``, checked by the model (a zero-length q or k gives NaN for its cosine)."""
    _check_probe(model, inputs)
    q, k = model.queries_keys(*inputs)  # (batch, 1, d_k), (batch, n_pairs + 1, d_k)
    lengths = model.scale * q.norm(dim=-1) * k.norm(dim=-1)  # (batch, n_pairs + 1)
    cos = model.scores(*inputs) / lengths
    return ScoreFactors(lengths.mean().item(), cos.abs().mean().item())


def train_retrieval(
    scaled: bool,
    seeds: Sequence[int],
    steps: int,
    *,
    d_k: int = 256,
    d_model: int = 32,
    n_pairs: int = 8,
    key_vocab: int = 32,
    value_vocab: int = 32,
    batch: int = 64,
    lr: float = 3e-3,
    test: tuple[tuple[torch.Tensor, ...], torch.Tensor] | None = None,
    n_probe: int = 256,
    w_q_gain: float = 1.0,
    optimizer: str = "adamw",
    clip: float | None = 1.0,
    track: bool = True,
    qk_lr_scale: float = 1.0,
) -> list[SeedRun]:
    """Train the recall head of :func:`initial_retrieval_head` once per seed (chapter 2's experiment).

    :func:`attention_course.train.run_seeds` does the runs (one CPU thread): seed ``s`` fixes the initial weights
    (those of ``initial_retrieval_head(scaled, s)``) and the batches (``recall_sampler(..., s)``), so the scaled
    and unscaled models of one seed start from the same weights and see the same data. After every step,
    ``history.extra`` records, on the first ``n_probe`` examples of ``test`` (``track=False``: nothing),
    :func:`logit_std` (key ``"logit_std"``), :func:`independence_ratio` (``"independence_ratio"``) and how far
    the step moved the scores (``"score_step"``: the mean of ``|s_t − s_{t−1}|`` over the probe's scores, every
    example and position, ``s_0`` being the initial head's).

    Args:
        scaled: multiply the scores by 1/√d_k (True) or not.
        seeds: one run per seed.
        steps: optimisation steps (batch ``batch``, learning rate ``lr``).
        test: ``(inputs, targets)``, a fixed evaluation set; default: 1024 examples drawn with seed 10_000.
        n_probe: how many test examples the per-step measurements use.
        w_q_gain: multiplies W^Q at initialisation (as :func:`initial_retrieval_head`).
        optimizer: ``"adamw"`` (:func:`~attention_course.train.fit`: AdamW, no weight decay) or ``"sgd"`` (plain
            SGD, no momentum), both through :func:`~attention_course.train.train_step`.
        clip: the global gradient-norm clipping threshold applied before each step (None: no clipping). The
            default 1.0 is :func:`~attention_course.train.fit`'s.
        track: record ``logit_std``, ``independence_ratio`` and ``score_step`` after every step (measurements
            only: the run is the same with or without them).
        qk_lr_scale: multiplies the learning rate of W^Q and W^K only (the other parameters keep ``lr``).
            Chapter 2's *slowed* arm: the unscaled head with ``1/√d_k`` under AdamW (whose step does not grow
            with the gradient) or ``1/d_k`` under SGD moves its scores, per step, as far as the scaled head does.

    Returns:
        One :class:`~attention_course.train.SeedRun` per seed: the model, its history, its test accuracy and loss.

    Every argument is checked before the first run (``seeds`` distinct and ``≥ 0``, sizes positive, ``lr ≥ 0``).
    """
    check_flag("scaled", scaled)
    seeds = check_ints("seeds", seeds, low=0)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct (a repeated seed repeats its run exactly), got {seeds}")
    sizes = {"steps": steps, "d_k": d_k, "d_model": d_model, "n_pairs": n_pairs, "key_vocab": key_vocab,
             "value_vocab": value_vocab, "batch": batch, "n_probe": n_probe}
    steps, d_k, d_model, n_pairs, key_vocab, value_vocab, batch, n_probe = (check_int(*kv) for kv in sizes.items())
    lr = check_real("lr", lr, low=0)
    w_q_gain = check_real("w_q_gain", w_q_gain, low=0.0, open_low=True)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    clip = None if clip is None else check_real("clip", clip, low=0.0, open_low=True)
    check_flag("track", track)
    qk_lr_scale = check_real("qk_lr_scale", qk_lr_scale, low=0.0, open_low=True)
    check_int("key_vocab", key_vocab, low=n_pairs)  # the keys of a sequence are distinct
    check_int("value_vocab", value_vocab, low=2)
    if test is not None and not (isinstance(test, (tuple, list)) and len(test) == 2):
        raise TypeError(f"test must be a pair ((keys, values, query), targets), got {describe(test)}")
    if test is None:
        test = recall_test_set(n_pairs, key_vocab, value_vocab)
    probe = tuple(x[:n_probe] for x in test[0])
    with seeded(0):  # (leaves the caller's random state as it was)
        _retrieval_head(scaled, d_k, d_model, key_vocab, value_vocab).scores(*probe)  # checks the test inputs
    previous: dict[str, torch.Tensor] = {}  # the probe's scores before the step ("score_step")

    def build() -> RecallModel:
        model = _built(scaled, d_k, d_model, key_vocab, value_vocab, w_q_gain)
        if track:
            with torch.no_grad():
                previous["scores"] = model.scores(*probe)
        return model

    def score_step(model: RecallModel) -> float:
        now = model.scores(*probe)
        moved, previous["scores"] = (now - previous["scores"]).abs().mean(), now
        return float(moved)

    def sampler(seed: int):
        return recall_sampler(batch, n_pairs, key_vocab, value_vocab, seed)

    tracked = {
        "logit_std": lambda m: logit_std(m, probe),
        "independence_ratio": lambda m: independence_ratio(m, probe),
        "score_step": score_step,
    } if track else None
    if optimizer == "adamw" and qk_lr_scale == 1.0:
        return run_seeds(build, sampler, test, seeds, steps=steps, lr=lr, track=tracked, clip=clip)
    runs = []
    with cpu_threads(1):  # as run_seeds (and fit, for AdamW): one thread, the same summation order on every machine
        for seed in seeds:
            with seeded(seed):
                model = build()
            qk = [model.head.w_q, model.head.w_k]
            rest = [p for p in model.parameters() if all(p is not w for w in qk)]
            groups = [{"params": qk, "lr": lr * qk_lr_scale}, {"params": rest}] if qk_lr_scale != 1.0 \
                else model.parameters()
            opt = (torch.optim.SGD(groups, lr=lr) if optimizer == "sgd"
                   else torch.optim.AdamW(groups, lr=lr, weight_decay=0.0))
            sample, history = sampler(seed), History(extra={name: [] for name in (tracked or {})})
            model.train()
            for step in range(steps):
                inputs, targets = sample(step)
                history.loss.append(train_step(opt, F.cross_entropy(model(*inputs), targets), clip))
                with torch.no_grad():
                    for name, f in (tracked or {}).items():
                        history.extra[name].append(float(f(model)))
            model.eval()
            result = evaluate(model, *test)
            runs.append(SeedRun(seed, model, history, result.accuracy, result.loss))
    return runs


def sweep_arms(
    summarise: Callable[[SeedRun], dict[str, object]],
    optimisers: Mapping[str, tuple[str, float, float | None]],
    d_ks: Sequence[int],
    seeds: Sequence[int],
    steps: int,
    *,
    test: tuple[tuple[torch.Tensor, ...], torch.Tensor],
    track: bool = False,
) -> dict[str, dict[str, dict[str, list[dict[str, object]]]]]:
    """Chapter 2's sweep: every arm of :data:`ARMS` at every width and under every optimiser, one run per seed.

    ``optimisers`` maps a name to ``(optimizer, lr, clip)`` for :func:`train_retrieval`; each run is turned into
    one entry by ``summarise``. Returns ``results[optimiser name][str(d_k)][arm]``, a list with one entry per seed
    (the layout of ``benchmarks/results/scaling_sweep.json`` and ``score_steps.json``), printing one line per arm
    as it goes.
    """
    results: dict[str, dict[str, dict[str, list[dict[str, object]]]]] = {}
    for name, (optimizer, lr, clip) in optimisers.items():
        for d_k in d_ks:
            for arm in ARMS:
                runs = train_retrieval(seeds=seeds, steps=steps, test=test, lr=lr, clip=clip, track=track,
                                       **arm_settings(arm, d_k, optimizer))
                results.setdefault(name, {}).setdefault(str(d_k), {})[arm] = [summarise(r) for r in runs]
                print(name, d_k, arm, flush=True)
    return results


def sweep_settings(
    optimisers: Mapping[str, tuple[str, float, float | None]], d_ks: Sequence[int], seeds: Sequence[int], steps: int
) -> dict[str, object]:
    """What a results file of :func:`sweep_arms` records of its settings: the sweep's widths, seeds, steps, arms
    and optimisers, and the task and batch sizes :func:`train_retrieval` uses by default (read from its signature,
    so the record cannot drift from the runs). Every run trains on one thread.

    Raises:
        TypeError, ValueError: ``optimisers`` not a mapping of ``name -> (optimizer, lr, clip)``; ``d_ks`` or
            ``seeds`` not sequences of non-negative integers; ``steps`` not a positive integer.
    """
    if not isinstance(optimisers, Mapping) or not all(isinstance(v, tuple) and len(v) == 3
                                                       for v in optimisers.values()):
        raise TypeError(f"optimisers must map a name to (optimizer, lr, clip), got {describe(optimisers)}")
    for name, value in (("d_ks", d_ks), ("seeds", seeds)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{name} must be a sequence of integers, got {describe(value)}")
        for i, item in enumerate(value):
            check_int(f"{name}[{i}]", item, low=0)
    steps = check_int("steps", steps)
    defaults = inspect.signature(train_retrieval).parameters
    return {
        "d_ks": [int(d) for d in d_ks], "seeds": [int(s) for s in seeds], "steps": steps, "arms": list(ARMS),
        "optimisers": {k: {"optimizer": o, "lr": lr, "clip": c} for k, (o, lr, c) in optimisers.items()},
        **{k: defaults[k].default for k in ("d_model", "n_pairs", "key_vocab", "value_vocab", "batch")},
        "threads": 1,
        "threads_note": "every run trains on 1 thread (train.run_seeds, train_retrieval); provenance's "
                        "torch_threads is the process default, used only outside the runs",
    }


class HeadGradients(NamedTuple):
    """What :func:`head_gradients` measures on one batch (detached tensors).

    Attributes:
        w_q: the Frobenius norm of ∂L/∂W^Q, a 0-d tensor.
        w_k: the Frobenius norm of ∂L/∂W^K, a 0-d tensor.
        scores: ``(batch,)``, the L2 norm of each example's ∂L/∂s (its row of scores, the softmax's input).
        q: ``(batch,)``, the L2 norm of each example's ∂L/∂q (its query vector).
    """

    w_q: torch.Tensor
    w_k: torch.Tensor
    scores: torch.Tensor
    q: torch.Tensor


def head_gradients(model: RecallModel, inputs: tuple[torch.Tensor, ...], targets: torch.Tensor) -> HeadGradients:
    """The gradient of the batch's mean cross-entropy at W^Q, W^K, the scores and the queries (chapter 2).

    Computed by autograd on the model as it is (the model's own gradients are left untouched): the loss is
    ``cross_entropy(model(*inputs), targets)``, averaged over the batch as in training, so each example's
    ∂L/∂s and ∂L/∂q carry a factor 1/batch.

    Args:
        model: a :class:`~attention_course.experiments.recall.RecallModel`.
        inputs: ``(keys, values, query)`` token ids, checked by the model.
        targets: ``(batch,)`` integer value ids.

    Returns:
        A :class:`HeadGradients`. An empty batch is refused (the mean loss of no examples has no gradient).
    """
    _check_probe(model, inputs)
    targets = check_tensor("targets", targets, kind="integer", ndim=1, layout="of value ids (batch,)")
    if targets.ndim != 1 or targets.shape[0] != inputs[0].shape[0] or targets.shape[0] == 0:
        raise ValueError(f"targets must have shape (batch,) with batch = {inputs[0].shape[0]} >= 1 (that of keys), "
                         f"got {tuple(targets.shape)}")
    w_q, w_k = model.head.w_q, model.head.w_k
    with torch.enable_grad():
        x_q, seq = model.states(*inputs)
        q = x_q @ w_q  # (batch, 1, d_k)
        k, v = seq @ w_k, seq @ model.head.w_v
        scores = (q @ k.transpose(-2, -1)) * model.scale  # (batch, 1, n_pairs + 1)
        out = softmax(scores) @ v
        loss = F.cross_entropy(model.unembed(out[:, 0]), targets.long())
        g_wq, g_wk, g_s, g_q = torch.autograd.grad(loss, (w_q, w_k, scores, q))
    return HeadGradients(g_wq.norm(), g_wk.norm(), g_s[:, 0].norm(dim=-1), g_q[:, 0].norm(dim=-1))


def steps_to(loss: Sequence[float], level: float, window: int = 10) -> int | None:
    """The first step at which the mean of the last ``window`` losses is below ``level`` (chapter 2).

    Steps count from 1: a run whose first ``window`` losses already average below ``level`` gives ``window``.
    None: never within ``loss``. A NaN or infinite loss (a diverged step) never counts as below ``level``.

    >>> steps_to([3.0, 2.0, 1.0, 0.4, 0.2], 1.0, window=2)
    4
    """
    if isinstance(loss, (str, bytes)) or not isinstance(loss, (Sequence, np.ndarray)):
        raise TypeError(f"loss must be a sequence of numbers (one per step), got {describe(loss)}")
    values = []
    for i, x in enumerate(loss):
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise TypeError(f"loss[{i}] must be a real number, got {describe(x)}")
        values.append(float(x) if math.isfinite(x) else math.inf)
    level, window = check_real("level", level), check_int("window", window)
    if len(values) < window:
        raise ValueError(f"loss must hold at least window = {window} values, got {len(values)}")
    run = np.convolve(values, np.ones(window) / window, mode="valid")
    hit = np.nonzero(run < level)[0]
    return int(hit[0]) + window if hit.size else None
