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

from .._checks import (
    check_choice,
    check_flag,
    check_int,
    check_ndim,
    check_same_device,
    check_tensor,
    check_token_ids,
    describe,
)
from ..attention import scaled_dot_product_attention

__all__ = ["INITS", "AttentionHead", "RecallModel"]

#: The initialisations of :class:`RecallModel`'s embeddings (see there).
INITS: tuple[str, ...] = ("torch", "unit")


class AttentionHead(nn.Module):
    """One attention head with projections ``W^Q, W^K (d_model, d_k)``, ``W^V (d_model, d_v)`` that can be tied.

    ``tie_qk=True`` uses one matrix for queries and keys (the scores become a Gram matrix, as in Reformer's
    shared-QK attention); ``tie_kv=True`` uses one matrix for keys and values (requires ``d_v = d_k``). Tied
    matrices are one ``nn.Parameter``, so they are counted and updated once. Each matrix has entries
    ``N(0, 1/d_model)``, drawn in the order W^Q, W^K, W^V (a tied one is not drawn). The scores are multiplied by
    ``scale``: :math:`1/\\sqrt{d_k}` when ``scaled`` (the paper), 1 otherwise.

    ``forward(x_q, x_kv=None, mask=None) -> (out, weights)``: ``x_q`` is ``(..., n_q, d_model)``, ``x_kv``
    ``(..., n_k, d_model)`` (default: ``x_q``, self-attention); returns ``(..., n_q, d_v)`` and
    ``(..., n_q, n_k)``. The inputs must have the projections' dtype and device (convert the head with ``.to``).

    At the edges: ``n_q = 0``, ``n_k = 0`` or an empty batch give what
    :func:`~attention_course.attention.scaled_dot_product_attention` gives for them; a fully masked query row has
    zero weights and a zero output.
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
        d_model, d_k = check_int("d_model", d_model), check_int("d_k", d_k)
        d_v = d_k if d_v is None else check_int("d_v", d_v)
        tie_qk, tie_kv = check_flag("tie_qk", tie_qk), check_flag("tie_kv", tie_kv)
        if tie_kv and d_v != d_k:
            raise ValueError(f"d_v must equal d_k when tie_kv=True (W^K = W^V), got d_k={d_k}, d_v={d_v}")
        self.tie_qk, self.tie_kv = tie_qk, tie_kv
        self.scale = 1.0 / math.sqrt(d_k) if check_flag("scaled", scaled) else 1.0

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
            check_tensor(name, x, layout=f"(..., n, d_model={d_model})")
            check_ndim(name, x, 2, f"(..., n, d_model={d_model})")
            if x.shape[-1] != d_model:
                raise ValueError(f"{name} must have shape (..., n, d_model={d_model}), got {tuple(x.shape)}")
            if x.dtype != self.w_q.dtype:
                raise TypeError(f"{name} must have the head's dtype {self.w_q.dtype}, got {describe(x)}")
        names, xs = ["x_q", "x_kv", "the head's W^Q"], [x_q, x_kv, self.w_q]
        if isinstance(mask, torch.Tensor):  # (scaled_dot_product_attention checks the mask's dtype and shape)
            names, xs = [*names, "mask"], [*xs, mask]
        check_same_device(names, xs)
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
    logits ``(batch, value_vocab)``; the ids may be any integer dtype, on the model's device, in range
    (``keys``, ``query`` in ``[0, key_vocab)``, ``values`` in ``[0, value_vocab)``). :meth:`queries_keys` returns
    the query position's ``q (batch, 1, d_k)`` and every position's ``k (batch, n_pairs + 1, d_k)``;
    :meth:`scores` the softmax's input ``(batch, n_pairs + 1)``; :meth:`attention` the query's weights
    ``(batch, n_pairs + 1)``. The last column is the query itself.

    At the edges: ``n_pairs = 0`` leaves the query attending to itself alone (weight 1); an empty batch gives
    empty outputs.
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
        key_vocab, value_vocab = check_int("key_vocab", key_vocab), check_int("value_vocab", value_vocab)
        d_model, d_k = check_int("d_model", d_model), check_int("d_k", d_k)
        check_choice("init", init, INITS)  # (AttentionHead checks the flags)
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
        keys = check_tensor("keys", keys, kind="integer", ndim=2, layout="of token ids (batch, n_pairs)")
        values = check_tensor("values", values, kind="integer", layout="of token ids (batch, n_pairs)")
        query = check_tensor("query", query, kind="integer", layout="of token ids (batch,)")
        if values.shape != keys.shape or query.shape != keys.shape[:1]:
            raise ValueError(
                "expected keys, values (batch, n_pairs) and query (batch,), got "
                f"{tuple(keys.shape)}, {tuple(values.shape)}, {tuple(query.shape)}"
            )
        check_same_device(["keys", "values", "query", "the model"], [keys, values, query, self.query_marker])
        key_vocab, value_vocab = self.key_embed.num_embeddings, self.value_embed.num_embeddings
        check_token_ids("keys", keys, key_vocab)
        check_token_ids("values", values, value_vocab)
        check_token_ids("query", query, key_vocab, ndim=1, layout="(batch,)")
        keys, values, query = keys.long(), values.long(), query.long()  # nn.Embedding takes int32 and int64 only
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
