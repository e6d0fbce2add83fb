"""Chapter 2's trained experiment (§2.5–2.6): one attention layer, the recall model of
:mod:`attention_course.experiments.recall`, trained on :func:`attention_course.data.associative_recall` with and
without the 1/√d_k of its scores, and what the runs record along the way (the scores' spread and how far q and k
are from independent).

:mod:`attention_course.experiments.scaling` re-exports these names with the rest of chapter 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .._checks import check_flag, check_instance, check_int, check_ints, check_real, describe
from ..data import associative_recall, recall_sampler
from ..device import seeded
from ..train import SeedRun, run_seeds
from .recall import RecallModel

__all__ = ["initial_retrieval_head", "train_retrieval", "logit_std", "independence_ratio"]


def initial_retrieval_head(
    scaled: bool, seed: int, *, d_k: int = 256, d_model: int = 32, key_vocab: int = 32, value_vocab: int = 32
) -> RecallModel:
    """The untrained :class:`~attention_course.experiments.recall.RecallModel` that :func:`train_retrieval` starts
    from for ``seed`` (chapter 2): one head, no tied projections, ``init="unit"``, built under
    :func:`~attention_course.device.seeded` ``(seed)``.

    The scaled and the unscaled head of one seed have identical weights and differ only in the factor applied
    to the scores.
    """
    check_flag("scaled", scaled)
    with seeded(check_int("seed", seed, low=0)):
        return _retrieval_head(scaled, d_k, d_model, key_vocab, value_vocab)


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
) -> list[SeedRun]:
    """Train the recall head of :func:`initial_retrieval_head` once per seed (chapter 2's experiment).

    :func:`attention_course.train.run_seeds` does the runs (one CPU thread): seed ``s`` fixes the initial weights
    (those of ``initial_retrieval_head(scaled, s)``) and the batches (``recall_sampler(..., s)``), so the scaled
    and unscaled models of one seed start from the same weights and see the same data. After every step,
    ``history.extra`` records :func:`logit_std` (key ``"logit_std"``) and :func:`independence_ratio`
    (``"independence_ratio"``) on the first ``n_probe`` examples of ``test``.

    Args:
        scaled: multiply the scores by 1/√d_k (True) or not.
        seeds: one run per seed.
        steps: optimisation steps (AdamW, batch ``batch``, learning rate ``lr``, gradient clipping at 1).
        test: ``(inputs, targets)``, a fixed evaluation set; default: 1024 examples drawn with seed 10_000.
        n_probe: how many test examples the per-step measurements use.

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
    check_int("key_vocab", key_vocab, low=n_pairs)  # the keys of a sequence are distinct
    check_int("value_vocab", value_vocab, low=2)
    if test is not None and not (isinstance(test, (tuple, list)) and len(test) == 2):
        raise TypeError(f"test must be a pair ((keys, values, query), targets), got {describe(test)}")
    if test is None:
        b = associative_recall(1024, n_pairs, key_vocab, value_vocab, torch.Generator().manual_seed(10_000))
        test = (b.inputs, b.target)
    probe = tuple(x[:n_probe] for x in test[0])
    with seeded(0):  # (leaves the caller's random state as it was)
        _retrieval_head(scaled, d_k, d_model, key_vocab, value_vocab).scores(*probe)  # checks the test inputs
    return run_seeds(
        lambda: _retrieval_head(scaled, d_k, d_model, key_vocab, value_vocab),
        lambda seed: recall_sampler(batch, n_pairs, key_vocab, value_vocab, seed),
        test,
        seeds,
        steps=steps,
        lr=lr,
        track={
            "logit_std": lambda m: logit_std(m, probe),
            "independence_ratio": lambda m: independence_ratio(m, probe),
        },
    )
