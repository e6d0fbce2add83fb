"""Multi-head attention, with grouped-query attention, a rotary-position hook and the KV cache (chapters 4–7;
the cache itself is :mod:`attention_course.kv_cache`).

Notation (the paper's, row vectors): head ``i`` computes ``Attention(X W_i^Q, X W_i^K, X W_i^V)``, where ``W_i^Q``
is the ``i``-th block of ``d_k`` *columns* of one ``d_model × d_model`` matrix ``W^Q``. So the module computes the
big product ``X W^Q`` once and cuts it into heads with :func:`split_heads` (chapter 4 proves the two equal), and
joins the heads' outputs with :func:`merge_heads` before ``W^O``.

The parameters have :class:`torch.nn.MultiheadAttention`'s names and layout (``in_proj_weight`` stacks the three
projections in PyTorch's ``(out, in)`` orientation; ``out_proj``), so :mod:`attention_course.interop` converts
between the two. Masks follow the package convention of :mod:`attention_course.masks` (boolean, True = may attend),
and are keyword-only; a query that may attend to no key gets zero weights and a zero attention output.

At the edges (see :meth:`MultiHeadAttention.forward`): empty batches and sequences give what
:class:`torch.nn.MultiheadAttention` gives; a query with no key to attend to gets zeros on both paths, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import masks
from ._checks import (
    check_callable,
    check_device,
    check_dtype,
    check_flag,
    check_int,
    check_real,
    check_tensor,
    describe,
)
from ._multihead_checks import check_call, check_input
from .attention import AttentionOutput
from .kv_cache import KVCache

__all__ = ["KVCache", "MultiHeadAttention", "merge_heads", "split_heads"]

#: ``rotary(x, positions=p)``: rotates queries or keys ``(batch, heads, n, d_k)`` by their positions ``p`` ``(n,)``,
#: e.g. :func:`attention_course.positional.apply_rope`.
RotaryHook = Callable[..., torch.Tensor]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(batch, n, num_heads·d_k) → (batch, num_heads, n, d_k)``: the column blocks of a fused projection.

    Block ``i`` of ``d_k`` columns of ``X W^Q`` is head ``i``'s ``X W_i^Q`` (chapter 4, §4.2). Returns a view.
    At the edges: ``batch``, ``n`` or the width may be 0 (an empty view, ``d_k = 0`` for width 0).
    """
    check_tensor("x", x, kind=None, ndim=3, layout="(batch, n, num_heads·d_k)")
    num_heads = check_int("num_heads", num_heads)
    if x.shape[-1] % num_heads:
        raise ValueError(f"x's last dimension must be divisible by num_heads={num_heads} (it is num_heads·d_k), "
                         f"got shape {tuple(x.shape)}")
    return _split(x, num_heads)


def _split(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    return x.unflatten(-1, (num_heads, x.shape[-1] // num_heads)).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(batch, num_heads, n, d_k) → (batch, n, num_heads·d_k)``: Concat(head_1, …, head_h), the inverse of
    :func:`split_heads`. At the edges: any size may be 0 (an empty result)."""
    check_tensor("x", x, kind=None, ndim=4, layout="(batch, num_heads, n, d_k)")
    return _merge(x)


def _merge(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).flatten(2)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention :math:`\operatorname{Concat}(\text{head}_1,\dots,\text{head}_h)\,W^O` (chapter 4).

    Args:
        embed_dim: :math:`d_\text{model}`, the width of queries and of the output.
        num_heads: :math:`h`; must divide ``embed_dim``; each head has :math:`d_k = d_v = d_\text{model}/h`.
        dropout: dropout probability on the attention weights (training mode only), in ``[0, 1]`` as
            :class:`torch.nn.Dropout`.
        bias: biases in the input and output projections.
        batch_first: inputs and outputs are ``(batch, n, features)``; otherwise ``(n, batch, features)``
            (PyTorch's default). Unbatched ``(n, features)`` inputs are accepted either way.
        kdim, vdim: widths of the key and value inputs (default ``embed_dim``).
        num_kv_heads: key/value heads, dividing ``num_heads`` (default ``num_heads``). Fewer is grouped-query
            attention (Ainslie et al., 2023), 1 is multi-query attention (Shazeer, 2019): query head ``i`` uses
            key/value head ``i // (num_heads // num_kv_heads)``, as PyTorch's ``enable_gqa=True``.
        rotary: optional hook ``rotary(x, positions=p)`` applied to every head's queries and keys (chapter 7,
            :func:`~attention_course.positional.apply_rope`). Positions count from 0, or from the cache's length.
        device, dtype: where and in which dtype to create the parameters.

    Parameters (PyTorch's names, ``(out_features, in_features)`` layout): ``in_proj_weight``
    ``(embed_dim + 2·num_kv_heads·d_k, embed_dim)`` when ``kdim == vdim == embed_dim``, otherwise
    ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``; ``in_proj_bias``; ``out_proj``.

    Calling it (:meth:`forward`):
        query: ``(batch, n_q, embed_dim)`` if ``batch_first`` else ``(n_q, batch, embed_dim)``, or ``(n_q,
            embed_dim)`` unbatched; in the parameters' dtype and on their device.
        key, value: ``(batch, n_k, kdim|vdim)`` in the same layout; None with a static ``cache``.
        key_mask: boolean ``(batch, n_k)`` (``(n_k,)`` unbatched), **True = a real key**; with a cache ``n_k`` counts
            the cached keys and the new ones.
        attn_mask: boolean ``(n_q, n_k)`` or ``(batch|1, num_heads|1, n_q, n_k)``, **True = may attend**.
        need_weights: also return the weights; if False, run PyTorch's fused kernel and return None for them.
        average_attn_weights: average the returned weights over heads (else ``(batch, num_heads, n_q, n_k)``).
        is_causal: add the causal mask: a query at position ``p`` sees keys at positions ``≤ p``. Without a cache
            queries and keys both start at 0 (``"upper_left"``, as PyTorch's ``is_causal``); with one the new
            queries follow the cached keys (``"lower_right"``), see :mod:`attention_course.masks`.
        cache: a :class:`KVCache` made for this module and this batch (:meth:`new_cache`): the new keys and values
            are appended to it and all of them attended to; or, static (:meth:`static_cache`), the keys and values
            to use (then without ``is_causal`` or a rotary hook: those keys have no positions). A call that raises
            leaves the cache unchanged.

    At the edges: ``batch = 0`` or ``n_q = 0`` give empty results; ``n_k = 0`` and queries whose every key is
    masked get zero weights and a zero attention output (the output is then ``out_proj``'s bias) on both paths,
    where ``nn.MultiheadAttention`` gives zeros with ``need_weights=False`` but NaN with ``True``. Validation
    (:mod:`attention_course._multihead_checks`) reads shapes, dtypes and devices only (this is a hot path).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        batch_first: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        num_kv_heads: int | None = None,
        rotary: RotaryHook | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.embed_dim = embed_dim = check_int("embed_dim", embed_dim)
        self.num_heads = num_heads = check_int("num_heads", num_heads)
        self.num_kv_heads = check_int("num_kv_heads", num_heads if num_kv_heads is None else num_kv_heads)
        self.kdim = check_int("kdim", embed_dim if kdim is None else kdim)
        self.vdim = check_int("vdim", embed_dim if vdim is None else vdim)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads (d_k = embed_dim/num_heads), got "
                             f"embed_dim={embed_dim} and num_heads={num_heads}")
        if num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads must be divisible by num_kv_heads (query heads per key/value head), got "
                             f"num_heads={num_heads} and num_kv_heads={self.num_kv_heads}")
        self.dropout = check_real("dropout", dropout, low=0.0, high=1.0)
        self.batch_first = check_flag("batch_first", batch_first)
        self.rotary = None if rotary is None else check_callable("rotary", rotary, "a callable rotary(x, positions=p)")
        bias = check_flag("bias", bias)
        device = None if device is None else check_device("device", device)
        dtype = None if dtype is None else check_dtype("dtype", dtype)
        self.head_dim = embed_dim // num_heads
        self.kv_dim = self.num_kv_heads * self.head_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        factory = {"device": device, "dtype": dtype}
        widths = [embed_dim, self.kv_dim, self.kv_dim]
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nn.Parameter(torch.empty(sum(widths), embed_dim, **factory))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = nn.Parameter(torch.empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = nn.Parameter(torch.empty(self.kv_dim, self.kdim, **factory))
            self.v_proj_weight = nn.Parameter(torch.empty(self.kv_dim, self.vdim, **factory))
        self.in_proj_bias = nn.Parameter(torch.empty(sum(widths), **factory)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's initialisation: Xavier-uniform input projections, zero biases, default ``out_proj``."""
        for w in self.in_projections() if self.in_proj_weight is None else (self.in_proj_weight,):
            nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        kv = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        dims = "" if self._qkv_same_embed_dim else f", kdim={self.kdim}, vdim={self.vdim}"
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}{kv}{dims}, batch_first={self.batch_first}"

    def in_projections(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(W_q, W_k, W_v)`` in PyTorch's ``(out, in)`` orientation (the paper's matrices transposed)."""
        if self.in_proj_weight is not None:
            return tuple(self.in_proj_weight.split([self.embed_dim, self.kv_dim, self.kv_dim]))  # type: ignore[return-value]
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    # ------------------------------------------------------------------------------------------ the KV cache
    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty cache for ``capacity`` positions of self-attention: keys and values on the parameters' device,
        in the dtype the projections will give them — the parameters' own, or autocast's where ``torch.autocast``
        is on for that device when the cache is made (so make it inside the autocast region that decodes).
        At the edges: ``batch = 0`` gives an empty cache, as PyTorch answers empty batches."""
        batch, capacity = check_int("batch", batch, low=0), check_int("capacity", capacity)
        shape = (batch, self.num_kv_heads, capacity, self.head_dim)
        return KVCache.empty(shape, like=self.out_proj.weight)

    def static_cache(self, key: torch.Tensor, value: torch.Tensor | None = None) -> KVCache:
        """Keys and values of ``key``/``value`` ``(batch, n_k, kdim|vdim)`` (batch-first), projected once: the
        cross-attention cache of the encoder's output. ``value`` defaults to ``key``. At the edges: ``n_k = 0``
        gives a cache of length 0 (every query then gets a zero attention output)."""
        value = key if value is None else value
        for name, t, width in (("key", key, self.kdim), ("value", value, self.vdim)):
            check_input(name, t, width, (3,), "(batch, n_k, features)", self.out_proj.weight)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must have the same (batch, n_k), got key {tuple(key.shape)} and value "
                             f"{tuple(value.shape)}")
        k, v = self._project_kv(key, value)
        return KVCache(k, v, length=k.shape[2], static=True)

    # ------------------------------------------------------------------------------------------ the core
    def _in_biases(self) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        if self.in_proj_bias is None:
            return None, None, None
        return tuple(self.in_proj_bias.split([self.embed_dim, self.kv_dim, self.kv_dim]))  # type: ignore[return-value]

    def _project_q(self, query: torch.Tensor) -> torch.Tensor:
        """``(batch, n_q, embed_dim) → (batch, h, n_q, d_k)``: Q = X W^Q, cut into heads."""
        return _split(F.linear(query, self.in_projections()[0], self._in_biases()[0]), self.num_heads)

    def _project_kv(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K = X W^K and V = X W^V cut into heads, ``(batch, h_kv, n_k, d_k)`` each; one product if key is value."""
        if key is value and self.in_proj_weight is not None:
            bias = None if self.in_proj_bias is None else self.in_proj_bias[self.embed_dim :]
            k, v = F.linear(key, self.in_proj_weight[self.embed_dim :], bias).chunk(2, dim=-1)
        else:
            (_, w_k, w_v), (_, b_k, b_v) = self.in_projections(), self._in_biases()
            k, v = F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        return _split(k, self.num_kv_heads), _split(v, self.num_kv_heads)

    def _project(self, query, key, value) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of every head; self-attention (one input three times) projects with one matrix product."""
        if key is query and value is query and self.in_proj_weight is not None:
            q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).split(
                [self.embed_dim, self.kv_dim, self.kv_dim], dim=-1)
            return _split(q, self.num_heads), _split(k, self.num_kv_heads), _split(v, self.num_kv_heads)
        return (self._project_q(query), *self._project_kv(key, value))

    def attend(self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None, *,
               key_mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None, is_causal: bool = False,
               need_weights: bool = True, cache: KVCache | None = None) -> AttentionOutput:
        """The paper's computation on batch-first tensors, :meth:`forward` without its layouts: ``query``
        ``(batch, n_q, embed_dim)``, ``key``/``value`` ``(batch, n_k, kdim|vdim)``; per-head weights or None."""
        check_flag("need_weights", need_weights)
        check_call(self, query, key, value, cache, key_mask, attn_mask, is_causal, batch_first=True, ndims=(3,))
        return self._attend(query, key, value, key_mask, attn_mask, is_causal, need_weights, cache)

    def _attend(self, query, key, value, key_mask, attn_mask, is_causal, need_weights, cache) -> AttentionOutput:
        static = cache is not None and cache.static
        start = 0 if cache is None or static else cache.length
        if static:
            q, k, v = self._project_q(query), cache.keys, cache.values
        else:
            q, k, v = self._project(query, key, value)
        if self.rotary is not None:
            q, k = (_rotate(self.rotary, name, t, start) for name, t in (("queries", q), ("keys", k)))
        n_k = start + k.shape[2]  # with a cache that grows, the cached keys and the new ones
        # Causal on absolute positions; with a cache the new queries come last (lower-right: one alone sees every key).
        aligned = "upper_left" if cache is None else ("lower_right" if q.shape[2] > 1 else None)
        causal = aligned if is_causal and q.shape[2] and n_k else None  # no query or no key: nothing to mask
        # Every check before the cache is written: a refused call leaves it as it was.
        mask = masks.attention_mask(q.shape[0], self.num_heads, q.shape[2], n_k, key_mask=key_mask,
                                    attn_mask=attn_mask, causal=causal, device=q.device)
        if cache is not None and not static:
            k, v = cache.append(k, v)
        p_drop = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = _attention_with_weights(q, k, v, mask, p_drop)
        else:
            weights = None
            only_causal = causal == "upper_left" and attn_mask is None and key_mask is None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if only_causal else mask, dropout_p=p_drop,
                                                 is_causal=only_causal, enable_gqa=k.shape[1] != q.shape[1])
            if mask is not None and not only_causal:
                out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # no allowed key: zeros, never NaN
        return AttentionOutput(self.out_proj(_merge(out)), weights)

    def forward(self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None, *,
                key_mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None, need_weights: bool = True,
                average_attn_weights: bool = True, is_causal: bool = False,
                cache: KVCache | None = None) -> AttentionOutput:
        """Attend from ``query`` to ``key``/``value``; pass one tensor three times for self-attention. Layouts,
        masks, the cache and the edge cases: the class docstring ("Calling it"). Returns
        :class:`~attention_course.attention.AttentionOutput` ``(output, weights)``: the output in the query's
        layout; the weights averaged over heads (``average_attn_weights``) or per head, or None."""
        check_flag("need_weights", need_weights)
        check_flag("average_attn_weights", average_attn_weights)
        batched = check_call(self, query, key, value, cache, key_mask, attn_mask, is_causal, self.batch_first, (2, 3))
        if not batched:  # (n, features): a batch of one
            query, key, value = (None if t is None else t.unsqueeze(0) for t in (query, key, value))
            key_mask = key_mask.unsqueeze(0) if isinstance(key_mask, torch.Tensor) else key_mask
        elif not self.batch_first:  # (n, batch, features) → (batch, n, features)
            query, key, value = (None if t is None else t.transpose(0, 1) for t in (query, key, value))
        out, weights = self._attend(query, key, value, key_mask, attn_mask, is_causal, need_weights, cache)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            return AttentionOutput(out.squeeze(0), None if weights is None else weights.squeeze(0))
        return AttentionOutput(out if self.batch_first else out.transpose(0, 1), weights)

def _rotate(rotary: RotaryHook, name: str, x: torch.Tensor, start: int) -> torch.Tensor:
    """Queries or keys ``x`` ``(batch, heads, n, d_k)`` rotated by ``rotary`` to their positions from ``start``."""
    out = rotary(x, positions=torch.arange(start, start + x.shape[2], device=x.device))
    if not isinstance(out, torch.Tensor) or out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"rotary must return {name} of shape {tuple(x.shape)}, {x.dtype}, got {describe(out)}")
    return out


def _attention_with_weights(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, p_drop: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ/√d_k) v and the weights; ``q`` is ``(batch, h, n_q, d)``, ``k`` and ``v`` ``(batch, h_kv, n_k, d)``.

    Chapter 1's :func:`~attention_course.attention.scaled_dot_product_attention`, run with PyTorch's fused softmax
    (tested equal). The ``h / h_kv`` query heads of a group are stacked on a new axis and broadcast against
    their shared key/value head, so nothing is copied. A fully masked row gets zero weights.
    """
    batch, h, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    if h_kv != h:
        q = q.reshape(batch, h_kv, h // h_kv, n_q, d)  # group g of query heads shares key/value head g
        k, v = k.unsqueeze(2), v.unsqueeze(2)
    scores = (q * (1.0 / math.sqrt(d))) @ k.transpose(-2, -1)
    if h_kv != h:
        scores = scores.reshape(batch, h, n_q, n_k)
    if mask is not None:  # the most negative finite number, not -inf: a fully masked row stays finite ...
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    low = scores.dtype in (torch.float16, torch.bfloat16)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32 if low else None).to(scores.dtype)
    if mask is not None:  # ... and is set to zero here
        weights = weights.masked_fill(~mask, 0.0)
    dropped = F.dropout(weights, p_drop) if p_drop > 0 else weights
    if h_kv != h:
        out = dropped.reshape(batch, h_kv, h // h_kv, n_q, n_k) @ v
        return out.reshape(batch, h, n_q, d), weights
    return dropped @ v, weights
