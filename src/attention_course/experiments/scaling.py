"""Why the scores are divided by √d_k (chapter 2): moments of q·k, the softmax Jacobian, saturation, and (from
:mod:`attention_course.experiments.retrieval`) the one-layer recall model trained with and without the scale.

Notation (the paper's, row vectors; see the book's notation page): queries ``q`` are ``(..., n_q, d_k)``, keys
``k`` ``(..., n_k, d_k)``, values ``v`` ``(..., n_k, d_v)``. The *scores* are what enters the softmax,
``S = q kᵀ · scale`` of shape ``(..., n_q, n_k)``; the softmax runs over the last axis (the keys).

Where the scale goes is named by a *placement*:

- ``"inside"``: ``softmax(q kᵀ / √d_k) v`` (the paper);
- ``"none"``: ``softmax(q kᵀ) v``;
- ``"outside"``: ``softmax(q kᵀ) v / √d_k`` (the factor moved out of the softmax);
- ``"both"``: ``softmax(q kᵀ / √d_k) v / √d_k`` (the paper's scale plus an outside one).

Everything reuses :mod:`attention_course.attention` (softmax, attention, entropy); the training runs use
:mod:`attention_course.data` (the recall task), :mod:`attention_course.train` (the multi-seed runner) and the
recall model of :mod:`attention_course.experiments.recall`, which chapter 3 trains too; nothing here has a
softmax of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import sympy as sp
import torch
from sympy import stats

from .._checks import (
    LOW_PRECISION,
    ArrayLike,
    as_tensor,
    check_callable,
    check_choice,
    check_generator,
    check_int,
    check_ints,
    check_qkv,
    check_real,
    check_same_device,
    check_tensor,
    describe,
    same_kind,
    to_output,
)
from ..attention import attention_entropy, softmax
from .retrieval import (
    ARMS,
    OPTIMIZERS,
    HeadGradients,
    PairingRatios,
    ScoreFactors,
    arm_settings,
    head_gradients,
    independence_ratio,
    initial_retrieval_head,
    logit_std,
    pairing_ratios,
    recall_test_set,
    score_factors,
    steps_to,
    sweep_arms,
    sweep_settings,
    train_retrieval,
)

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
    "OPTIMIZERS",
    "ARMS",
    "arm_settings",
    "recall_test_set",
    "PairingRatios",
    "pairing_ratios",
    "ScoreFactors",
    "score_factors",
    "HeadGradients",
    "head_gradients",
    "steps_to",
    "sweep_arms",
    "sweep_settings",
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
    check_callable("make_q", make_q, "a function name -> random symbol")
    check_callable("make_k", make_k, "a function name -> random symbol")
    if not isinstance(d_k, sp.Expr):
        d_k = check_int("d_k", d_k)
    elif d_k.is_positive is False or d_k.is_integer is False:
        raise ValueError(f"d_k must be a positive integer or an integer SymPy symbol, got {d_k}")
    q_i, k_i, q_j, k_j = make_q("q_i"), make_k("k_i"), make_q("q_j"), make_k("k_j")
    for name, x in (("make_q", q_i), ("make_k", k_i)):
        if not stats.rv.is_random(x):
            raise TypeError(f"{name} must return a sympy.stats random symbol, got {describe(x)} {x}")
    if len({q_i, k_i, q_j, k_j}) != 4:
        raise ValueError(f"make_q and make_k must return a new random symbol on each call (distinct names), got "
                         f"{q_i}, {k_i}, {q_j}, {k_j} for q_i, k_i, q_j, k_j")
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
        A float64 tensor of shape ``(n_samples,)``. At the edges: ``n_samples = 0`` gives an empty tensor (as
        ``torch.randn(0)``), ``d_k = 0`` zeros (the dot product of empty vectors, an empty sum).
    """
    d_k, n_samples = check_int("d_k", d_k, low=0), check_int("n_samples", n_samples, low=0)
    chunk, generator = check_int("chunk", chunk), check_generator("generator", generator)
    sigma_q, sigma_k = check_real("sigma_q", sigma_q, low=0), check_real("sigma_k", sigma_k, low=0)
    parts = [torch.empty(0, dtype=torch.float64)]
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
        ``(..., n, n)``, of the kind and dtype of ``p``. At the edges: ``n = 0`` gives ``(..., 0, 0)``, as
        ``torch.func.jacrev`` of ``torch.softmax`` does; float16/bfloat16 are computed in their own dtype.
    """
    as_numpy = same_kind(["p"], [p])
    t = as_tensor("p", p)
    if t.ndim < 1 or getattr(p, "ndim", 1) < 1:  # (np.ascontiguousarray turns a 0-d array into 1-d)
        raise ValueError(f"p must have shape (..., n) with at least one dimension, got a scalar {describe(p)}")
    jac = torch.diag_embed(t) - t[..., :, None] * t[..., None, :]
    return to_output(jac, as_numpy)


def softmax_jacobian_norm(scores: ArrayLike) -> ArrayLike:
    """Spectral norm of the softmax Jacobian at ``softmax(scores)``, one per row (chapter 2).

    It is at most 1/2 (the two-logit case at equal logits) and tends to zero as the scores spread out and the
    softmax saturates.

    Args:
        scores: ``(..., n)`` logits (numpy or torch, floating point).

    Returns:
        ``(...)``, of the inputs' kind and dtype. At the edges: ``n = 0`` gives zeros (the norm of a 0 × 0
        matrix, as ``torch.linalg.matrix_norm``); float16/bfloat16 are computed in float32 (``eigvalsh`` has no
        half-precision kernel).
    """
    as_numpy = same_kind(["scores"], [scores])
    t = as_tensor("scores", scores)
    if t.ndim < 1 or getattr(scores, "ndim", 1) < 1:
        raise ValueError(f"scores must have shape (..., n) with at least one dimension, got a scalar "
                         f"{describe(scores)}")
    if t.shape[-1] == 0:
        return to_output(t.new_zeros(t.shape[:-1]), as_numpy)
    jac = softmax_jacobian(softmax(t.float() if t.dtype in LOW_PRECISION else t))
    # J is symmetric positive semi-definite (xᵀJx = Σ p x² − (p·x)² ≥ 0, a variance), so its spectral norm is its
    # largest eigenvalue; eigvalsh is much cheaper than an SVD.
    return to_output(torch.linalg.eigvalsh(jac)[..., -1].clamp_min(0.0).to(t.dtype), as_numpy)


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
    check_choice("placement", placement, PLACEMENTS)
    s = 1.0 / math.sqrt(check_int("d_k", d_k))
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

    At the edges: no queries or an empty batch give empty results; ``d_k = 0`` is refused (1/√d_k). All four
    tensors share a dtype and a device; float16/bfloat16 are computed in their own dtype (the softmax in float32).
    """
    check_choice("placement", placement, PLACEMENTS)
    names, xs = ("q", "k", "v", "upstream"), (q, k, v, upstream)
    for name, t in zip(names, xs, strict=True):
        check_tensor(name, t, layout="(..., n_q, d_v)" if name == "upstream" else "")
    scores_shape = check_qkv(q, k, v)  # shapes and dtypes of q, k, v
    out_shape = (*scores_shape[:-1], v.shape[-1])
    if upstream.shape != out_shape:
        raise ValueError(f"upstream must have the output's shape (..., n_q, d_v) = {out_shape}, got "
                         f"{tuple(upstream.shape)}")
    if upstream.dtype != q.dtype:
        raise TypeError(f"upstream must have the dtype of q ({q.dtype}), got {describe(upstream)}")
    check_same_device(names, xs)
    if q.shape[-1] == 0:
        raise ValueError(f"q must have d_k >= 1 (the scale is 1/√d_k), got shape {tuple(q.shape)}")
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

    At the edges: at least one query row and one key are needed (a median over no rows, or a row's largest
    weight over no keys, has no value); ``score_std`` is NaN for a single score (``torch.std``'s answer).
    """
    r = score_gradients(q, k, v, upstream, placement)
    if r.scores.numel() == 0:
        raise ValueError(f"q and k must give at least one score (one query row, one key) to summarise, got "
                         f"scores of shape {tuple(r.scores.shape)}")
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
        An :class:`AttentionInputs`. At the edges: a size of 0 gives empty tensors, as ``torch.randn``.
    """
    sizes = {"d_k": d_k, "n_q": n_q, "n_k": n_k, "d_v": d_v, "batch": batch}
    d_k, n_q, n_k, d_v, batch = (check_int(name, size, low=0) for name, size in sizes.items())
    g = torch.Generator().manual_seed(check_int("seed", seed, low=0))
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

    Every argument is checked before the first measurement: ``d_ks`` and ``placements`` non-empty, sizes
    positive, ``seed`` non-negative.
    """
    d_ks = check_ints("d_ks", d_ks)
    if isinstance(placements, str) or not isinstance(placements, Sequence) or not placements:
        raise TypeError(f"placements must be a non-empty sequence of names from {PLACEMENTS}, got "
                        f"{describe(placements)}")
    for i, p in enumerate(placements):
        check_choice(f"placements[{i}]", p, PLACEMENTS)
    for name, size in (("n_k", n_k), ("n_q", n_q), ("d_v", d_v), ("batch", batch)):
        check_int(name, size)
    check_int("seed", seed, low=0)
    rows: dict[str, list[SaturationStats]] = {p: [] for p in placements}
    for d_k in d_ks:
        q, k, v, up = random_attention_inputs(d_k, n_q, n_k, d_v, batch, seed)
        for p in placements:
            rows[p].append(measure_saturation(q, k, v, up, p))
    return {p: SaturationCurves(*(list(column) for column in zip(*rows[p], strict=True))) for p in placements}
