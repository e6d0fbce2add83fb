"""Why the scores are divided by √d_k (chapter 2): moments of q·k, the softmax Jacobian, saturation, and the
one-layer recall model trained with and without the scale.

Notation (the paper's, row vectors; see the book's notation page): queries ``q`` are ``(..., n_q, d_k)``, keys
``k`` ``(..., n_k, d_k)``, values ``v`` ``(..., n_k, d_v)``. The *scores* are what enters the softmax,
``S = q kᵀ · scale`` of shape ``(..., n_q, n_k)``; the softmax runs over the last axis (the keys).

Where the scale goes is named by a *placement*:

- ``"inside"``: ``softmax(q kᵀ / √d_k) v`` (the paper);
- ``"none"``: ``softmax(q kᵀ) v``;
- ``"outside"``: ``softmax(q kᵀ) v / √d_k`` (the factor moved out of the softmax);
- ``"both"``: ``softmax(q kᵀ / √d_k) v / √d_k`` (the paper's scale plus an outside one).

Everything reuses :mod:`attention_course.attention` (softmax, attention, entropy), :mod:`attention_course.data`
(the recall task), :mod:`attention_course.train` (the multi-seed runner) and the recall model of
:mod:`attention_course.experiments.recall`, which chapter 3 trains too; nothing here has a softmax of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import sympy as sp
import torch
from sympy import stats

from .._checks import ArrayLike, as_tensor, same_kind, to_output
from ..attention import attention_entropy, scaled_dot_product_attention, softmax
from ..data import associative_recall, recall_sampler
from ..device import seeded
from ..train import SeedRun, run_seeds
from .recall import RecallModel

__all__ = [
    "PLACEMENTS",
    "DotProductMoments",
    "dot_product_moments",
    "sample_dot_products",
    "softmax_jacobian",
    "softmax_jacobian_norm",
    "PlacementFactors",
    "placement_factors",
    "ScoreGradients",
    "score_gradients",
    "SaturationStats",
    "SaturationCurves",
    "measure_saturation",
    "AttentionInputs",
    "random_attention_inputs",
    "saturation_sweep",
    "initial_retrieval_head",
    "train_retrieval",
    "logit_std",
    "independence_ratio",
]

#: The placements of the 1/√d_k factor that chapter 2 compares.
PLACEMENTS: tuple[str, ...] = ("inside", "none", "outside", "both")


# --------------------------------------------------------------------------------------------------------------
# 2.1 The variance argument


class DotProductMoments(NamedTuple):
    """Moments of :math:`q\\cdot k = \\sum_{i=1}^{d_k} q_i k_i` from :func:`dot_product_moments` (SymPy expressions).

    Attributes:
        component_mean: :math:`E[q_i k_i]`.
        component_variance: :math:`\\operatorname{Var}[q_i k_i]`.
        cross_covariance: :math:`\\operatorname{Cov}[q_i k_i, q_j k_j]` for :math:`i \\ne j`.
        mean: :math:`E[q\\cdot k]`, summed over the ``d_k`` components.
        variance: :math:`\\operatorname{Var}[q\\cdot k]`: the ``d_k`` variances plus the ``d_k (d_k - 1)``
            cross covariances.
    """

    component_mean: sp.Expr
    component_variance: sp.Expr
    cross_covariance: sp.Expr
    mean: sp.Expr
    variance: sp.Expr


def dot_product_moments(
    make_q: Callable[[str], sp.Expr], make_k: Callable[[str], sp.Expr], d_k: sp.Expr
) -> DotProductMoments:
    r"""Mean and variance of :math:`q\cdot k` with ``sympy.stats``, one component first, then summed over ``d_k``.

    Chapter 2's version of footnote 4 of Vaswani et al. (2017). The per-component step is done by ``sympy.stats``
    on random symbols: :math:`E[q_i k_i]` and :math:`\operatorname{Var}[q_i k_i]` for one independent pair, and
    :math:`\operatorname{Cov}[q_i k_i, q_j k_j]` for two pairs with distinct (hence independent) random symbols.
    The sum over the components is then a symbolic ``Sum`` over ``i = 1 … d_k`` (``d_k`` may be a symbol):
    :math:`E[q\cdot k] = \sum_i E[q_i k_i]` and :math:`\operatorname{Var}[q\cdot k] = \sum_i
    \operatorname{Var}[q_i k_i] + \sum_{i\ne j}\operatorname{Cov}[q_i k_i, q_j k_j]`.

    Args:
        make_q: ``name -> random symbol`` for one query component, e.g. ``lambda n: stats.Normal(n, 0, sigma_q)``.
            Each call must return a *new* random symbol (independent of the others).
        make_k: the same for one key component.
        d_k: the number of components, a positive integer or a SymPy symbol.

    Returns:
        A :class:`DotProductMoments` of simplified SymPy expressions.
    """
    q_i, k_i, q_j, k_j = make_q("q_i"), make_k("k_i"), make_q("q_j"), make_k("k_j")
    for name, x in (("make_q", q_i), ("make_k", k_i)):
        if not stats.rv.is_random(x):
            raise TypeError(f"{name} must return a sympy.stats random symbol, got {type(x).__name__}")
    if len({q_i, k_i, q_j, k_j}) != 4:
        raise ValueError("make_q and make_k must return a new random symbol on each call (distinct names)")
    if isinstance(d_k, int) and d_k < 1:
        raise ValueError(f"d_k must be a positive integer or symbol, got {d_k}")
    m1 = sp.simplify(stats.E(q_i * k_i))
    v1 = sp.simplify(stats.variance(q_i * k_i))
    cov = sp.simplify(stats.covariance(q_i * k_i, q_j * k_j))
    i = sp.Symbol("i", integer=True, positive=True)
    mean = sp.simplify(sp.Sum(m1, (i, 1, d_k)).doit())
    variance = sp.simplify(sp.Sum(v1, (i, 1, d_k)).doit() + d_k * (d_k - 1) * cov)
    return DotProductMoments(m1, v1, cov, mean, variance)


def sample_dot_products(
    d_k: int,
    n_samples: int,
    sigma_q: float = 1.0,
    sigma_k: float = 1.0,
    generator: torch.Generator | None = None,
    chunk: int = 2048,
) -> torch.Tensor:
    """``n_samples`` draws of :math:`q\\cdot k` for independent components :math:`q_i \\sim N(0, σ_q^2)` and
    :math:`k_i \\sim N(0, σ_k^2)` (chapter 2).

    Chapter 2 compares their sample variance with :math:`d_k σ_q^2 σ_k^2`. Drawn in chunks of ``chunk`` pairs,
    in float64, so that ``d_k = 1024`` needs little memory.

    Returns:
        A float64 tensor of shape ``(n_samples,)``.
    """
    if d_k < 1 or n_samples < 1 or chunk < 1:
        raise ValueError(f"need d_k, n_samples, chunk >= 1, got {d_k}, {n_samples}, {chunk}")
    if sigma_q < 0 or sigma_k < 0:
        raise ValueError(f"standard deviations must be >= 0, got sigma_q={sigma_q}, sigma_k={sigma_k}")
    parts = []
    for start in range(0, n_samples, chunk):
        m = min(chunk, n_samples - start)
        q = sigma_q * torch.randn(m, d_k, generator=generator, dtype=torch.float64)
        k = sigma_k * torch.randn(m, d_k, generator=generator, dtype=torch.float64)
        parts.append((q * k).sum(dim=-1))
    return torch.cat(parts)


# --------------------------------------------------------------------------------------------------------------
# 2.2 The softmax Jacobian


def softmax_jacobian(p: ArrayLike) -> ArrayLike:
    r"""The Jacobian of the softmax at weights ``p``: :math:`J = \operatorname{diag}(p) - p^\top p`.

    ``p`` is a row vector (the course's notation), so :math:`p^\top p` is the outer product. Entry
    :math:`(a, b)` is :math:`\partial p_a / \partial s_b = p_a(\delta_{ab} - p_b)` (chapter 2 derives it in SymPy).
    :math:`J` is symmetric, its rows sum to zero, and it vanishes when ``p`` is one-hot.

    Args:
        p: softmax weights of shape ``(..., n)`` (numpy array or torch tensor, floating point); each row should be
            a probability vector (non-negative, summing to one), which is not checked.

    Returns:
        ``(..., n, n)``, of the kind and dtype of ``p``.
    """
    as_numpy = same_kind(["p"], [p])
    t = as_tensor("p", p)
    if t.ndim < 1 or getattr(p, "ndim", 1) < 1:  # (np.ascontiguousarray turns a 0-d array into 1-d)
        raise ValueError("p must have shape (..., n) with at least one dimension, got a scalar (shape ())")
    jac = torch.diag_embed(t) - t[..., :, None] * t[..., None, :]
    return to_output(jac, as_numpy)


def softmax_jacobian_norm(scores: ArrayLike) -> ArrayLike:
    """Spectral norm of the softmax Jacobian at ``softmax(scores)``, one per row (chapter 2).

    It is at most 1/2 (the two-logit case at equal logits) and tends to zero as the scores spread out and the
    softmax saturates.

    Args:
        scores: ``(..., n)`` logits (numpy or torch, floating point).

    Returns:
        ``(...)``, of the inputs' kind.
    """
    as_numpy = same_kind(["scores"], [scores])
    t = as_tensor("scores", scores)
    if t.ndim < 1 or getattr(scores, "ndim", 1) < 1:
        raise ValueError("scores must have shape (..., n) with at least one dimension, got a scalar (shape ())")
    jac = softmax_jacobian(softmax(t))
    # J is symmetric positive semi-definite (xᵀJx = Σ p x² − (p·x)² ≥ 0, a variance), so its spectral norm is its
    # largest eigenvalue; eigvalsh is much cheaper than an SVD.
    return to_output(torch.linalg.eigvalsh(jac)[..., -1].clamp_min(0.0), as_numpy)


# --------------------------------------------------------------------------------------------------------------
# 2.3–2.4 Saturation, and the factor inside vs outside the softmax


class PlacementFactors(NamedTuple):
    """The factors of a placement of 1/√d_k, from :func:`placement_factors`.

    Attributes:
        inside: multiplies the scores, inside the softmax.
        outside: multiplies the attention output.
    """

    inside: float
    outside: float


def placement_factors(placement: str, d_k: int) -> PlacementFactors:
    """The factors multiplying the scores and the output for a placement of 1/√d_k.

    >>> placement_factors("outside", 4)
    PlacementFactors(inside=1.0, outside=0.5)
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if d_k < 1:
        raise ValueError(f"d_k must be >= 1, got {d_k}")
    s = 1.0 / math.sqrt(d_k)
    return PlacementFactors(
        inside=s if placement in ("inside", "both") else 1.0, outside=s if placement in ("outside", "both") else 1.0
    )


class ScoreGradients(NamedTuple):
    """What :func:`score_gradients` returns: detached tensors, one row per query.

    Attributes:
        scores: ``(..., n_q, n_k)``, the softmax's input ``q kᵀ · inside``.
        weights: ``(..., n_q, n_k)``, ``softmax(scores)``.
        grad_scores: ``(..., n_q, n_k)``, ∂loss/∂scores.
        grad_q: ``(..., n_q, d_k)``, ∂loss/∂q.
    """

    scores: torch.Tensor
    weights: torch.Tensor
    grad_scores: torch.Tensor
    grad_q: torch.Tensor


def score_gradients(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, upstream: torch.Tensor, placement: str = "inside"
) -> ScoreGradients:
    r"""The gradient that reaches attention's scores and queries, via torch autograd (chapter 2).

    Computes ``scores = q kᵀ · inside``, ``out = softmax(scores) v · outside`` (factors from
    :func:`placement_factors`) and the loss :math:`L = \sum \text{out} \odot \text{upstream}`, so that
    ``upstream`` is ∂L/∂out, the gradient arriving from the layers above; then backpropagates.

    Args:
        q: ``(..., n_q, d_k)``; k: ``(..., n_k, d_k)``; v: ``(..., n_k, d_v)``; floating-point torch tensors.
        upstream: ``(..., n_q, d_v)``, the gradient of the loss with respect to the attention output.
        placement: where the 1/√d_k goes, one of :data:`PLACEMENTS`.

    Returns:
        A :class:`ScoreGradients`.
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("upstream", upstream)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor, got {type(t).__name__}")
    # The package's attention validates q, k, v (shapes, dtypes) and gives the output's shape.
    out_shape = scaled_dot_product_attention(q.detach(), k.detach(), v.detach())[0].shape
    if upstream.shape != out_shape:
        raise ValueError(
            f"upstream must have the output's shape (..., n_q, d_v) = {tuple(out_shape)}, got {tuple(upstream.shape)}"
        )
    inside, outside = placement_factors(placement, q.shape[-1])
    q = q.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        scores = (q @ k.detach().transpose(-2, -1)) * inside
        scores.retain_grad()
        weights = softmax(scores)
        out = outside * (weights @ v.detach())
        (out * upstream.detach()).sum().backward()
    return ScoreGradients(scores.detach(), weights.detach(), scores.grad, q.grad)


class SaturationStats(NamedTuple):
    """What :func:`measure_saturation` measures on one batch (plain floats; "rows" are the query rows).

    Attributes:
        entropy: mean entropy of the attention rows, in nats (between 0 and log n_k).
        max_weight: mean of each row's largest weight (1/n_k uniform, 1 one-hot).
        grad_scores_median: median over rows of the L2 norm of ∂loss/∂scores (the gradient at the softmax's
            input): what a typical query receives.
        grad_scores_mean: mean over rows of the same norms; dominated by the few rows that are not saturated.
        grad_q_median: median over rows of the L2 norm of ∂loss/∂q, the gradient that reaches the queries
            (and through them W^Q).
        grad_q_mean: mean over rows of the same norms.
        score_std: standard deviation of the scores (the softmax's input).
    """

    entropy: float
    max_weight: float
    grad_scores_median: float
    grad_scores_mean: float
    grad_q_median: float
    grad_q_mean: float
    score_std: float


def measure_saturation(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, upstream: torch.Tensor, placement: str = "inside"
) -> SaturationStats:
    """Attention's saturation and the gradient through its softmax, summarised over query rows (chapter 2).

    The gradients come from :func:`score_gradients`, which takes the same arguments (``q``, ``k``, ``v``,
    ``upstream``, ``placement``) and raises the same errors.

    Returns:
        A :class:`SaturationStats`.
    """
    r = score_gradients(q, k, v, upstream, placement)
    g_s, g_q = r.grad_scores.norm(dim=-1), r.grad_q.norm(dim=-1)
    return SaturationStats(
        entropy=float(attention_entropy(r.weights).mean()),
        max_weight=float(r.weights.amax(dim=-1).mean()),
        grad_scores_median=float(g_s.median()),
        grad_scores_mean=float(g_s.mean()),
        grad_q_median=float(g_q.median()),
        grad_q_mean=float(g_q.mean()),
        score_std=float(r.scores.std()),
    )


class AttentionInputs(NamedTuple):
    """Random inputs of attention and its backward pass, from :func:`random_attention_inputs`.

    Attributes:
        q: ``(batch, n_q, d_k)``; k: ``(batch, n_k, d_k)``; v: ``(batch, n_k, d_v)``.
        upstream: ``(batch, n_q, d_v)``, a gradient arriving at the attention output.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    upstream: torch.Tensor


def random_attention_inputs(
    d_k: int, n_q: int = 64, n_k: int = 64, d_v: int = 16, batch: int = 32, seed: int = 0
) -> AttentionInputs:
    """Random ``q, k, v, upstream`` with independent N(0, 1) entries, as :func:`saturation_sweep` draws them.

    Drawn in that order from a generator seeded with ``seed``, in float64 (float32 would round the saturated
    gradients to exactly zero).

    Returns:
        An :class:`AttentionInputs`.
    """
    if min(d_k, n_q, n_k, d_v, batch) < 1:
        raise ValueError(f"sizes must be >= 1, got d_k={d_k}, n_q={n_q}, n_k={n_k}, d_v={d_v}, batch={batch}")
    g = torch.Generator().manual_seed(seed)
    shapes = ((batch, n_q, d_k), (batch, n_k, d_k), (batch, n_k, d_v), (batch, n_q, d_v))
    return AttentionInputs(*(torch.randn(*shape, generator=g, dtype=torch.float64) for shape in shapes))


#: What :func:`saturation_sweep` returns for one placement: the fields of :class:`SaturationStats`, each a list
#: with one value per ``d_k``.
SaturationCurves = NamedTuple("SaturationCurves", [(name, list[float]) for name in SaturationStats._fields])


def saturation_sweep(
    d_ks: Sequence[int],
    placements: Sequence[str] = PLACEMENTS,
    n_k: int = 64,
    n_q: int = 64,
    d_v: int = 16,
    batch: int = 32,
    seed: int = 0,
) -> dict[str, SaturationCurves]:
    """:func:`measure_saturation` for random q, k, v and upstream gradients, at each ``d_k`` and placement.

    For each ``d_k`` the inputs are ``random_attention_inputs(d_k, n_q, n_k, d_v, batch, seed)``
    (:func:`random_attention_inputs`: independent N(0, 1) entries in float64); every placement sees the same
    draws, so the comparison is paired.

    Returns:
        ``result[placement]``, a :data:`SaturationCurves`: e.g. ``result["inside"].entropy[i]`` is the mean
        entropy at ``d_ks[i]``.
    """
    if not d_ks:
        raise ValueError("d_ks must name at least one d_k, got none")
    for p in placements:
        placement_factors(p, 1)  # validates the name
    rows: dict[str, list[SaturationStats]] = {p: [] for p in placements}
    for d_k in d_ks:
        q, k, v, up = random_attention_inputs(d_k, n_q, n_k, d_v, batch, seed)
        for p in placements:
            rows[p].append(measure_saturation(q, k, v, up, p))
    return {p: SaturationCurves(*(list(column) for column in zip(*rows[p], strict=True))) for p in placements}


# --------------------------------------------------------------------------------------------------------------
# 2.5–2.6 A single attention layer trained with and without the scale


def initial_retrieval_head(
    scaled: bool, seed: int, *, d_k: int = 256, d_model: int = 32, key_vocab: int = 32, value_vocab: int = 32
) -> RecallModel:
    """The untrained :class:`~attention_course.experiments.recall.RecallModel` that :func:`train_retrieval` starts
    from for ``seed`` (chapter 2): one head, no tied projections, ``init="unit"``, built under
    :func:`~attention_course.device.seeded` ``(seed)``.

    The scaled and the unscaled head of one seed have identical weights and differ only in the factor applied
    to the scores.
    """
    with seeded(seed):
        return _retrieval_head(scaled, d_k, d_model, key_vocab, value_vocab)


def _retrieval_head(scaled: bool, d_k: int, d_model: int, key_vocab: int, value_vocab: int) -> RecallModel:
    return RecallModel(key_vocab, value_vocab, d_model, d_k, scaled=scaled, init="unit")


@torch.no_grad()
def logit_std(model: RecallModel, inputs: tuple[torch.Tensor, ...]) -> float:
    """Standard deviation of the model's scores (the softmax's input) on a fixed probe batch ``inputs``."""
    return float(model.scores(*inputs).std())


@torch.no_grad()
def independence_ratio(model: RecallModel, inputs: tuple[torch.Tensor, ...]) -> float:
    r"""Measured std of :math:`q\cdot k` over what independence predicts, :math:`\sqrt{d_k}\,σ_q σ_k` (chapter 2).

    :math:`σ_q`, :math:`σ_k` are the root-mean-square components of the probe batch's queries and keys, so the
    ratio is about 1 when q and k behave like independent vectors (at initialisation) and grows when training
    aligns them.
    """
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
    """
    if steps < 1 or n_probe < 1:
        raise ValueError(f"need steps >= 1 and n_probe >= 1, got steps={steps}, n_probe={n_probe}")
    if test is None:
        b = associative_recall(1024, n_pairs, key_vocab, value_vocab, torch.Generator().manual_seed(10_000))
        test = (b.inputs, b.target)
    probe = tuple(x[:n_probe] for x in test[0])
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
