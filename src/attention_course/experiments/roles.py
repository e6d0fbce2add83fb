"""Why Q, K and V play different roles (chapter 3): the question's AttentionAlt, cross-attention, a one-head
model for the previous-token task whose W^Q and W^K can be tied, the recall model with AttentionAlt's fourth matrix,
and a multi-seed runner that scores each run at several training budgets.

The head with tied projections and the associative-recall model that chapter 3 also trains live in
:mod:`attention_course.experiments.recall` (chapter 2 trains the same model); the QK and OV circuits in
:mod:`attention_course.circuits`; the seeded samplers in :mod:`attention_course.data`; the multi-seed runner in
:mod:`attention_course.train`. Everything is built on
:func:`attention_course.attention.scaled_dot_product_attention`; nothing here computes a softmax of its own.
Notation (row vectors, see the book's notation page): token states ``x`` are
``(..., n, d_model)``; ``W^Q, W^K`` are ``(d_model, d_k)``, ``W^V`` is ``(d_model, d_v)``; ``Q = x W^Q`` etc.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import nn

from .. import masks
from .._checks import (
    ArrayLike,
    as_tensor,
    check_callable,
    check_flag,
    check_int,
    check_ints,
    check_ndim,
    check_real,
    check_same_device,
    check_tensor,
    check_token_ids,
    describe,
    same_kind,
    to_output,
)
from ..attention import scaled_dot_product_attention
from ..device import seeded
from ..measure import cpu_threads
from ..train import Sampler, evaluate, fit
from .recall import AttentionHead, RecallModel

__all__ = [
    "attention_alt", "absorb_alt_weight", "cross_attention", "PreviousTokenModel", "AltRecallModel", "BudgetRun",
    "train_budgets",
]


def _tensors(names: list[str], xs: list[object]) -> tuple[bool, list[torch.Tensor]]:
    """Numpy arrays or torch tensors (not a mix), floating point, of one dtype and on one device."""
    as_numpy = same_kind(names, xs)
    ts = [as_tensor(n, x) for n, x in zip(names, xs, strict=True)]
    for n, t in zip(names[1:], ts[1:], strict=True):
        if t.dtype != ts[0].dtype:
            raise TypeError(f"{n} must have the dtype of {names[0]} ({ts[0].dtype}), got {describe(t)}")
    check_same_device(names, ts)
    return as_numpy, ts


def _check_rows(name: str, w: torch.Tensor, rows: int, layout: str) -> None:
    check_tensor(name, w, ndim=2, layout=layout)
    if w.shape[0] != rows:
        raise ValueError(f"{name} must have shape {layout} with {rows} rows, got shape {tuple(w.shape)}")


def attention_alt(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, w: ArrayLike, mask: ArrayLike | None = None
) -> tuple[ArrayLike, ArrayLike]:
    r"""The question's "more symmetric" attention (chapter 3),
    :math:`\frac{1}{\sqrt{d_k}}\operatorname{softmax}(QK^\top/\sqrt{d_k})\,VW^\top`.

    Chapter 3 shows that it is ordinary attention with the value projection :math:`W^V W^\top/\sqrt{d_k}`
    (see :func:`absorb_alt_weight`): its output is a convex combination of the rows of :math:`VW^\top/\sqrt{d_k}`.
    Only with a fixed :math:`W = I` does the outside factor take outputs out of the convex hull of the values
    themselves; with a learned ``W`` (:class:`AltRecallModel`) the factor is absorbed.

    Args:
        q: queries ``(..., n_q, d_k)``; k: keys ``(..., n_k, d_k)``; v: values ``(..., n_k, d_v)``.
        w: the fourth matrix, ``(d_out, d_v)`` (it multiplies ``v`` transposed, as in the question's formula).
        mask: optional boolean, broadcastable to ``(..., n_q, n_k)``; True = may attend.

    Returns:
        ``(output, weights)``: ``(..., n_q, d_out)`` and ``(..., n_q, n_k)``, of the inputs' kind.

    At the edges: no keys, no queries or an empty batch give what :func:`scaled_dot_product_attention` gives,
    times ``Wᵀ/√d_k``; ``d_k = 0`` is refused (the factor 1/√d_k is undefined).

    Raises:
        TypeError, ValueError: as :func:`scaled_dot_product_attention`, or ``w`` not ``(d_out, d_v)`` of the
        dtype and device of ``q``, or ``d_k = 0``.
    """
    names, xs = ["q", "k", "v", "w"], [q, k, v, w]
    if mask is not None:
        same_kind([*names, "mask"], [*xs, mask])
    as_numpy, (qt, kt, vt, wt) = _tensors(names, xs)
    check_tensor("w", wt, ndim=2, layout="(d_out, d_v)")
    check_ndim("v", vt, 2, "(..., n_k, d_v)")
    if wt.shape[1] != vt.shape[-1]:
        raise ValueError(
            f"w must have shape (d_out, d_v) with d_v = v.shape[-1] = {vt.shape[-1]}, got shape {tuple(wt.shape)}"
        )
    if qt.ndim and qt.shape[-1] == 0:
        raise ValueError(f"q must have d_k >= 1 (AttentionAlt divides by √d_k), got shape {tuple(qt.shape)}")
    mt = None if mask is None else as_tensor("mask", mask, floating=False)
    if mt is not None:
        check_same_device(["q", "mask"], [qt, mt])
    out, weights = scaled_dot_product_attention(qt, kt, vt, mask=mt)
    alt = (out @ wt.transpose(0, 1)) / math.sqrt(qt.shape[-1])
    return to_output(alt, as_numpy), to_output(weights, as_numpy)


def absorb_alt_weight(w_v: ArrayLike, w: ArrayLike, d_k: int) -> ArrayLike:
    r"""The value projection that makes ordinary attention equal AttentionAlt (chapter 3):
    :math:`W^{V\prime} = W^V W^\top/\sqrt{d_k}`.

    Args:
        w_v: ``(d_model, d_v)``; w: ``(d_out, d_v)``; d_k: the query/key width of the head.

    Returns:
        ``(d_model, d_out)``, of the inputs' kind and dtype. At the edges: ``d_v = 0`` gives zeros (an empty sum,
        as ``torch.matmul``).
    """
    d_k = check_int("d_k", d_k)
    as_numpy, (a, b) = _tensors(["w_v", "w"], [w_v, w])
    check_tensor("w_v", a, ndim=2, layout="(d_model, d_v)")
    check_tensor("w", b, ndim=2, layout="(d_out, d_v)")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"w_v (d_model, d_v) and w (d_out, d_v) must share d_v, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    return to_output(a @ b.T / math.sqrt(d_k), as_numpy)


def cross_attention(
    decoder_states: ArrayLike,
    encoder_states: ArrayLike,
    w_q: ArrayLike,
    w_k: ArrayLike,
    w_v: ArrayLike,
    mask: ArrayLike | None = None,
) -> tuple[ArrayLike, ArrayLike]:
    """Encoder–decoder attention: queries from the decoder, keys **and** values from the encoder (chapter 3).

    ``Q = decoder_states W^Q``, ``K = encoder_states W^K``, ``V = encoder_states W^V``; each target position
    looks over the source positions, so the weights are ``(..., n_tgt, n_src)``.

    Args:
        decoder_states: ``(..., n_tgt, d_dec)``.
        encoder_states: ``(..., n_src, d_enc)``.
        w_q: ``(d_dec, d_k)``; w_k: ``(d_enc, d_k)``; w_v: ``(d_enc, d_v)``.
        mask: optional boolean, broadcastable to ``(..., n_tgt, n_src)`` (e.g. source padding); True = may attend.

    Returns:
        ``(output, weights)``: ``(..., n_tgt, d_v)`` and ``(..., n_tgt, n_src)``, of the inputs' kind and dtype.
        At the edges: no source or target positions, or an empty batch, give what
        :func:`scaled_dot_product_attention` gives for them.
    """
    names = ["decoder_states", "encoder_states", "w_q", "w_k", "w_v"]
    xs = [decoder_states, encoder_states, w_q, w_k, w_v]
    if mask is not None:
        same_kind([*names, "mask"], [*xs, mask])
    as_numpy, (y, x, wq, wk, wv) = _tensors(names, xs)
    check_ndim("decoder_states", y, 2, "(..., n_tgt, d_dec)")
    check_ndim("encoder_states", x, 2, "(..., n_src, d_enc)")
    _check_rows("w_q", wq, y.shape[-1], f"(d_dec, d_k) = ({y.shape[-1]}, d_k)")
    _check_rows("w_k", wk, x.shape[-1], f"(d_enc, d_k) = ({x.shape[-1]}, d_k)")
    _check_rows("w_v", wv, x.shape[-1], f"(d_enc, d_v) = ({x.shape[-1]}, d_v)")
    if wq.shape[1] != wk.shape[1]:
        raise ValueError(f"w_q and w_k must project to the same d_k, got {tuple(wq.shape)} and {tuple(wk.shape)}")
    mt = None if mask is None else as_tensor("mask", mask, floating=False)
    if mt is not None:
        check_same_device(["decoder_states", "mask"], [y, mt])
    out, weights = scaled_dot_product_attention(y @ wq, x @ wk, x @ wv, mask=mt)
    return to_output(out, as_numpy), to_output(weights, as_numpy)


class PreviousTokenModel(nn.Module):
    """One causal attention head for :func:`attention_course.data.previous_token` (chapter 3).

    Position ``t`` has state ``E[token_t] + P[t]`` (learned token and positional embeddings) and attends to
    positions ``≤ t`` (causal mask), or ``< t`` with ``mask_self=True`` (Reformer's rule for shared-QK
    attention, where a token's score with itself would dominate). The head's output goes through an unembedding
    ``(d_v, vocab)``; there is no residual stream, so the previous token can only arrive through attention.

    ``forward(tokens)`` with ``tokens (batch, length)`` (integer ids in ``[0, vocab)``, any integer dtype, on the
    model's device) returns logits ``(batch, length, vocab)``; :meth:`attention` returns the weights
    ``(batch, length, length)``. Sequences may be shorter than ``length``, not longer.

    At the edges: position 0 with ``mask_self=True`` and ``causal=True`` may attend to nothing: its weights and
    head output are zero (the package's rule for a fully masked row), so its logits are zero. An empty batch
    gives empty logits.
    """

    def __init__(
        self, vocab: int, length: int, d_model: int = 32, d_k: int = 16, *, tie_qk: bool = False,
        mask_self: bool = False, causal: bool = True,
    ):
        super().__init__()
        vocab, length = check_int("vocab", vocab), check_int("length", length)
        d_model, d_k = check_int("d_model", d_model), check_int("d_k", d_k)
        mask_self, causal = check_flag("mask_self", mask_self), check_flag("causal", causal)
        self.length = length
        self.token_embed = nn.Embedding(vocab, d_model)
        self.pos_embed = nn.Parameter(torch.randn(length, d_model) / math.sqrt(d_model))
        self.head = AttentionHead(d_model, d_k, tie_qk=tie_qk)
        self.unembed = nn.Linear(d_k, vocab, bias=False)
        allowed = masks.causal_mask(length) if causal else torch.ones(length, length, dtype=torch.bool)
        if mask_self:
            allowed &= ~torch.eye(length, dtype=torch.bool)
        self.register_buffer("mask", allowed, persistent=False)

    def _run(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layout = f"(batch, length <= {self.length})"
        check_tensor("tokens", tokens, kind="integer", ndim=2, layout=f"of token ids {layout}")
        if tokens.shape[1] > self.length:
            raise ValueError(f"tokens must have shape {layout}, got {tuple(tokens.shape)}")
        check_same_device(["tokens", "the model"], [tokens, self.pos_embed])
        check_token_ids("tokens", tokens, self.token_embed.num_embeddings)
        n = tokens.shape[1]
        x = self.token_embed(tokens.long()) + self.pos_embed[:n]
        return self.head(x, mask=self.mask[:n, :n])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.unembed(self._run(tokens)[0])

    @torch.no_grad()
    def attention(self, tokens: torch.Tensor) -> torch.Tensor:
        """Attention weights ``(batch, length, length)``: row ``t`` is where position ``t`` looks."""
        return self._run(tokens)[1]


class AltRecallModel(RecallModel):
    r""":class:`~attention_course.experiments.recall.RecallModel` whose head is the question's AttentionAlt
    (chapter 3): its output is :math:`\frac{1}{\sqrt{d_k}}\operatorname{softmax}(QK^\top/\sqrt{d_k})\,VW^\top`,
    computed by :func:`attention_alt`, with a learned fourth matrix ``w`` of shape ``(d_k, d_k)``.

    ``outside_scale=False`` drops the outside :math:`1/\sqrt{d_k}` (the control that separates the extra matrix
    from the extra factor). Every parameter of the plain ``RecallModel`` (untied, scaled, ``init="torch"``) is
    drawn first, in the same order, so at one seed both models start from the same embeddings, projections and
    unembedding; ``w`` is drawn last, entries ``N(0, 1/d_k)``. ``forward`` as ``RecallModel``'s.
    """

    def __init__(
        self, key_vocab: int, value_vocab: int, d_model: int = 32, d_k: int = 16, *, outside_scale: bool = True
    ):
        outside_scale = check_flag("outside_scale", outside_scale)
        super().__init__(key_vocab, value_vocab, d_model, d_k)
        self.outside_scale = outside_scale
        self.w = nn.Parameter(torch.randn(d_k, d_k) / math.sqrt(d_k))

    def forward(self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        x_q, seq = self.states(keys, values, query)
        head = self.head
        out, _ = attention_alt(x_q @ head.w_q, seq @ head.w_k, seq @ head.w_v, self.w)
        if not self.outside_scale:
            out = out * math.sqrt(head.w_q.shape[1])
        return self.unembed(out[:, 0])


class BudgetRun(NamedTuple):
    """One seed's run from :func:`train_budgets`.

    Attributes:
        seed: fixed the initial weights and the training batches.
        model: the model after the largest budget (in evaluation mode).
        loss: the training loss at every step, up to the largest budget.
        accuracy, test_loss: ``{budget: value}`` on the test set after that many steps.
    """

    seed: int
    model: nn.Module
    loss: list[float]
    accuracy: dict[int, float]
    test_loss: dict[int, float]


def train_budgets(
    build: Callable[[], nn.Module],
    make_sampler: Callable[[int], Sampler],
    test: tuple[tuple[torch.Tensor, ...], torch.Tensor],
    seeds: Sequence[int],
    *,
    budgets: Sequence[int],
    lr: float,
    clip: float | None = 1.0,
) -> list[BudgetRun]:
    """A budget sweep in one run per seed: train as :func:`attention_course.train.run_seeds` does, for the
    largest budget, and score the model on ``test`` after each budget's number of steps (chapter 3).

    Each seed's run is one :func:`~attention_course.train.fit` for the largest budget, which scores the model
    (:func:`~attention_course.train.evaluate`) through its ``track`` hook after each budget's step. ``fit`` uses
    AdamW at a constant learning rate, and each sampler draws its batches in order, so the model after ``b``
    steps is the one ``run_seeds(..., steps=b)`` returns: every budget's score is that of a run trained for
    exactly that budget (the tests check it). One CPU thread, as ``run_seeds``.

    Args:
        build, make_sampler, test, seeds, lr, clip: as :func:`~attention_course.train.run_seeds`.
        budgets: increasing step counts, e.g. ``(300, 1200, 4800)``.

    Returns:
        One :class:`BudgetRun` per seed, in the order of ``seeds``.

    Raises:
        TypeError: ``build`` or ``make_sampler`` not callable (a model instead of a builder), ``test`` not a pair,
            a seed or budget not an integer.
        ValueError: no seeds, repeated or negative seeds; budgets empty, not positive or not increasing; ``lr``
            negative, ``clip`` not positive.
    """
    if isinstance(build, nn.Module) or not callable(build):
        raise TypeError(f"build must be a function () -> a new model, called once per seed; got {describe(build)}")
    check_callable("make_sampler", make_sampler, "a function seed -> sampler")
    if not (isinstance(test, tuple) and len(test) == 2):
        raise TypeError(f"test must be a pair (inputs, targets), got {describe(test)}")
    seeds = check_ints("seeds", seeds, low=0)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must name at least one seed, each once, got {seeds}")
    budgets = check_ints("budgets", budgets, low=1)
    if not budgets or any(b >= c for b, c in zip(budgets, budgets[1:], strict=False)):
        raise ValueError(f"budgets must be increasing step counts, at least one, got {budgets}")
    lr = check_real("lr", lr, low=0.0)
    clip = None if clip is None else check_real("clip", clip, low=0.0, open_low=True)
    runs = []
    with cpu_threads(1):
        for seed in seeds:
            with seeded(seed):
                model = build()
            acc: dict[int, float] = {}
            test_loss: dict[int, float] = {}
            done = [0]

            def checkpoint(m: nn.Module, acc=acc, test_loss=test_loss, done=done) -> float:
                done[0] += 1  # fit calls this after every step
                if done[0] in budgets:
                    acc[done[0]], test_loss[done[0]] = evaluate(m, *test)
                return 0.0

            history = fit(model, make_sampler(seed), budgets[-1], lr, clip=clip, track={"checkpoint": checkpoint})
            losses = history.loss
            runs.append(BudgetRun(seed, model, losses, acc, test_loss))
    return runs
