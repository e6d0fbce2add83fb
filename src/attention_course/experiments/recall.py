"""One attention head, and the associative-recall model built on it, that chapters 2 and 3 train.

Chapter 2 trains the model with and without the 1/√d_k of the scores (``scaled``); chapter 3 ties its
projections (``tie_qk``: W^Q = W^K, ``tie_kv``: W^K = W^V). Everything is built on
:func:`attention_course.attention.scaled_dot_product_attention`; nothing here computes a softmax of its own.
Notation (row vectors, see the book's notation page): token states ``x`` are ``(..., n, d_model)``; ``W^Q, W^K``
are ``(d_model, d_k)``, ``W^V`` is ``(d_model, d_v)``; ``Q = x W^Q`` etc.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..attention import scaled_dot_product_attention

__all__ = ["INITS", "AttentionHead", "RecallModel"]

#: The initialisations of :class:`RecallModel`'s embeddings (see there).
INITS: tuple[str, ...] = ("torch", "unit")


def _check_sizes(**sizes: int) -> None:
    for name, v in sizes.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


class AttentionHead(nn.Module):
    """One attention head with projections ``W^Q, W^K (d_model, d_k)``, ``W^V (d_model, d_v)`` that can be tied.

    ``tie_qk=True`` uses one matrix for queries and keys (the scores become a Gram matrix, as in Reformer's
    shared-QK attention); ``tie_kv=True`` uses one matrix for keys and values (requires ``d_v = d_k``). Tied
    matrices are one ``nn.Parameter``, so they are counted and updated once. Each matrix has entries
    ``N(0, 1/d_model)``, drawn in the order W^Q, W^K, W^V (a tied one is not drawn). The scores are multiplied by
    ``scale``: :math:`1/\\sqrt{d_k}` when ``scaled`` (the paper), 1 otherwise.

    ``forward(x_q, x_kv=None, mask=None) -> (out, weights)``: ``x_q`` is ``(..., n_q, d_model)``, ``x_kv``
    ``(..., n_k, d_model)`` (default: ``x_q``, self-attention); returns ``(..., n_q, d_v)`` and
    ``(..., n_q, n_k)``.
    """

    def __init__(
        self,
        d_model: int,
        d_k: int,
        d_v: int | None = None,
        *,
        tie_qk: bool = False,
        tie_kv: bool = False,
        scaled: bool = True,
    ):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        _check_sizes(d_model=d_model, d_k=d_k, d_v=d_v)
        if tie_kv and d_v != d_k:
            raise ValueError(f"tie_kv needs d_v == d_k, got d_k={d_k}, d_v={d_v}")
        self.tie_qk, self.tie_kv = tie_qk, tie_kv
        self.scale = 1.0 / math.sqrt(d_k) if scaled else 1.0

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
        return scaled_dot_product_attention(
            x_q @ self.w_q, x_kv @ self.w_k, x_kv @ self.w_v, mask=mask, scale=self.scale
        )


class RecallModel(nn.Module):
    r"""One attention head solving :func:`attention_course.data.associative_recall` (chapters 2 and 3).

    The sequence has ``n_pairs + 1`` positions: pair ``i`` is one position whose state is
    ``E_key[k_i] + E_value[v_i]``; the last position is the query, ``E_key[query] + e_query`` (a learned marker).
    The query position attends over the whole sequence (itself included) with one :class:`AttentionHead`
    (``d_v = d_k``; ``scaled``, ``tie_qk``, ``tie_kv`` as there); its output goes through an unembedding
    ``(d_k, value_vocab)`` to logits over the values. No residual stream and no MLP, so the answer can only
    arrive through attention.

    ``init`` chooses the embeddings' initialisation (W^Q, W^K, W^V have entries ``N(0, 1/d_model)`` either way):

    - ``"torch"`` (chapter 3): PyTorch's default, embeddings and marker ``N(0, 1)``;
    - ``"unit"`` (chapter 2's variance argument): embeddings and marker ``N(0, 1/2)``, so every position's state, a
      sum of two, has unit-variance entries, the components of q and k have variance about 1, and the scores at
      initialisation have standard deviation about 1 when scaled and :math:`\sqrt{d_k}` when not.

    Parameters are drawn from PyTorch's global generator in a fixed order (build the model under
    :func:`attention_course.device.seeded` to fix them): the two embedding tables, the marker, (for ``"unit"``)
    the tables redrawn at variance 1/2, the head's projections, the unembedding. ``.parameters()`` lists them in
    the order each chapter's runs were made with (see the comment in the code).

    ``forward(keys, values, query)`` with ``keys, values (batch, n_pairs)`` and ``query (batch,)`` returns
    logits ``(batch, value_vocab)``. :meth:`queries_keys` returns the query position's ``q (batch, 1, d_k)`` and
    every position's ``k (batch, n_pairs + 1, d_k)``; :meth:`scores` the softmax's input ``(batch, n_pairs + 1)``;
    :meth:`attention` the query's weights ``(batch, n_pairs + 1)``. The last column is the query itself.
    """

    key_embed: nn.Embedding
    value_embed: nn.Embedding
    head: AttentionHead

    def __init__(
        self,
        key_vocab: int,
        value_vocab: int,
        d_model: int = 32,
        d_k: int = 16,
        *,
        scaled: bool = True,
        tie_qk: bool = False,
        tie_kv: bool = False,
        init: str = "torch",
    ):
        super().__init__()
        _check_sizes(key_vocab=key_vocab, value_vocab=value_vocab, d_model=d_model, d_k=d_k)
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {init!r}")
        key_embed, value_embed = nn.Embedding(key_vocab, d_model), nn.Embedding(value_vocab, d_model)
        self.query_marker = nn.Parameter(torch.randn(d_model))
        if init == "unit":
            with torch.no_grad():
                self.query_marker.div_(math.sqrt(2))
            nn.init.normal_(key_embed.weight, std=1 / math.sqrt(2))
            nn.init.normal_(value_embed.weight, std=1 / math.sqrt(2))
        head = AttentionHead(d_model, d_k, tie_qk=tie_qk, tie_kv=tie_kv, scaled=scaled)
        # The order of registration is the order of .parameters(), hence the summation order of the gradient norm
        # that fit clips: chapter 2's runs were made with the head's projections first, chapter 3's with the
        # embeddings first. Both are kept, so that each chapter's trained numbers reproduce bit for bit.
        parts = {"key_embed": key_embed, "value_embed": value_embed, "head": head}
        for name in ("head", "key_embed", "value_embed") if init == "unit" else parts:
            self.add_module(name, parts[name])
        self.unembed = nn.Linear(d_k, value_vocab, bias=False)

    @property
    def scale(self) -> float:
        """The factor multiplying the scores: :math:`1/\\sqrt{d_k}` when scaled, else 1."""
        return self.head.scale

    def states(
        self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The query position's state ``(batch, 1, d_model)`` and the sequence's ``(batch, n_pairs + 1, d_model)``."""
        if keys.ndim != 2 or values.shape != keys.shape or query.shape != keys.shape[:1]:
            raise ValueError(
                "expected keys, values (batch, n_pairs) and query (batch,), got "
                f"{tuple(keys.shape)}, {tuple(values.shape)}, {tuple(query.shape)}"
            )
        for name, t in (("keys", keys), ("values", values), ("query", query)):
            if t.dtype != torch.long:
                raise TypeError(f"{name} must be integer ids (torch.long), got {t.dtype}")
        pairs = self.key_embed(keys) + self.value_embed(values)  # (batch, n_pairs, d_model)
        x_q = (self.key_embed(query) + self.query_marker)[:, None, :]  # (batch, 1, d_model)
        return x_q, torch.cat([pairs, x_q], dim=1)

    def forward(self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        out, _ = self.head(*self.states(keys, values, query))
        return self.unembed(out[:, 0])

    def queries_keys(
        self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``q (batch, 1, d_k)`` of the query position and ``k (batch, n_pairs + 1, d_k)`` of all positions."""
        x_q, seq = self.states(keys, values, query)
        return x_q @ self.head.w_q, seq @ self.head.w_k

    def scores(self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """The softmax's input for the query position, ``q kᵀ · scale``: ``(batch, n_pairs + 1)``."""
        q, k = self.queries_keys(keys, values, query)
        return (q @ k.transpose(-2, -1))[:, 0] * self.scale

    @torch.no_grad()
    def attention(self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """The query position's attention weights ``(batch, n_pairs + 1)``; the last column is itself."""
        return self.head(*self.states(keys, values, query))[1][:, 0]
