"""Training objectives and learning-rate schedules: the paper's label-smoothed cross-entropy and
warm-up-then-inverse-square-root rate of Vaswani et al. (2017), with which :func:`attention_course.train.fit_seq2seq`
trains (chapter 5; ``attention_course.train`` re-exports both), and the warm-up-then-cosine schedule of GPT training
that :func:`attention_course.train.fit` takes (chapter 7)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ._checks import (
    LOW_PRECISION,
    as_index,
    check_flag,
    check_int,
    check_ints,
    check_real,
    check_tensor,
    check_token_ids,
)

__all__ = ["label_smoothed_cross_entropy", "transformer_lr", "warmup_cosine"]


def transformer_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0, *, ramp: bool = True) -> float:
    r"""The learning-rate schedule of Vaswani et al. (2017), eq. (3), chapter 5:

    :math:`\text{lr} = \text{factor}\cdot d_\text{model}^{-1/2}\cdot\min(\text{step}^{-1/2},\;
    \text{step}\cdot\text{warmup}^{-3/2})`, for ``step ≥ 1``: a linear warm-up for ``warmup`` steps, then a decay
    proportional to the inverse square root of the step. The two branches meet at ``step = warmup``, where the
    rate peaks at ``factor / sqrt(d_model · warmup)``.

    With ``ramp=False`` the warm-up is removed and nothing else: the rate holds that peak for the first ``warmup``
    steps, then decays exactly as above — chapter 5's control for "is it the ramp that matters, or the size of
    the steps?" (``warmup=1`` would also remove the ramp, but start ``sqrt(warmup)`` times higher).

    Raises:
        TypeError: ``step``, ``d_model`` or ``warmup`` not integers, ``factor`` not a number, ``ramp`` not a bool.
        ValueError: ``step < 1``, ``d_model < 1``, ``warmup < 1`` or ``factor < 0``.
    """
    step, d_model, warmup = check_int("step", step), check_int("d_model", d_model), check_int("warmup", warmup)
    factor = check_real("factor", factor, low=0.0)
    rising = step * warmup**-1.5 if check_flag("ramp", ramp) else warmup**-0.5
    return factor * d_model**-0.5 * min(step**-0.5, rising)


def warmup_cosine(step: int, steps: int, warmup: int, floor: float = 0.1) -> float:
    r"""The usual schedule of GPT training (GPT-3, nanoGPT; chapter 7) as a multiplier of the peak rate at
    ``step`` (counted from 0) of ``steps``: a linear warm-up, :math:`(\text{step} + 1)/\text{warmup}` for the first
    ``warmup`` steps, then half a cosine from 1 down to ``floor`` at the last step,
    :math:`\text{floor} + (1 - \text{floor})\,\tfrac12\,(1 + \cos \pi u)`, :math:`u` running from 0 to 1.
    ``warmup=0`` is the cosine alone.

    Raises:
        TypeError: an argument not a number. ValueError: ``step`` outside ``[0, steps)``, ``warmup`` outside
            ``[0, steps)``, ``floor`` outside ``[0, 1]``.
    """
    steps = check_int("steps", steps)
    step = check_int("step", step, low=0, high=steps - 1)
    warmup = check_int("warmup", warmup, low=0, high=steps - 1)
    floor = check_real("floor", floor, low=0.0, high=1.0)
    if step < warmup:
        return (step + 1) / warmup
    u = (step - warmup) / max(1, steps - 1 - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * u))


def label_smoothed_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, smoothing: float = 0.1, ignore_index: int = -100,
    smooth_over: Sequence[int] | None = None,
) -> torch.Tensor:
    r"""Cross-entropy against a smoothed target distribution, written out (chapter 5; the paper uses
    :math:`\epsilon_{ls} = 0.1`).

    The target puts :math:`1 - \epsilon` on the correct class and spreads :math:`\epsilon` uniformly over all
    :math:`K` classes: :math:`q = (1-\epsilon)\,\text{onehot}(y) + \epsilon/K`. The loss
    :math:`-\sum_k q_k \log p_k = (1-\epsilon)\,(-\log p_y) + \epsilon\cdot\text{mean}_k(-\log p_k)` never reaches 0:
    the model is discouraged from becoming over-confident. Equals
    ``F.cross_entropy(logits, targets, label_smoothing=smoothing, ignore_index=ignore_index)`` (tested).

    ``smooth_over`` (class ids) spreads :math:`\epsilon` over those classes only, :math:`q = (1-\epsilon)\,
    \text{onehot}(y) + \epsilon\,\mathbb{1}_S/|S|`: for ids that are never targets (padding, a start token),
    where smoothing over all :math:`K` teaches the model to give them probability it will never need (The Annotated
    Transformer zeroes the padding column; chapter 5 measures the difference).

    Args:
        logits: ``(N, K)`` (or ``(..., K)``, flattened). targets: ``(N,)`` class ids (or ``(...)``).
        smoothing: :math:`\epsilon \in [0, 1)`.
        ignore_index: targets equal to it do not count (mean over the others).
        smooth_over: the class ids that share :math:`\epsilon` (distinct, in ``[0, K)``); ``None``: all ``K``.

    Returns:
        A scalar in the logits' dtype (float16/bfloat16 are computed in float32, float64 in float64). At the
        edges: with no target to score (empty, or all ``ignore_index``) the loss is NaN, as ``F.cross_entropy``'s.

    Raises:
        TypeError: logits not floating point, targets not integer class ids.
        ValueError: shapes that disagree, a target outside ``[0, K)`` (other than ``ignore_index``),
            ``smoothing`` outside ``[0, 1)``, ``smooth_over`` empty, repeated or out of ``[0, K)``.
    """
    check_tensor("logits", logits, layout="(..., K)")
    check_tensor("targets", targets, kind="integer", layout="of class ids (...)")
    check_real("smoothing", smoothing, low=0.0, high=1.0, open_high=True)
    check_int("ignore_index", ignore_index, low=None)
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have at least one class on the last axis K, got shape {tuple(logits.shape)}")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"targets must have the logits' shape without the last axis K: got logits "
                         f"{tuple(logits.shape)} = (..., K) and targets {tuple(targets.shape)}")
    check_token_ids("targets", targets, logits.shape[-1], ndim=None, layout="(...)", what="class ids",
                    ignore=ignore_index)
    if smooth_over is not None:
        over = check_ints("smooth_over", smooth_over, low=0, high=logits.shape[-1] - 1)
        if len(set(over)) != len(over):
            raise ValueError(f"smooth_over must hold distinct class ids, got {over}")
    work = torch.float32 if logits.dtype in LOW_PRECISION else logits.dtype
    logp = F.log_softmax(logits.reshape(-1, logits.shape[-1]).to(work), dim=-1)
    y = as_index(targets).reshape(-1)
    keep = y != ignore_index
    logp, y = logp[keep], y[keep]
    nll = -logp.gather(1, y[:, None]).squeeze(1)
    uniform = -logp.mean(dim=-1) if smooth_over is None else -logp[:, over].mean(dim=-1)
    return ((1.0 - smoothing) * nll + smoothing * uniform).mean().to(logits.dtype)
