"""Multi-head attention, with grouped-query attention, a rotary-position hook and the KV cache (chapters 4–7).

Notation (the paper's, row vectors): head ``i`` computes ``Attention(X W_i^Q, X W_i^K, X W_i^V)``, where ``W_i^Q``
is the ``i``-th block of ``d_k`` *columns* of one ``d_model × d_model`` matrix ``W^Q``. So the module computes the
big product ``X W^Q`` once and cuts it into heads with :func:`split_heads` (chapter 4 proves the two equal), and
joins the heads' outputs with :func:`merge_heads` before ``W^O``.

The parameters have :class:`torch.nn.MultiheadAttention`'s names and layout (``in_proj_weight`` stacks the three
projections in PyTorch's ``(out, in)`` orientation; ``out_proj``), so :mod:`attention_course.interop` converts
between the two. Masks follow the package convention of :mod:`attention_course.masks` (boolean, True = may attend),
and are keyword-only; a query that may attend to no key gets zero weights and a zero attention output.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import masks
from .attention import AttentionOutput

__all__ = ["KVCache", "MultiHeadAttention", "merge_heads", "split_heads"]

#: ``rotary(x, positions=p)``: rotates queries or keys ``(batch, heads, n, d_k)`` by their positions ``p`` ``(n,)``,
#: e.g. :func:`attention_course.positional.apply_rope`.
RotaryHook = Callable[..., torch.Tensor]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(batch, n, num_heads·d_k) → (batch, num_heads, n, d_k)``: the column blocks of a fused projection.

    Block ``i`` of ``d_k`` columns of ``X W^Q`` is head ``i``'s ``X W_i^Q`` (chapter 4, §4.5). Returns a view.
    """
    if x.ndim != 3 or x.shape[-1] % num_heads:
        raise ValueError(f"x must be (batch, n, num_heads·d_k) with the last dimension divisible by "
                         f"num_heads={num_heads}, got shape {tuple(x.shape)}")
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(batch, num_heads, n, d_k) → (batch, n, num_heads·d_k)``: Concat(head_1, …, head_h), the inverse of
    :func:`split_heads`."""
    if x.ndim != 4:
        raise ValueError(f"x must be (batch, num_heads, n, d_k), got shape {tuple(x.shape)}")
    return x.transpose(1, 2).flatten(2)


@dataclass
class KVCache:
    """One attention layer's projected keys and values, kept between calls (chapter 5; timed in chapter 6).

    Self-attention appends each call's new keys and values (:meth:`MultiHeadAttention.new_cache`); a *static*
    cache holds keys and values projected once, e.g. the encoder's output in cross-attention
    (:meth:`MultiHeadAttention.static_cache`).

    Attributes:
        keys, values: ``(batch, num_kv_heads, capacity, d_k)``, filled up to ``length``.
        length: positions held.
        static: True for keys and values that are never appended to.
    """

    keys: torch.Tensor
    values: torch.Tensor
    length: int = 0
    static: bool = False

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values in use (preallocated room not counted)."""
        return 2 * self.keys[:, :, : self.length].numel() * self.keys.element_size()

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k``, ``v`` ``(batch, num_kv_heads, n_new, d_k)`` after the cached positions; return all of them."""
        if self.static:
            raise ValueError("a static cache (keys and values projected once) cannot be appended to")
        if k.shape[:2] != self.keys.shape[:2] or k.shape[3] != self.keys.shape[3] or k.dtype != self.keys.dtype:
            raise ValueError(f"new keys {tuple(k.shape)} {k.dtype} do not fit a cache of "
                             f"{tuple(self.keys.shape)} {self.keys.dtype} (batch, num_kv_heads, capacity, d_k)")
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions; {self.length} are used and "
                             f"{k.shape[2]} more were given")
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention :math:`\operatorname{Concat}(\text{head}_1,\dots,\text{head}_h)\,W^O` (chapter 4).

    Args:
        embed_dim: :math:`d_\text{model}`, the width of queries and of the output.
        num_heads: :math:`h`; must divide ``embed_dim``; each head has :math:`d_k = d_v = d_\text{model}/h`.
        dropout: dropout probability on the attention weights (training mode only).
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
        self.embed_dim = _positive_int("embed_dim", embed_dim)
        self.num_heads = _positive_int("num_heads", num_heads)
        self.num_kv_heads = _positive_int("num_kv_heads", num_heads if num_kv_heads is None else num_kv_heads)
        self.kdim = _positive_int("kdim", embed_dim if kdim is None else kdim)
        self.vdim = _positive_int("vdim", embed_dim if vdim is None else vdim)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads} (d_k = embed_dim/h)")
        if num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={self.num_kv_heads}")
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        if rotary is not None and not callable(rotary):
            raise TypeError(f"rotary must be a callable rotary(x, positions=p), got {type(rotary).__name__}")
        self.head_dim = embed_dim // num_heads
        self.kv_dim = self.num_kv_heads * self.head_dim
        self.dropout, self.batch_first, self.rotary = float(dropout), bool(batch_first), rotary
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
        """An empty cache for ``capacity`` positions of self-attention (keys and values in the parameters' dtype)."""
        batch, capacity = _positive_int("batch", batch), _positive_int("capacity", capacity)
        shape = (batch, self.num_kv_heads, capacity, self.head_dim)
        w = self.out_proj.weight
        return KVCache(w.new_empty(shape), w.new_empty(shape))

    def static_cache(self, key: torch.Tensor, value: torch.Tensor | None = None) -> KVCache:
        """Keys and values of ``key``/``value`` ``(batch, n_k, kdim)`` (batch-first), projected once: the
        cross-attention cache of the encoder's output. ``value`` defaults to ``key``."""
        value = key if value is None else value
        for name, t in (("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor) or t.ndim != 3:
                got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must be a batch-first (batch, n_k, features) tensor, got {got}")
        k, v = self._project_kv(key, value)
        return KVCache(k, v, length=k.shape[2], static=True)

    # ------------------------------------------------------------------------------------------ the core
    def _in_biases(self) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        if self.in_proj_bias is None:
            return None, None, None
        return tuple(self.in_proj_bias.split([self.embed_dim, self.kv_dim, self.kv_dim]))  # type: ignore[return-value]

    def _project_q(self, query: torch.Tensor) -> torch.Tensor:
        """``(batch, n_q, embed_dim) → (batch, h, n_q, d_k)``: Q = X W^Q, cut into heads."""
        return split_heads(F.linear(query, self.in_projections()[0], self._in_biases()[0]), self.num_heads)

    def _project_kv(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K = X W^K and V = X W^V cut into heads, ``(batch, h_kv, n_k, d_k)`` each; one product if key is value."""
        if key is value and self.in_proj_weight is not None:
            bias = None if self.in_proj_bias is None else self.in_proj_bias[self.embed_dim :]
            k, v = F.linear(key, self.in_proj_weight[self.embed_dim :], bias).chunk(2, dim=-1)
        else:
            (_, w_k, w_v), (_, b_k, b_v) = self.in_projections(), self._in_biases()
            k, v = F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        return split_heads(k, self.num_kv_heads), split_heads(v, self.num_kv_heads)

    def _project(self, query, key, value) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of every head; self-attention (one input three times) projects with one matrix product."""
        if key is query and value is query and self.in_proj_weight is not None:
            q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).split(
                [self.embed_dim, self.kv_dim, self.kv_dim], dim=-1)
            return split_heads(q, self.num_heads), split_heads(k, self.num_kv_heads), split_heads(v, self.num_kv_heads)
        return (self._project_q(query), *self._project_kv(key, value))

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor | None,
        *,
        key_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        cache: KVCache | None = None,
    ) -> AttentionOutput:
        """The paper's computation on batch-first tensors; :meth:`forward` adapts other layouts to it.

        ``query`` ``(batch, n_q, embed_dim)``, ``key``/``value`` ``(batch, n_k, kdim|vdim)`` (None with a static
        cache). Returns the output ``(batch, n_q, embed_dim)`` and per-head weights ``(batch, h, n_q, n_k)`` or None.
        """
        static = cache is not None and cache.static
        if static and (is_causal or self.rotary is not None):
            # A static cache holds keys without positions (an encoder's output): causality and rotary positions
            # between a decoder's queries and those keys mean nothing.
            raise ValueError("is_causal and a rotary hook need positions shared by queries and keys; a static "
                             "cache (cross-attention keys and values) has none")
        if cache is not None and cache.keys.shape[0] != query.shape[0]:
            raise ValueError(f"the cache holds batch {cache.keys.shape[0]}, the query has batch {query.shape[0]}")
        start = 0 if cache is None or static else cache.length
        if static:
            q, k, v = self._project_q(query), cache.keys, cache.values
        else:
            q, k, v = self._project(query, key, value)
        if self.rotary is not None:
            q = self.rotary(q, positions=torch.arange(start, start + q.shape[2], device=q.device))
            k = self.rotary(k, positions=torch.arange(start, start + k.shape[2], device=k.device))
        n_k = start + k.shape[2]  # with a cache that grows, the cached keys and the new ones
        # Causal on absolute positions: with a cache the new queries are the last ones (lower-right aligned).
        causal = None if not is_causal else ("lower_right" if cache is not None else "upper_left")
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
        return AttentionOutput(self.out_proj(merge_heads(out)), weights)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor | None,
        *,
        key_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        cache: KVCache | None = None,
    ) -> AttentionOutput:
        """Attend from ``query`` to ``key``/``value``; pass the same tensor three times for self-attention.

        Args:
            query: ``(batch, n_q, embed_dim)`` if ``batch_first`` else ``(n_q, batch, embed_dim)``, or
                ``(n_q, embed_dim)`` unbatched.
            key, value: ``(batch, n_k, kdim|vdim)`` in the same layout; None with a static ``cache``.
            key_mask: boolean ``(batch, n_k)`` (``(n_k,)`` unbatched), **True = a real key**; with a cache ``n_k``
                counts the cached keys and the new ones.
            attn_mask: boolean ``(n_q, n_k)`` or ``(batch|1, num_heads|1, n_q, n_k)``, **True = may attend**.
            need_weights: also return the weights; if False, run PyTorch's fused kernel and return None for them.
            average_attn_weights: average the returned weights over heads (else per head).
            is_causal: add the causal mask: a query at position ``p`` sees keys at positions ``≤ p``. Without a cache
                queries and keys both start at 0 (``"upper_left"``, as PyTorch's ``is_causal``); with one the new
                queries follow the cached keys (``"lower_right"``), see :mod:`attention_course.masks`.
            cache: a :class:`KVCache`: the new keys and values are appended to it and all of them attended to; or,
                static, the keys and values to use (then without ``is_causal`` or a rotary hook: those keys have
                no positions). A call that raises leaves the cache unchanged.

        Returns:
            :class:`~attention_course.attention.AttentionOutput` ``(output, weights)``: output in the query's layout;
            weights ``(batch, n_q, n_k)`` averaged or ``(batch, num_heads, n_q, n_k)`` (no batch dimension when
            unbatched), or None.
        """
        batched = self._check_inputs(query, key, value, cache)
        if not batched:
            query, key, value = (None if t is None else t.unsqueeze(0) for t in (query, key, value))
            key_mask = None if key_mask is None else key_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = (None if t is None else t.transpose(0, 1) for t in (query, key, value))
        out, weights = self.attend(query, key, value, key_mask=key_mask, attn_mask=attn_mask, is_causal=is_causal,
                                   need_weights=need_weights, cache=cache)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            return AttentionOutput(out.squeeze(0), None if weights is None else weights.squeeze(0))
        return AttentionOutput(out if self.batch_first else out.transpose(0, 1), weights)

    def _check_inputs(self, query, key, value, cache) -> bool:
        """Validate kinds, shapes and dtypes; return whether the input is batched."""
        static = cache is not None and cache.static
        named = [("query", query, self.embed_dim)] + ([] if static else [("key", key, self.kdim),
                                                                          ("value", value, self.vdim)])
        dtype = self.out_proj.weight.dtype
        layout = "(batch, n, features)" if self.batch_first else "(n, batch, features)"
        for name, t, width in named:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch tensor, got {type(t).__name__}")
            if not t.is_floating_point():
                raise TypeError(f"{name} must have a floating-point dtype, got {t.dtype}")
            if t.dtype != dtype:
                raise TypeError(f"{name} must have the parameters' dtype {dtype}, got {t.dtype}")
            if t.ndim not in (2, 3) or t.ndim != query.ndim or t.shape[-1] != width:
                raise ValueError(f"query, key and value must all be 3-D {layout} or all 2-D (n, features); {name} "
                                 f"needs {width} features, got shape {tuple(t.shape)}")
        if static and (key is not None or value is not None):
            raise ValueError("with a static cache the keys and values come from the cache: pass key=value=None")
        if not static:
            seq, b = (1, 0) if self.batch_first and query.ndim == 3 else (0, 1)
            if key.shape[seq] != value.shape[seq]:
                raise ValueError(f"key and value must have the same length n_k, got key {tuple(key.shape)} and "
                                 f"value {tuple(value.shape)} in layout {layout}")
            if query.ndim == 3 and not query.shape[b] == key.shape[b] == value.shape[b]:
                raise ValueError(f"query, key and value must share the batch size in layout {layout}, got "
                                 f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        return query.ndim == 3


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
