"""The full encoder–decoder Transformer of Vaswani et al. (2017), built from the package's attention (chapter 5).

Structure and parameter names mirror :class:`torch.nn.Transformer` and its layers exactly (``encoder.layers.0.
self_attn.in_proj_weight``, ``linear1``, ``norm1``, …), so ``from_torch`` copies a PyTorch model's weights with
``load_state_dict`` and the tests compare the two numerically. The attention inside every layer is chapter 4's
:class:`~attention_course.multihead.MultiHeadAttention`.

Differences from PyTorch, all deliberate:

* **Masks follow the package convention: boolean, True = may attend** (see :mod:`attention_course.masks`).
  Padding is given as *key masks* ``(batch, n)``, True = a real token (``src_key_mask``, ``tgt_key_mask``,
  ``memory_key_mask``; PyTorch's ``*_key_padding_mask`` are their negation). ``tgt_is_causal=True`` *applies*
  the causal mask (in PyTorch it is only a hint about ``tgt_mask``). A query with no allowed key gives zeros,
  never NaN. All masks are keyword-only.
* Every layer can return its attention weights per head (``attn_weights=`` lists, the explicit path);
  otherwise attention runs through PyTorch's fused ``F.scaled_dot_product_attention``.

The sequence-to-sequence model :class:`Seq2SeqTransformer` adds what the paper adds around the core: token
embeddings multiplied by :math:`\\sqrt{d_\\text{model}}`, sinusoidal positions, an output projection tied to the
embeddings, and incremental decoding with a key/value cache (:func:`greedy_decode`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .masks import causal_mask
from .multihead import MultiHeadAttention
from .positional import SinusoidalPositionalEncoding

__all__ = [
    "AttentionMaps",
    "KVCache",
    "Seq2SeqTransformer",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "greedy_decode",
    "param_count",
]

Activation = str | Callable[[torch.Tensor], torch.Tensor]


def _activation(activation: Activation) -> Callable[[torch.Tensor], torch.Tensor]:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise ValueError(f"activation must be 'relu', 'gelu' or a callable, got {activation!r}")


def _check_seq(name: str, x: torch.Tensor, d_model: int, batch_first: bool) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name} must be a floating-point tensor, got {got}")
    layout = "(batch, n, d_model)" if batch_first else "(n, batch, d_model)"
    if x.ndim not in (2, 3) or x.shape[-1] != d_model:
        raise ValueError(f"{name} must have shape {layout} or (n, d_model) with d_model={d_model}, "
                         f"got {tuple(x.shape)}")


# ------------------------------------------------------------------------------------------------------ layers
class TransformerEncoderLayer(nn.Module):
    r"""One encoder layer: self-attention, then a position-wise feed-forward network, each wrapped in a residual
    connection and layer normalisation (chapter 5).

    Post-LN (``norm_first=False``, the paper): ``x = LN(x + SelfAttn(x))``, ``x = LN(x + FFN(x))``.
    Pre-LN (``norm_first=True``): ``x = x + SelfAttn(LN(x))``, ``x = x + FFN(LN(x))`` — the residual stream is
    never normalised, which keeps gradients well-scaled in deep stacks and trains without warm-up more easily.
    ``FFN(x) = W_2 act(W_1 x + b_1) + b_2``.

    Same constructor and parameter names as :class:`torch.nn.TransformerEncoderLayer` (``self_attn``,
    ``linear1``, ``linear2``, ``norm1``, ``norm2``); see :meth:`from_torch`.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            **factory)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = bool(norm_first)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _activation(activation)
        self.d_model, self.batch_first = d_model, bool(batch_first)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> TransformerEncoderLayer:
        """A copy of a ``torch.nn.TransformerEncoderLayer`` (settings and weights; same device and dtype).

        Raises:
            TypeError: ``layer`` is not an ``nn.TransformerEncoderLayer``.
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(f"from_torch expects a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}")
        w = layer.linear1.weight
        new = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features,
                  layer.dropout.p, layer.activation, layer.norm1.eps, layer.self_attn.batch_first,
                  layer.norm_first, layer.linear1.bias is not None, device=w.device, dtype=w.dtype)
        new.load_state_dict(layer.state_dict())
        return new

    def _sa_block(self, x, attn_mask, key_mask, is_causal, weights):
        need = weights is not None
        out, w = self.self_attn(x, x, x, attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal,
                                need_weights=need, average_attn_weights=False)
        if need:
            weights.append(w)
        return self.dropout1(out)

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(
        self,
        src: torch.Tensor,
        *,
        src_mask: torch.Tensor | None = None,
        src_key_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        attn_weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Encode ``src``.

        Args:
            src: ``(batch, n, d_model)`` if ``batch_first`` else ``(n, batch, d_model)``; or ``(n, d_model)``.
            src_mask: boolean ``(n, n)`` or ``(batch|1, nhead|1, n, n)``, True = may attend.
            src_key_mask: boolean ``(batch, n)``, True = a real token (PyTorch's ``~src_key_padding_mask``).
            is_causal: also apply the causal mask.
            attn_weights: if a list, the per-head weights ``(batch, nhead, n, n)`` are appended to it
                (explicit attention path).

        Returns:
            A tensor of ``src``'s shape.
        """
        _check_seq("src", src, self.d_model, self.batch_first)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_mask, is_causal, attn_weights)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_mask, is_causal, attn_weights))
            x = self.norm2(x + self._ff_block(x))
        return x


@dataclass
class _LayerCache:
    """One decoder layer's cache: self-attention keys/values ``(batch, h, capacity, d_k)`` filled up to
    ``length``, and cross-attention keys/values of the memory ``(batch, h, n_src, d_k)``."""

    self_k: torch.Tensor
    self_v: torch.Tensor
    cross_k: torch.Tensor
    cross_v: torch.Tensor


@dataclass
class KVCache:
    """The state of incremental decoding (chapter 5; timed in chapter 6).

    Attributes:
        layers: one cache per decoder layer: the keys and values of every target position decoded so far
            (preallocated for ``capacity`` positions) and the keys and values of the encoder memory, projected
            once.
        memory_key_mask: ``(batch, 1, 1, n_src)`` boolean (True = real source token), or None.
        length: how many target positions are cached.
        capacity: the most target positions the cache can hold.
    """

    layers: list[_LayerCache] = field(default_factory=list)
    memory_key_mask: torch.Tensor | None = None
    length: int = 0
    capacity: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values in use: the ``length`` cached target positions of every decoder layer's
        self-attention plus the projected memory of every cross-attention (preallocated room not counted)."""
        total = 0
        for lc in self.layers:
            total += 2 * lc.self_k[:, :, : self.length].numel() * lc.self_k.element_size()
            total += (lc.cross_k.numel() + lc.cross_v.numel()) * lc.cross_k.element_size()
        return total


def _proj(mha: MultiHeadAttention, x: torch.Tensor, which: slice) -> torch.Tensor:
    """Project batch-first ``x`` with rows ``which`` of the fused in-projection and split heads:
    ``(batch, n, d_model) -> (batch, h, n, d_k)`` (several blocks stacked on the last-but-one axis)."""
    w_q, w_k, w_v = mha.in_projections()
    b = mha._projection_biases()
    w = torch.cat([w_q, w_k, w_v])[which] if mha.in_proj_weight is None else mha.in_proj_weight[which]
    bias = None if b[0] is None else mha.in_proj_bias[which]
    return F.linear(x, w, bias)


def _heads(x: torch.Tensor, h: int) -> torch.Tensor:
    return x.unflatten(-1, (h, -1)).transpose(1, 2)


class TransformerDecoderLayer(nn.Module):
    r"""One decoder layer: causal self-attention, cross-attention to the encoder's output (the *memory*), and a
    feed-forward network, each with a residual connection and layer normalisation (chapter 5).

    In the cross-attention the **queries come from the decoder** (this layer's input) and the **keys and values
    from the encoder** (the memory). Post-LN by default (the paper); ``norm_first=True`` for pre-LN.
    Same constructor and parameter names as :class:`torch.nn.TransformerDecoderLayer` (``self_attn``,
    ``multihead_attn``, ``linear1``, ``linear2``, ``norm1``–``norm3``); see :meth:`from_torch`.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            **factory)
        self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **factory)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = bool(norm_first)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.activation = _activation(activation)
        self.d_model, self.batch_first = d_model, bool(batch_first)

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> TransformerDecoderLayer:
        """A copy of a ``torch.nn.TransformerDecoderLayer`` (settings and weights; same device and dtype).

        Raises:
            TypeError: ``layer`` is not an ``nn.TransformerDecoderLayer``.
        """
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(f"from_torch expects a torch.nn.TransformerDecoderLayer, got {type(layer).__name__}")
        w = layer.linear1.weight
        new = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features,
                  layer.dropout.p, layer.activation, layer.norm1.eps, layer.self_attn.batch_first,
                  layer.norm_first, layer.linear1.bias is not None, device=w.device, dtype=w.dtype)
        new.load_state_dict(layer.state_dict())
        return new

    # ------------------------------------------------------------------------------------------ sub-blocks
    def _sa_block(self, x, attn_mask, key_mask, is_causal, weights):
        need = weights is not None
        out, w = self.self_attn(x, x, x, attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal,
                                need_weights=need, average_attn_weights=False)
        if need:
            weights.append(w)
        return self.dropout1(out)

    def _mha_block(self, x, mem, attn_mask, key_mask, weights):
        need = weights is not None
        out, w = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_mask=key_mask, need_weights=need,
                                     average_attn_weights=False)
        if need:
            weights.append(w)
        return self.dropout2(out)

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        *,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
        memory_key_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = False,
        self_weights: list[torch.Tensor] | None = None,
        cross_weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Decode ``tgt`` attending to ``memory``.

        Args:
            tgt: ``(batch, n_tgt, d_model)`` if ``batch_first`` else ``(n_tgt, batch, d_model)``.
            memory: the encoder's output, ``(batch, n_src, d_model)`` / ``(n_src, batch, d_model)``.
            tgt_mask: boolean ``(n_tgt, n_tgt)`` (or 4-D), True = may attend, e.g. :func:`~attention_course.
                masks.causal_mask`.
            memory_mask: boolean ``(n_tgt, n_src)`` (or 4-D) for the cross-attention.
            tgt_key_mask, memory_key_mask: boolean ``(batch, n_tgt)``, ``(batch, n_src)``; True = real token.
            tgt_is_causal: apply the causal mask in the self-attention (no ``tgt_mask`` needed).
            self_weights, cross_weights: lists to append the per-head attention weights to
                (``(batch, nhead, n_tgt, n_tgt)`` and ``(batch, nhead, n_tgt, n_src)``).

        Returns:
            A tensor of ``tgt``'s shape.
        """
        _check_seq("tgt", tgt, self.d_model, self.batch_first)
        _check_seq("memory", memory, self.d_model, self.batch_first)
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_mask, tgt_is_causal, self_weights)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_mask, cross_weights)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_mask, tgt_is_causal, self_weights))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_mask, cross_weights))
            x = self.norm3(x + self._ff_block(x))
        return x

    # -------------------------------------------------------------------------------- incremental decoding
    def _new_cache(self, memory: torch.Tensor, capacity: int) -> _LayerCache:
        """Project the (batch-first) memory's keys and values once; allocate the self-attention cache."""
        mha = self.multihead_attn
        d = mha.embed_dim
        kv = _proj(mha, memory, slice(d, None))
        cross_k, cross_v = (_heads(t, mha.num_heads) for t in kv.split([d, d], dim=-1))
        batch, h, dk = memory.shape[0], self.self_attn.num_heads, self.self_attn.head_dim
        empty = memory.new_empty(batch, h, capacity, dk)
        return _LayerCache(empty, torch.empty_like(empty), cross_k, cross_v)

    def _cached_self_attention(self, x: torch.Tensor, cache: _LayerCache, start: int) -> torch.Tensor:
        mha = self.self_attn
        q, k, v = (_heads(t, mha.num_heads) for t in _proj(mha, x, slice(None)).split(mha.embed_dim, dim=-1))
        n_new = x.shape[1]
        end = start + n_new
        cache.self_k[:, :, start:end] = k
        cache.self_v[:, :, start:end] = v
        mask = None if n_new == 1 else causal_mask(n_new, end, alignment="lower_right", device=x.device)
        out = F.scaled_dot_product_attention(q, cache.self_k[:, :, :end], cache.self_v[:, :, :end],
                                             attn_mask=mask)
        return mha.out_proj(out.transpose(1, 2).flatten(2))

    def _cached_cross_attention(self, x: torch.Tensor, cache: _LayerCache, mem_mask: torch.Tensor | None):
        mha = self.multihead_attn
        q = _heads(_proj(mha, x, slice(0, mha.embed_dim)), mha.num_heads)
        out = F.scaled_dot_product_attention(q, cache.cross_k, cache.cross_v, attn_mask=mem_mask)
        if mem_mask is not None:
            out = out.masked_fill(~mem_mask.any(dim=-1, keepdim=True), 0.0)
        return mha.out_proj(out.transpose(1, 2).flatten(2))

    def forward_step(self, x: torch.Tensor, cache: _LayerCache, start: int, mem_mask: torch.Tensor | None):
        """``forward`` for the new positions ``start, …`` only, batch-first ``(batch, n_new, d_model)``, reading
        and extending ``cache`` (eval mode: no dropout)."""
        if self.norm_first:
            x = x + self._cached_self_attention(self.norm1(x), cache, start)
            x = x + self._cached_cross_attention(self.norm2(x), cache, mem_mask)
            x = x + self.linear2(self.activation(self.linear1(self.norm3(x))))
        else:
            x = self.norm1(x + self._cached_self_attention(x, cache, start))
            x = self.norm2(x + self._cached_cross_attention(x, cache, mem_mask))
            x = self.norm3(x + self.linear2(self.activation(self.linear1(x))))
        return x


# ------------------------------------------------------------------------------------------------------ stacks
class TransformerEncoder(nn.Module):
    """A stack of ``num_layers`` copies of ``encoder_layer`` and an optional final ``norm`` (chapter 5).

    As :class:`torch.nn.TransformerEncoder`: the layers are deep copies of the one given (identical until
    re-initialised), in ``self.layers``.
    """

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: nn.Module | None = None):
        super().__init__()
        if not isinstance(encoder_layer, TransformerEncoderLayer):
            raise TypeError(f"encoder_layer must be a TransformerEncoderLayer, got {type(encoder_layer).__name__}")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
        self.layers = nn.ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        src: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        src_key_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        attn_weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run every layer (arguments as :meth:`TransformerEncoderLayer.forward`), then ``norm``."""
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_mask=src_key_mask, is_causal=is_causal, attn_weights=attn_weights)
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(nn.Module):
    """A stack of ``num_layers`` copies of ``decoder_layer`` and an optional final ``norm`` (chapter 5)."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: nn.Module | None = None):
        super().__init__()
        if not isinstance(decoder_layer, TransformerDecoderLayer):
            raise TypeError(f"decoder_layer must be a TransformerDecoderLayer, got {type(decoder_layer).__name__}")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
        self.layers = nn.ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        *,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
        memory_key_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = False,
        self_weights: list[torch.Tensor] | None = None,
        cross_weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run every layer (arguments as :meth:`TransformerDecoderLayer.forward`), then ``norm``."""
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_mask=tgt_key_mask,
                      memory_key_mask=memory_key_mask, tgt_is_causal=tgt_is_causal, self_weights=self_weights,
                      cross_weights=cross_weights)
        return x if self.norm is None else self.norm(x)


@dataclass
class AttentionMaps:
    """Per-head attention weights of every layer, from :meth:`Seq2SeqTransformer.attention_maps`.

    Attributes:
        encoder: per encoder layer, ``(batch, nhead, n_src, n_src)``.
        decoder_self: per decoder layer, ``(batch, nhead, n_tgt, n_tgt)`` (causal: zero above the diagonal).
        cross: per decoder layer, ``(batch, nhead, n_tgt, n_src)``: decoder queries, encoder keys.
    """

    encoder: list[torch.Tensor] = field(default_factory=list)
    decoder_self: list[torch.Tensor] = field(default_factory=list)
    cross: list[torch.Tensor] = field(default_factory=list)


class Transformer(nn.Module):
    """The encoder–decoder core of Vaswani et al. (2017), as :class:`torch.nn.Transformer` (chapter 5).

    Same constructor (without ``custom_encoder``/``custom_decoder``), submodules and parameter names as
    PyTorch's: ``encoder`` (``num_encoder_layers`` layers and a final LayerNorm), ``decoder`` (likewise), so
    :meth:`from_torch` copies a PyTorch model; parameters with more than one dimension are Xavier-uniform
    initialised, as PyTorch does. No embeddings and no output projection (see :class:`Seq2SeqTransformer`).
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        common = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                  bias)
        self.encoder = TransformerEncoder(TransformerEncoderLayer(*common, **factory), num_encoder_layers,
                                          nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        self.decoder = TransformerDecoder(TransformerDecoderLayer(*common, **factory), num_decoder_layers,
                                          nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, bool(batch_first)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    @classmethod
    def from_torch(cls, model: nn.Transformer) -> Transformer:
        """A copy of a ``torch.nn.Transformer`` (settings and weights; same device and dtype).

        Raises:
            TypeError: ``model`` is not an ``nn.Transformer``, or uses custom encoder/decoder classes.
        """
        if not isinstance(model, nn.Transformer):
            raise TypeError(f"from_torch expects a torch.nn.Transformer, got {type(model).__name__}")
        enc, dec = model.encoder.layers, model.decoder.layers
        if not (isinstance(enc[0], nn.TransformerEncoderLayer) and isinstance(dec[0], nn.TransformerDecoderLayer)):
            raise TypeError("from_torch supports nn.Transformer built from nn.TransformerEncoderLayer/DecoderLayer")
        e = enc[0]
        w = e.linear1.weight
        new = cls(model.d_model, model.nhead, len(enc), len(dec), e.linear1.out_features, e.dropout.p,
                  e.activation, e.norm1.eps, model.batch_first, e.norm_first, e.linear1.bias is not None,
                  device=w.device, dtype=w.dtype)
        new.load_state_dict(model.state_dict())
        return new

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        *,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        src_key_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
        memory_key_mask: torch.Tensor | None = None,
        src_is_causal: bool = False,
        tgt_is_causal: bool = False,
        attn_maps: AttentionMaps | None = None,
    ) -> torch.Tensor:
        """Encode ``src``, decode ``tgt`` attending to the encoding.

        Args:
            src: ``(batch, n_src, d_model)`` if ``batch_first`` else ``(n_src, batch, d_model)``.
            tgt: ``(batch, n_tgt, d_model)`` / ``(n_tgt, batch, d_model)``.
            src_mask, tgt_mask, memory_mask: boolean, True = may attend; ``(n_src, n_src)``, ``(n_tgt, n_tgt)``,
                ``(n_tgt, n_src)`` (or 4-D ``(batch|1, nhead|1, n_q, n_k)``).
            src_key_mask, tgt_key_mask, memory_key_mask: boolean ``(batch, n)``, True = real token
                (``memory_key_mask`` is usually ``src_key_mask``).
            src_is_causal, tgt_is_causal: apply the causal mask in the encoder / decoder self-attention.
            attn_maps: an :class:`AttentionMaps` to fill with every layer's per-head weights (explicit path).

        Returns:
            ``(batch, n_tgt, d_model)`` / ``(n_tgt, batch, d_model)``: the decoder's output.

        Raises:
            TypeError, ValueError: inputs or masks of the wrong kind or shape (the messages name both).
        """
        _check_seq("src", src, self.d_model, self.batch_first)
        _check_seq("tgt", tgt, self.d_model, self.batch_first)
        b_dim = 0 if self.batch_first else 1
        if src.ndim != tgt.ndim or (src.ndim == 3 and src.shape[b_dim] != tgt.shape[b_dim]):
            raise ValueError(f"src and tgt must have the same batch size, got src {tuple(src.shape)} and tgt "
                             f"{tuple(tgt.shape)} ({'batch_first' if self.batch_first else 'sequence-first'})")
        memory = self.encoder(src, mask=src_mask, src_key_mask=src_key_mask, is_causal=src_is_causal,
                              attn_weights=None if attn_maps is None else attn_maps.encoder)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_mask=tgt_key_mask,
                            memory_key_mask=memory_key_mask, tgt_is_causal=tgt_is_causal,
                            self_weights=None if attn_maps is None else attn_maps.decoder_self,
                            cross_weights=None if attn_maps is None else attn_maps.cross)


# ------------------------------------------------------------------------------------------ the whole model
def param_count(model: nn.Module) -> int:
    """Number of distinct parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters())


class Seq2SeqTransformer(nn.Module):
    r"""A complete sequence-to-sequence Transformer: tokens in, next-token logits out (chapter 5).

    ``logits = Generator(Decoder(Emb(tgt)·√d_model + PE, Encoder(Emb(src)·√d_model + PE)))``, with the core
    :class:`Transformer` (``batch_first=True``), sinusoidal positions (dropout applied to their sum, as the
    paper), and the output projection ``generator``.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (``tgt_vocab`` defaults to ``src_vocab``).
        d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, dropout, norm_first,
            activation: as :class:`Transformer`.
        max_len: the longest sequence the positional table covers.
        pad_id: the padding token; when not None, ``forward`` derives the source key mask from it.
        share_embeddings: one embedding matrix for source and target (needs equal vocabularies).
        tie_output: the output projection reuses the target embedding matrix (the paper shares all three).

    The embeddings are initialised with standard deviation :math:`d_\text{model}^{-1/2}`, so that the scaled
    embedding has entries of size about 1, like the positional encoding, and tied output logits start small.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int | None = None,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        max_len: int = 512,
        pad_id: int | None = 0,
        share_embeddings: bool = True,
        tie_output: bool = True,
        norm_first: bool = False,
        activation: Activation = "relu",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        tgt_vocab = src_vocab if tgt_vocab is None else tgt_vocab
        if share_embeddings and tgt_vocab != src_vocab:
            raise ValueError(f"share_embeddings needs src_vocab == tgt_vocab, got {src_vocab} and {tgt_vocab}")
        factory = {"device": device, "dtype": dtype}
        self.d_model, self.pad_id, self.src_vocab, self.tgt_vocab = d_model, pad_id, src_vocab, tgt_vocab
        self.scale = math.sqrt(d_model)
        self.src_embed = nn.Embedding(src_vocab, d_model, **factory)
        self.tgt_embed = self.src_embed if share_embeddings else nn.Embedding(tgt_vocab, d_model, **factory)
        self.positions = SinusoidalPositionalEncoding(d_model, max_len, dropout, **factory)
        self.transformer = Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward,
                                       dropout, activation, batch_first=True, norm_first=norm_first, **factory)
        self.generator = nn.Linear(d_model, tgt_vocab, bias=False, **factory)
        for emb in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            nn.init.normal_(emb.weight, std=d_model**-0.5)
        if tie_output:
            self.generator.weight = self.tgt_embed.weight

    # ------------------------------------------------------------------------------------------- pieces
    def _check_tokens(self, name: str, ids: torch.Tensor, vocab: int) -> None:
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.dtype == torch.bool:
            got = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise TypeError(f"{name} must be an integer tensor of token ids (batch, n), got {got}")
        if ids.ndim != 2:
            raise ValueError(f"{name} must have shape (batch, n), got {tuple(ids.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise ValueError(f"{name} ids must lie in [0, {vocab}), got range [{int(ids.min())}, {int(ids.max())}]")

    def src_key_mask_for(self, src: torch.Tensor) -> torch.Tensor | None:
        """``src != pad_id`` (True = real token), or None when the model has no ``pad_id``."""
        return None if self.pad_id is None else src != self.pad_id

    def embed_src(self, src: torch.Tensor) -> torch.Tensor:
        """``(batch, n) ids -> (batch, n, d_model)``: ``Emb(src)·√d_model + PE`` (then dropout)."""
        return self.positions(self.src_embed(src) * self.scale)

    def embed_tgt(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """As :meth:`embed_src` for target ids at positions ``offset, offset + 1, …``."""
        return self.positions(self.tgt_embed(tgt) * self.scale, offset)

    def encode(self, src: torch.Tensor, src_key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's output (the *memory*) ``(batch, n_src, d_model)`` for source ids ``(batch, n_src)``.
        ``src_key_mask`` (True = real token) defaults to ``src != pad_id``."""
        self._check_tokens("src", src, self.src_vocab)
        mask = self.src_key_mask_for(src) if src_key_mask is None else src_key_mask
        return self.transformer.encoder(self.embed_src(src), src_key_mask=mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_key_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``(batch, n_tgt, tgt_vocab)`` for every target prefix, recomputed in full (causal mask).

        Position ``t`` of the output predicts token ``t + 1`` from tokens ``0..t`` of ``tgt`` (ids,
        ``(batch, n_tgt)``) and from ``memory`` (from :meth:`encode`)."""
        self._check_tokens("tgt", tgt, self.tgt_vocab)
        out = self.transformer.decoder(self.embed_tgt(tgt), memory, tgt_key_mask=tgt_key_mask,
                                       memory_key_mask=memory_key_mask, tgt_is_causal=True)
        return self.generator(out)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_key_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher-forced logits ``(batch, n_tgt, tgt_vocab)`` for source ids ``(batch, n_src)`` and target ids
        ``(batch, n_tgt)`` (usually ``BOS y_1 … y_{m}``; position ``t`` predicts ``y_{t+1}``).
        ``src_key_mask`` defaults to ``src != pad_id`` and also masks the cross-attention."""
        self._check_tokens("src", src, self.src_vocab)
        self._check_tokens("tgt", tgt, self.tgt_vocab)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got src {tuple(src.shape)} and tgt "
                             f"{tuple(tgt.shape)}")
        mask = self.src_key_mask_for(src) if src_key_mask is None else src_key_mask
        memory = self.transformer.encoder(self.embed_src(src), src_key_mask=mask)
        out = self.transformer.decoder(self.embed_tgt(tgt), memory, tgt_key_mask=tgt_key_mask,
                                       memory_key_mask=mask, tgt_is_causal=True)
        return self.generator(out)

    @torch.no_grad()
    def attention_maps(
        self, src: torch.Tensor, tgt: torch.Tensor, src_key_mask: torch.Tensor | None = None
    ) -> AttentionMaps:
        """Every layer's per-head attention weights for a teacher-forced pass (eval mode; see
        :class:`AttentionMaps`). Encoder self-attention, decoder causal self-attention and cross-attention,
        where the queries come from the decoder and the keys and values from the encoder."""
        self._check_tokens("src", src, self.src_vocab)
        self._check_tokens("tgt", tgt, self.tgt_vocab)
        was_training = self.training
        self.eval()
        mask = self.src_key_mask_for(src) if src_key_mask is None else src_key_mask
        maps = AttentionMaps()
        self.transformer(self.embed_src(src), self.embed_tgt(tgt), src_key_mask=mask, memory_key_mask=mask,
                         tgt_is_causal=True, attn_maps=maps)
        self.train(was_training)
        return maps

    # ----------------------------------------------------------------------------- incremental decoding
    def new_cache(
        self, memory: torch.Tensor, memory_key_mask: torch.Tensor | None = None, capacity: int | None = None
    ) -> KVCache:
        """An empty :class:`KVCache` for decoding against ``memory`` ``(batch, n_src, d_model)``: the cross-
        attention keys and values of every decoder layer are computed here, once. ``capacity`` (default
        ``max_len``) is the most target positions it will hold."""
        if memory.ndim != 3 or memory.shape[-1] != self.d_model:
            raise ValueError(f"memory must have shape (batch, n_src, d_model={self.d_model}), "
                             f"got {tuple(memory.shape)}")
        capacity = self.positions.max_len if capacity is None else capacity
        mask = None if memory_key_mask is None else memory_key_mask[:, None, None, :]
        layers = [layer._new_cache(memory, capacity) for layer in self.transformer.decoder.layers]
        return KVCache(layers, mask, 0, capacity)

    def decode_step(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits ``(batch, n_new, tgt_vocab)`` for ``tokens`` ``(batch, n_new)`` (usually ``n_new = 1``), placed at
        positions ``cache.length, …``; their keys and values are appended to ``cache`` (whose ``length`` grows
        by ``n_new``). Equal to the matching positions of :meth:`decode` on the whole prefix (tested), at a
        cost per new token that grows only linearly with the prefix length. Eval mode (no dropout) assumed.

        Raises:
            ValueError: the cache is full.
        """
        self._check_tokens("tokens", tokens, self.tgt_vocab)
        start, n_new = cache.length, tokens.shape[1]
        if start + n_new > cache.capacity:
            raise ValueError(f"the cache holds {cache.capacity} positions; {start} used, {n_new} more requested")
        x = self.embed_tgt(tokens, offset=start)
        for layer, lc in zip(self.transformer.decoder.layers, cache.layers, strict=True):
            x = layer.forward_step(x, lc, start, cache.memory_key_mask)
        norm = self.transformer.decoder.norm
        cache.length = start + n_new
        return self.generator(x if norm is None else norm(x))


@torch.no_grad()
def greedy_decode(
    model: Seq2SeqTransformer,
    src: torch.Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int | None = None,
    *,
    src_key_mask: torch.Tensor | None = None,
    pad_id: int | None = None,
    use_cache: bool = True,
    return_logits: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Greedy autoregressive decoding: start from ``BOS``, append the arg-max token, repeat (chapter 5).

    With ``use_cache=True`` each step feeds only the newest token through the decoder: every self-attention
    layer keeps the keys and values of past positions (a :class:`KVCache`), and the cross-attention keys and
    values of the encoder memory are computed once. With ``use_cache=False`` every step re-runs the decoder on
    the whole prefix. Both give the same tokens (tested). The model is put in eval mode for the call.

    Args:
        model: a :class:`Seq2SeqTransformer`.
        src: source ids ``(batch, n_src)``.
        max_len: number of tokens to generate after ``BOS`` (at most; fewer if every row has produced
            ``eos_id``).
        bos_id: the start token. eos_id: the end token, or None to always generate ``max_len`` tokens (for
            timing).
        src_key_mask: ``(batch, n_src)``, True = real token; default ``src != model.pad_id``.
        pad_id: written after a row's ``EOS`` (default ``model.pad_id``, or ``eos_id`` when that is None).
        use_cache: decode incrementally with the key/value cache.
        return_logits: also return the logits of every step.

    Returns:
        ``tokens`` ``(batch, 1 + steps)`` starting with ``BOS``; with ``return_logits``, also
        ``logits`` ``(batch, steps, tgt_vocab)`` (step ``t``'s logits are those that chose ``tokens[:, t + 1]``).
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"greedy_decode expects a Seq2SeqTransformer, got {type(model).__name__}")
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
    was_training = model.training
    model.eval()
    mask = model.src_key_mask_for(src) if src_key_mask is None else src_key_mask
    memory = model.encode(src, mask)
    batch = src.shape[0]
    fill = pad_id if pad_id is not None else (model.pad_id if model.pad_id is not None else eos_id)
    tokens = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    cache = model.new_cache(memory, mask, capacity=max_len + 1) if use_cache else None
    all_logits = []
    for _ in range(max_len):
        if cache is not None:
            logits = model.decode_step(tokens[:, -1:], cache)[:, -1]
        else:
            logits = model.decode(tokens, memory, memory_key_mask=mask)[:, -1]
        nxt = logits.argmax(dim=-1)
        if eos_id is not None and fill is not None:
            nxt = torch.where(done, torch.full_like(nxt, fill), nxt)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        if return_logits:
            all_logits.append(logits)
        if eos_id is not None:
            done |= nxt == eos_id
            if bool(done.all()):
                break
    model.train(was_training)
    if return_logits:
        return tokens, torch.stack(all_logits, dim=1)
    return tokens
