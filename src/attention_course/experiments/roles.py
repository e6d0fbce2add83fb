"""Variants of one attention head that chapter 3 compares: the seed's AttentionAlt, cross-attention, and heads
whose projections are tied (W^Q = W^K, W^K = W^V), with the small one-layer models used to train them.

Everything is built on :func:`attention_course.attention.scaled_dot_product_attention`; nothing here computes a
softmax of its own. Notation (row vectors, see the book's notation page): token states ``x`` are
``(..., n, d_model)``; ``W^Q, W^K`` are ``(d_model, d_k)``, ``W^V`` is ``(d_model, d_v)``; ``Q = x W^Q`` etc.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from .._checks import ArrayLike, same_kind, to_output, to_torch
from ..attention import scaled_dot_product_attention
from ..data import associative_recall, previous_token
from ..train import Sampler, accuracy, fit

__all__ = [
    "attention_alt",
    "absorb_alt_weight",
    "cross_attention",
    "qk_circuit",
    "ov_circuit",
    "AttentionHead",
    "RecallModel",
    "PreviousTokenModel",
    "recall_sampler",
    "previous_token_sampler",
    "run_seeds",
]


def _check_matrix(name: str, w: torch.Tensor, rows: int | None, layout: str) -> None:
    if w.ndim != 2:
        raise ValueError(f"{name} must be a matrix of shape {layout}, got shape {tuple(w.shape)}")
    if rows is not None and w.shape[0] != rows:
        raise ValueError(f"{name} must have shape {layout} with {rows} rows, got shape {tuple(w.shape)}")


def attention_alt(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, w: ArrayLike, mask: ArrayLike | None = None
) -> tuple[ArrayLike, ArrayLike]:
    r"""The seed's "more symmetric" attention (chapter 3),
    :math:`\frac{1}{\sqrt{d_k}}\operatorname{softmax}(QK^\top/\sqrt{d_k})\,VW^\top`.

    Chapter 3 shows that it is ordinary attention with the value projection :math:`W^V W^\top/\sqrt{d_k}`
    (see :func:`absorb_alt_weight`), and that its outside factor :math:`1/\sqrt{d_k}` takes outputs out of the
    convex hull of the values.

    Args:
        q: queries ``(..., n_q, d_k)``; k: keys ``(..., n_k, d_k)``; v: values ``(..., n_k, d_v)``.
        w: the fourth matrix, ``(d_out, d_v)`` (it multiplies ``v`` transposed, as in the seed's formula).
        mask: optional boolean, broadcastable to ``(..., n_q, n_k)``; True = may attend.

    Returns:
        ``(output, weights)``: ``(..., n_q, d_out)`` and ``(..., n_q, n_k)``, of the inputs' kind.

    Raises:
        TypeError, ValueError: as :func:`scaled_dot_product_attention`, or ``w`` not ``(d_out, d_v)``.
    """
    names, xs = ["q", "k", "v", "w"], [q, k, v, w]
    as_numpy = same_kind(names, xs if mask is None else [*xs, mask])
    wt = to_torch("w", w)
    vt = to_torch("v", v)
    _check_matrix("w", wt, None, "(d_out, d_v)")
    if wt.shape[1] != vt.shape[-1]:
        raise ValueError(
            f"w must have shape (d_out, d_v) with d_v = v.shape[-1] = {vt.shape[-1]}, got shape {tuple(wt.shape)}"
        )
    qt, kt = to_torch("q", q), to_torch("k", k)
    mt = None if mask is None else to_torch("mask", mask, floating=False)
    out, weights = scaled_dot_product_attention(qt, kt, vt, mask=mt)
    d_k = qt.shape[-1]
    alt = (out @ wt.transpose(0, 1).to(out.dtype)) / math.sqrt(d_k)
    return to_output(alt, as_numpy), to_output(weights, as_numpy)


def absorb_alt_weight(w_v: ArrayLike, w: ArrayLike, d_k: int) -> ArrayLike:
    r"""The value projection that makes ordinary attention equal AttentionAlt (chapter 3):
    :math:`W^{V\prime} = W^V W^\top/\sqrt{d_k}`.

    Args:
        w_v: ``(d_model, d_v)``; w: ``(d_out, d_v)``; d_k: the query/key width of the head.

    Returns:
        ``(d_model, d_out)``, of the inputs' kind.
    """
    as_numpy = same_kind(["w_v", "w"], [w_v, w])
    a, b = to_torch("w_v", w_v), to_torch("w", w)
    _check_matrix("w_v", a, None, "(d_model, d_v)")
    _check_matrix("w", b, None, "(d_out, d_v)")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"w_v (d_model, d_v) and w (d_out, d_v) must share d_v, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if d_k < 1:
        raise ValueError(f"d_k must be a positive integer, got {d_k}")
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
        ``(output, weights)``: ``(..., n_tgt, d_v)`` and ``(..., n_tgt, n_src)``, of the inputs' kind.
    """
    names = ["decoder_states", "encoder_states", "w_q", "w_k", "w_v"]
    xs = [decoder_states, encoder_states, w_q, w_k, w_v]
    as_numpy = same_kind(names, xs if mask is None else [*xs, mask])
    y, x, wq, wk, wv = (to_torch(n, t) for n, t in zip(names, xs, strict=True))
    for name, t, layout in (("decoder_states", y, "(..., n_tgt, d_dec)"), ("encoder_states", x, "(..., n_src, d_enc)")):
        if t.ndim < 2:
            raise ValueError(f"{name} must have shape {layout}, got shape {tuple(t.shape)}")
    _check_matrix("w_q", wq, y.shape[-1], f"(d_dec, d_k) = ({y.shape[-1]}, d_k)")
    _check_matrix("w_k", wk, x.shape[-1], f"(d_enc, d_k) = ({x.shape[-1]}, d_k)")
    _check_matrix("w_v", wv, x.shape[-1], f"(d_enc, d_v) = ({x.shape[-1]}, d_v)")
    if wq.shape[1] != wk.shape[1]:
        raise ValueError(f"w_q and w_k must project to the same d_k, got {tuple(wq.shape)} and {tuple(wk.shape)}")
    mt = None if mask is None else to_torch("mask", mask, floating=False)
    out, weights = scaled_dot_product_attention(y @ wq, x @ wk, x @ wv, mask=mt)
    return to_output(out, as_numpy), to_output(weights, as_numpy)


def qk_circuit(w_q: ArrayLike, w_k: ArrayLike) -> ArrayLike:
    r""":math:`W_{QK} = W^Q {W^K}^\top`, ``(d_model, d_model)``: the bilinear form :math:`s_{ij} = x_i W_{QK} x_j^\top`
    that decides where a token looks (Elhage et al. 2021's QK circuit)."""
    as_numpy = same_kind(["w_q", "w_k"], [w_q, w_k])
    a, b = to_torch("w_q", w_q), to_torch("w_k", w_k)
    _check_matrix("w_q", a, None, "(d_model, d_k)")
    _check_matrix("w_k", b, None, "(d_model, d_k)")
    if a.shape != b.shape:
        raise ValueError(f"w_q and w_k must both be (d_model, d_k), got {tuple(a.shape)} and {tuple(b.shape)}")
    return to_output(a @ b.T, as_numpy)


def ov_circuit(w_v: ArrayLike, w_o: ArrayLike) -> ArrayLike:
    r""":math:`W_{OV} = W^V W^O`, ``(d_model, d_model)``: what a head writes when it attends to a token
    (Elhage et al. 2021's OV circuit). ``w_v`` is ``(d_model, d_v)``, ``w_o`` is ``(d_v, d_model)``."""
    as_numpy = same_kind(["w_v", "w_o"], [w_v, w_o])
    a, b = to_torch("w_v", w_v), to_torch("w_o", w_o)
    _check_matrix("w_v", a, None, "(d_model, d_v)")
    _check_matrix("w_o", b, a.shape[1], f"(d_v, d_model) = ({a.shape[1]}, d_model)")
    return to_output(a @ b, as_numpy)


class AttentionHead(nn.Module):
    """One attention head with projections ``W^Q, W^K (d_model, d_k)``, ``W^V (d_model, d_v)`` that can be tied.

    ``tie_qk=True`` uses one matrix for queries and keys (the scores become a Gram matrix, as in Reformer's
    shared-QK attention); ``tie_kv=True`` uses one matrix for keys and values (requires ``d_v = d_k``). Tied
    matrices are one ``nn.Parameter``, so they are counted and updated once.

    ``forward(x_q, x_kv=None, mask=None) -> (out, weights)``: ``x_q`` is ``(..., n_q, d_model)``, ``x_kv``
    ``(..., n_k, d_model)`` (default: ``x_q``, self-attention); returns ``(..., n_q, d_v)`` and
    ``(..., n_q, n_k)``.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, *, tie_qk: bool = False, tie_kv: bool = False):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        if tie_kv and d_v != d_k:
            raise ValueError(f"tie_kv needs d_v == d_k, got d_k={d_k}, d_v={d_v}")
        self.tie_qk, self.tie_kv = tie_qk, tie_kv

        def new(cols: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(d_model, cols) / math.sqrt(d_model))

        self.w_q = new(d_k)
        self.w_k = self.w_q if tie_qk else new(d_k)
        self.w_v = self.w_k if tie_kv else new(d_v)

    def forward(
        self, x_q: torch.Tensor, x_kv: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x_kv = x_q if x_kv is None else x_kv
        d_model = self.w_q.shape[0]
        for name, x in (("x_q", x_q), ("x_kv", x_kv)):
            if x.ndim < 2 or x.shape[-1] != d_model:
                raise ValueError(f"{name} must have shape (..., n, d_model={d_model}), got {tuple(x.shape)}")
        return scaled_dot_product_attention(x_q @ self.w_q, x_kv @ self.w_k, x_kv @ self.w_v, mask=mask)


class RecallModel(nn.Module):
    """One attention head solving :func:`attention_course.data.associative_recall` (chapter 3).

    The sequence has ``n_pairs + 1`` positions: pair ``i`` is one position whose embedding is
    ``E_key[k_i] + E_value[v_i]``; the last position is the query, ``E_key[query] + e_query`` (a learned marker).
    The query position attends over the whole sequence (itself included); its output goes through an
    unembedding ``(d_v, n_values)`` to logits over the values. No residual stream and no MLP, so the answer can
    only arrive through attention.

    ``forward(keys, values, query)`` with ``keys, values (batch, n_pairs)`` and ``query (batch,)`` returns
    logits ``(batch, n_values)``; :meth:`attention` returns the query's weights ``(batch, n_pairs + 1)``.
    """

    def __init__(
        self, n_keys: int, n_values: int, d_model: int = 32, d_k: int = 16, *, tie_qk: bool = False,
        tie_kv: bool = False,
    ):
        super().__init__()
        self.n_keys, self.n_values = n_keys, n_values
        self.key_embed = nn.Embedding(n_keys, d_model)
        self.value_embed = nn.Embedding(n_values, d_model)
        self.query_marker = nn.Parameter(torch.randn(d_model))
        self.head = AttentionHead(d_model, d_k, tie_qk=tie_qk, tie_kv=tie_kv)
        self.unembed = nn.Linear(d_k, n_values, bias=False)

    def _check(self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> None:
        if keys.ndim != 2 or values.shape != keys.shape or query.shape != keys.shape[:1]:
            raise ValueError(
                "expected keys, values (batch, n_pairs) and query (batch,), got "
                f"{tuple(keys.shape)}, {tuple(values.shape)}, {tuple(query.shape)}"
            )
        for name, t in (("keys", keys), ("values", values), ("query", query)):
            if t.dtype != torch.long:
                raise TypeError(f"{name} must be integer ids (torch.long), got {t.dtype}")

    def _run(self, keys, values, query):
        self._check(keys, values, query)
        pairs = self.key_embed(keys) + self.value_embed(values)  # (batch, n_pairs, d_model)
        q = (self.key_embed(query) + self.query_marker)[:, None, :]  # (batch, 1, d_model)
        seq = torch.cat([pairs, q], dim=1)  # (batch, n_pairs + 1, d_model)
        out, weights = self.head(q, seq)
        return out[:, 0], weights[:, 0]

    def forward(self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        return self.unembed(self._run(keys, values, query)[0])

    @torch.no_grad()
    def attention(self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """The query position's attention weights ``(batch, n_pairs + 1)``; the last column is itself."""
        return self._run(keys, values, query)[1]


class PreviousTokenModel(nn.Module):
    """One causal attention head for :func:`attention_course.data.previous_token` (chapter 3).

    Position ``t`` has state ``E[token_t] + P[t]`` (learned token and positional embeddings) and attends to
    positions ``≤ t`` (causal mask), or ``< t`` with ``mask_self=True`` (Reformer's rule for shared-QK
    attention, where a token's score with itself would dominate). The head's output goes through an unembedding
    ``(d_v, vocab)``; there is no residual stream, so the previous token can only arrive through attention.

    ``forward(tokens)`` with ``tokens (batch, length)`` returns logits ``(batch, length, vocab)``;
    :meth:`attention` returns the weights ``(batch, length, length)``.
    """

    def __init__(
        self, vocab: int, length: int, d_model: int = 32, d_k: int = 16, *, tie_qk: bool = False,
        mask_self: bool = False, causal: bool = True,
    ):
        super().__init__()
        self.length = length
        self.token_embed = nn.Embedding(vocab, d_model)
        self.pos_embed = nn.Parameter(torch.randn(length, d_model) / math.sqrt(d_model))
        self.head = AttentionHead(d_model, d_k, tie_qk=tie_qk)
        self.unembed = nn.Linear(d_k, vocab, bias=False)
        allowed = torch.ones(length, length, dtype=torch.bool)
        if causal:
            allowed = allowed.tril()
        if mask_self:
            allowed &= ~torch.eye(length, dtype=torch.bool)
        self.register_buffer("mask", allowed, persistent=False)

    def _run(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if tokens.ndim != 2 or tokens.shape[1] > self.length:
            raise ValueError(f"tokens must have shape (batch, length <= {self.length}), got {tuple(tokens.shape)}")
        if tokens.dtype != torch.long:
            raise TypeError(f"tokens must be integer ids (torch.long), got {tokens.dtype}")
        n = tokens.shape[1]
        x = self.token_embed(tokens) + self.pos_embed[:n]
        return self.head(x, mask=self.mask[:n, :n])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.unembed(self._run(tokens)[0])

    @torch.no_grad()
    def attention(self, tokens: torch.Tensor) -> torch.Tensor:
        """Attention weights ``(batch, length, length)``: row ``t`` is where position ``t`` looks."""
        return self._run(tokens)[1]


def recall_sampler(batch: int, n_pairs: int, n_keys: int, n_values: int, seed: int) -> Sampler:
    """A seeded sampler for :func:`attention_course.train.fit`: ``step -> ((keys, values, query), target)``."""
    g = torch.Generator().manual_seed(seed)

    def sample(step: int):
        b = associative_recall(batch, n_pairs, n_keys, n_values, g)
        return (b.keys, b.values, b.query), b.target

    return sample


def previous_token_sampler(batch: int, length: int, vocab: int, seed: int) -> Sampler:
    """A seeded sampler for :func:`attention_course.train.fit`: ``step -> ((tokens,), targets)``."""
    g = torch.Generator().manual_seed(seed)

    def sample(step: int):
        tokens, targets = previous_token(batch, length, vocab, g)
        return (tokens,), targets

    return sample


def run_seeds(
    build: Callable[[], nn.Module],
    make_sampler: Callable[[int], Sampler],
    test: tuple[tuple[torch.Tensor, ...], torch.Tensor],
    seeds: Sequence[int],
    steps: int,
    lr: float = 1e-2,
) -> tuple[list[float], list[nn.Module], list[list[float]]]:
    """Train one fresh model per seed and measure its accuracy on a fixed test set (chapter 3's tables).

    For each seed: ``torch.manual_seed(seed)``, ``model = build()``, ``fit(model, make_sampler(seed), steps, lr)``,
    then :func:`attention_course.train.accuracy` on ``test = (inputs, targets)``.

    Returns:
        ``(accuracies, models, loss_curves)``, one entry per seed.
    """
    if not seeds:
        raise ValueError("need at least one seed")
    accs, models, curves = [], [], []
    for seed in seeds:
        torch.manual_seed(seed)
        model = build()
        hist = fit(model, make_sampler(seed), steps=steps, lr=lr)
        accs.append(accuracy(model, *test))
        models.append(model)
        curves.append(hist.loss)
    return accs, models, curves
