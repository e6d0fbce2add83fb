"""Transformer layers: encoder, decoder and the decoder-only block, built from one sublayer pattern (chapters 5, 7).

Every layer is a few *sublayers*, each wrapped in a residual connection and layer normalisation:

* post-LN (``norm_first=False``, the paper): ``x = LN(x + Dropout(f(x)))``;
* pre-LN (``norm_first=True``): ``x = x + Dropout(f(LN(x)))`` — the residual stream is never normalised, which
  keeps gradients well-scaled in deep stacks.

The sublayers are attention (chapter 4's :class:`~attention_course.multihead.MultiHeadAttention`) and the
position-wise feed-forward network ``FFN(x) = act(x W_1 + b_1) W_2 + b_2`` on row vectors ``x``, as the paper
writes it (``linear1.weight`` stores ``W_1`` transposed, PyTorch's ``(out, in)`` orientation). Parameter names
and the order the parameters are created in follow :class:`torch.nn.TransformerEncoderLayer` and
:class:`torch.nn.TransformerDecoderLayer` (``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1``…),
so :mod:`attention_course.interop` copies PyTorch's layers with ``load_state_dict``. Masks are boolean, True = may
attend, keyword-only (:mod:`attention_course.masks`); padding is a *key mask* ``(batch, n)``, True = a real token.
The stacks :class:`TransformerEncoder` and :class:`TransformerDecoder` and the decoding state :class:`DecoderCache` of
:mod:`attention_course.seq2seq` (which re-exports them) live here too.

At the edges: empty batches and sequences give empty results (as PyTorch's layers); a query whose every key is
masked gets a zero attention output, as PyTorch's fused path (training mode) gives, where its explicit path (eval
mode) gives NaN (see :class:`~attention_course.multihead.MultiHeadAttention`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_callable,
    check_choice,
    check_flag,
    check_instance,
    check_int,
    check_real,
    check_tensor,
    describe,
)
from .multihead import KVCache, MultiHeadAttention, RotaryHook

__all__ = [
    "Activation",
    "DecoderCache",
    "DecoderOnlyLayer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]

Activation = str | Callable[[torch.Tensor], torch.Tensor]
_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def check_sequence(name: str, x: object, d_model: int, batch_first: bool, like: torch.Tensor | None = None) -> None:
    """A layer's input must be a floating-point ``(batch, n, d_model)``/``(n, batch, d_model)`` or ``(n, d_model)``,
    in the dtype and on the device of ``like`` (a parameter) when given."""
    layout = ("(batch, n, d_model)" if batch_first else "(n, batch, d_model)") + " or (n, d_model)"
    check_tensor(name, x, ndim=(2, 3), layout=layout)
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} must have shape {layout} with d_model={d_model}, got {tuple(x.shape)}")
    if like is not None and x.dtype != like.dtype:
        raise TypeError(f"{name} must have the parameters' dtype {like.dtype}, got {describe(x)}")
    if like is not None and x.device != like.device:
        raise ValueError(f"{name} must be on the parameters' device {like.device}, got {describe(x)}")


def _check_mask(name: str, m: object, like: torch.Tensor) -> None:
    """None, or a boolean mask on ``like``'s device (its shape is checked by the attention)."""
    if m is not None:
        check_tensor(name, m, kind="bool", layout="(True = a real token)" if "key" in name else "(True = may attend)")
        if m.device != like.device:
            raise ValueError(f"{name} must be on the parameters' device {like.device}, got {describe(m)}")


class _Layer(nn.Module):
    """What every layer shares: its constructor (PyTorch's), the feed-forward network, and the residual +
    LayerNorm wrapper of each sublayer. A subclass names its attention modules in ``_attention_modules``."""

    _attention_modules: tuple[str, ...] = ("self_attn",)

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
        *,
        num_kv_heads: int | None = None,
        rotary: RotaryHook | None = None,
    ) -> None:
        super().__init__()
        d_model, nhead = check_int("d_model", d_model), check_int("nhead", nhead)
        if d_model % nhead:
            raise ValueError(f"d_model must be divisible by nhead, got d_model={d_model} and nhead={nhead}")
        dim_feedforward = check_int("dim_feedforward", dim_feedforward)
        dropout = check_real("dropout", dropout, low=0.0, high=1.0)
        layer_norm_eps = check_real("layer_norm_eps", layer_norm_eps, low=0.0, open_low=True)
        batch_first, norm_first = check_flag("batch_first", batch_first), check_flag("norm_first", norm_first)
        if isinstance(activation, str):
            check_choice("activation", activation, tuple(_ACTIVATIONS))
        else:
            check_callable("activation", activation, "'relu', 'gelu' or a callable")
        factory = {"device": device, "dtype": dtype}
        # Attention first, then the feed-forward network and the norms: PyTorch's parameter order, hence the same
        # random draws at construction. Only self-attention gets grouped-query heads and rotary positions.
        for name in self._attention_modules:
            extra = {"num_kv_heads": num_kv_heads, "rotary": rotary} if name == "self_attn" else {}
            setattr(self, name, MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                   batch_first=batch_first, **extra, **factory))
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        count = len(self._attention_modules) + 1
        for i in range(1, count + 1):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        for i in range(1, count + 1):
            setattr(self, f"dropout{i}", nn.Dropout(dropout))
        self.activation = _ACTIVATIONS[activation] if isinstance(activation, str) else activation
        self.d_model, self.batch_first = d_model, batch_first

    def _check_inputs(self, sequences=(), masks=(), flags=(), lists=()) -> None:
        """Each ``(name, value)``: sequences as :func:`check_sequence`, masks boolean, flags bool, weight lists None
        or a list. Shapes, dtypes and devices only."""
        like = self.linear1.weight
        for name, x in sequences:
            check_sequence(name, x, self.d_model, self.batch_first, like)
        for name, m in masks:
            _check_mask(name, m, like)
        for name, flag in flags:
            check_flag(name, flag)
        for name, found in lists:
            if found is not None:
                check_instance(name, found, list)

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _sublayer(self, i: int, x: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Sublayer ``i`` (1-based) applied to ``x`` with its residual connection, dropout and LayerNorm."""
        norm, drop = getattr(self, f"norm{i}"), getattr(self, f"dropout{i}")
        return x + drop(f(norm(x))) if self.norm_first else norm(x + drop(f(x)))


def _attend(mha: MultiHeadAttention, x: torch.Tensor, memory: torch.Tensor | None, weights: list | None,
            **kwargs) -> torch.Tensor:
    """``mha`` from ``x`` to ``memory`` (``x`` itself when None: self-attention); per-head weights are appended to
    ``weights`` when it is a list."""
    kv = x if memory is None else memory
    out, w = mha(x, kv, kv, need_weights=weights is not None, average_attn_weights=False, **kwargs)
    if weights is not None:
        weights.append(w)
    return out


class TransformerEncoderLayer(_Layer):
    """Self-attention, then the feed-forward network (chapter 5). PyTorch's constructor, and optionally
    grouped-query attention (``num_kv_heads``) and rotary positions (``rotary``) in the self-attention."""

    def forward(
        self,
        src: torch.Tensor,
        *,
        src_mask: torch.Tensor | None = None,
        src_key_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        attn_weights: list[torch.Tensor] | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Encode ``src``: ``(batch, n, d_model)`` if ``batch_first`` else ``(n, batch, d_model)``, or ``(n, d_model)``.

        Args:
            src_mask: boolean ``(n, n)`` or ``(batch|1, nhead|1, n, n)``, True = may attend.
            src_key_mask: boolean ``(batch, n)``, True = a real token (PyTorch's ``~src_key_padding_mask``).
            is_causal: also apply the causal mask (see :meth:`MultiHeadAttention.forward` for its alignment).
            attn_weights: if a list, the per-head weights ``(batch, nhead, n_q, n_k)`` are appended to it.
            cache: the self-attention's :class:`~attention_course.multihead.KVCache` (decoding, eval mode).

        Returns:
            A tensor of ``src``'s shape. At the edges: ``batch = 0`` or ``n = 0`` give an empty tensor; a position
            whose every key is masked gets a zero attention output (see the module's notes).
        """
        self._check_inputs((("src", src),), (("src_mask", src_mask), ("src_key_mask", src_key_mask)),
                           (("is_causal", is_causal),), (("attn_weights", attn_weights),))
        return self._encode(src, src_mask, src_key_mask, is_causal, attn_weights, cache)

    def _encode(self, src, src_mask, src_key_mask, is_causal, attn_weights, cache) -> torch.Tensor:
        x = self._sublayer(1, src, lambda y: _attend(self.self_attn, y, None, attn_weights, attn_mask=src_mask,
                                                     key_mask=src_key_mask, is_causal=is_causal, cache=cache))
        return self._sublayer(2, x, self._feed_forward)


class DecoderOnlyLayer(TransformerEncoderLayer):
    """The block of a decoder-only model (GPT, chapter 7): causal self-attention and the feed-forward network.

    An encoder layer whose self-attention is always causal, batch-first, pre-LN with GELU by default (as GPT-2),
    optionally with grouped-query attention (``num_kv_heads``) and rotary positions (``rotary``).
    ``forward(x, key_mask=None, cache=None, attn_weights=None)``: ``x`` ``(batch, n, d_model)``.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int | None = None,
        dropout: float = 0.0,
        *,
        activation: Activation = "gelu",
        norm_first: bool = True,
        **options,
    ) -> None:
        """``dim_feedforward`` defaults to ``4·d_model``; ``options``: ``layer_norm_eps``, ``bias``, ``device``,
        ``dtype``, ``num_kv_heads``, ``rotary`` (as :class:`TransformerEncoderLayer`)."""
        ff = 4 * check_int("d_model", d_model) if dim_feedforward is None else dim_feedforward
        super().__init__(d_model, nhead, ff, dropout, activation, batch_first=True, norm_first=norm_first, **options)

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        *,
        key_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        attn_weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``x`` ``(batch, n, d_model)`` through causal self-attention (``key_mask`` ``(batch, n)``, True = a real
        token; with a ``cache`` it counts the cached positions too) and the feed-forward network. At the edges: as
        :meth:`TransformerEncoderLayer.forward`."""
        self._check_inputs((("x", x),), (("key_mask", key_mask),), (), (("attn_weights", attn_weights),))
        return self._encode(x, None, key_mask, True, attn_weights, cache)


class TransformerDecoderLayer(_Layer):
    """Causal self-attention, cross-attention to the encoder's output (the *memory*), then the feed-forward network
    (chapter 5). In the cross-attention the **queries come from the decoder** and the **keys and values from the
    encoder**. PyTorch's constructor."""

    _attention_modules = ("self_attn", "multihead_attn")

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor | None,
        *,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
        memory_key_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = False,
        self_weights: list[torch.Tensor] | None = None,
        cross_weights: list[torch.Tensor] | None = None,
        cache: tuple[KVCache, KVCache] | None = None,
    ) -> torch.Tensor:
        """Decode ``tgt`` ``(batch, n_tgt, d_model)`` (or sequence-first) attending to ``memory`` ``(batch, n_src,
        d_model)``.

        Args:
            tgt_mask: boolean ``(n_tgt, n_tgt)`` (or 4-D), True = may attend. memory_mask: ``(n_tgt, n_src)``.
            tgt_key_mask, memory_key_mask: boolean ``(batch, n_tgt)``, ``(batch, n_src)``; True = real token.
            tgt_is_causal: apply the causal mask in the self-attention.
            self_weights, cross_weights: lists to append the per-head weights to.
            cache: ``(self-attention cache, static cross-attention cache)`` for decoding (eval mode); the memory's
                keys and values then come from the cache and ``memory`` may be None.

        Returns:
            A tensor of ``tgt``'s shape. At the edges: ``batch = 0`` or ``n_tgt = 0`` give an empty tensor; with
            ``n_src = 0`` (or every memory position masked) the cross-attention output is zero, as PyTorch's fused
            path gives.
        """
        self_cache, cross_cache = self._check_cache(cache, memory)
        sequences = (("tgt", tgt),) if cross_cache is not None else (("tgt", tgt), ("memory", memory))
        self._check_inputs(sequences, (("tgt_mask", tgt_mask), ("memory_mask", memory_mask),
                                       ("tgt_key_mask", tgt_key_mask), ("memory_key_mask", memory_key_mask)),
                           (("tgt_is_causal", tgt_is_causal),),
                           (("self_weights", self_weights), ("cross_weights", cross_weights)))
        b = 0 if self.batch_first else 1
        if cross_cache is None and (memory.ndim != tgt.ndim or (tgt.ndim == 3 and memory.shape[b] != tgt.shape[b])):
            raise ValueError(f"memory must have tgt's batch size and layout, got tgt {tuple(tgt.shape)} and memory "
                             f"{tuple(memory.shape)} ({'batch_first' if self.batch_first else 'sequence-first'})")
        x = self._sublayer(1, tgt, lambda y: _attend(self.self_attn, y, None, self_weights, attn_mask=tgt_mask,
                                                     key_mask=tgt_key_mask, is_causal=tgt_is_causal,
                                                     cache=self_cache))
        if cross_cache is None:
            x = self._sublayer(2, x, lambda y: _attend(self.multihead_attn, y, memory, cross_weights,
                                                       attn_mask=memory_mask, key_mask=memory_key_mask))
        else:
            x = self._sublayer(2, x, lambda y: self.multihead_attn(y, None, None, attn_mask=memory_mask,
                                                                   key_mask=memory_key_mask, need_weights=False,
                                                                   cache=cross_cache).output)
        return self._sublayer(3, x, self._feed_forward)

    @staticmethod
    def _check_cache(cache: object, memory: object) -> tuple[KVCache | None, KVCache | None]:
        """``(self-attention cache or None, static cross-attention cache or None)``; memory None with the latter."""
        if cache is None:
            return None, None
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            raise TypeError(f"cache must be a pair (self-attention KVCache, static cross-attention KVCache), got "
                            f"{describe(cache)}")
        self_cache, cross_cache = cache
        for name, c in (("cache[0]", self_cache), ("cache[1]", cross_cache)):
            if c is not None:
                check_instance(name, c, KVCache)
        if cross_cache is not None and not cross_cache.static:
            raise ValueError("cache[1] must be a static cache (the memory's keys and values, from "
                             "MultiHeadAttention.static_cache), got a KVCache with static=False")
        if cross_cache is not None and memory is not None:
            raise ValueError(f"memory must be None with a cross-attention cache (cache[1] holds its keys and values), "
                             f"got {describe(memory)}")
        return self_cache, cross_cache


# ------------------------------------------------------------------------------------------ stacks of layers
class _Stack(nn.Module):
    """``num_layers`` deep copies of one layer (identical until re-initialised) in ``self.layers``, and an optional
    final ``norm``, as PyTorch's stacks."""

    _layer_type: type = nn.Module

    def __init__(self, layer: nn.Module, num_layers: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        if not isinstance(layer, self._layer_type):  # name the module: PyTorch's layers have the same class names
            want = f"{self._layer_type.__module__}.{self._layer_type.__qualname__}"
            raise TypeError(f"layer must be a {want}, got {type(layer).__module__}.{type(layer).__qualname__}")
        num_layers = check_int("num_layers", num_layers)
        if norm is not None:
            check_instance("norm", norm, nn.Module)
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm


@dataclass
class DecoderCache:
    """The state of incremental decoding (chapter 5; timed in chapter 6): each decoder layer's
    ``(self-attention cache, cross-attention cache)`` — the keys and values of every target position decoded so
    far, and the encoder memory's keys and values, projected once — and the memory's key mask (boolean
    ``(batch, n_src)``, True = a real token). ``owner`` identifies the model whose
    :meth:`~attention_course.seq2seq.Seq2SeqTransformer.new_cache` made it (None for a cache built by hand), so
    that a cache from another model is refused."""

    layers: list[tuple[KVCache, KVCache]] = field(default_factory=list)
    memory_key_mask: torch.Tensor | None = None
    owner: int | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_instance("layers", self.layers, list)
        for i, pair in enumerate(self.layers):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(c, KVCache) for c in pair)):
                raise TypeError(f"layers[{i}] must be a pair (self-attention KVCache, static cross-attention "
                                f"KVCache), got {describe(pair)}")
        if self.memory_key_mask is not None:
            check_tensor("memory_key_mask", self.memory_key_mask, kind="bool", ndim=2,
                         layout="(batch, n_src) (True = a real token)")

    @property
    def length(self) -> int:
        """How many target positions are cached."""
        return self.layers[0][0].length if self.layers else 0

    @property
    def capacity(self) -> int:
        """The most target positions the cache can hold."""
        return self.layers[0][0].capacity if self.layers else 0

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values in use: the cached target positions and the projected memory of every layer."""
        return sum(self_cache.nbytes + cross.nbytes for self_cache, cross in self.layers)


class TransformerEncoder(_Stack):
    """A stack of ``num_layers`` copies of ``encoder_layer`` and an optional final ``norm`` (chapter 5).

    As :class:`torch.nn.TransformerEncoder`: the layers are deep copies of the one given (identical until
    re-initialised), in ``self.layers``.
    """

    _layer_type = TransformerEncoderLayer

    def forward(self, src: torch.Tensor, *, mask: torch.Tensor | None = None, **options) -> torch.Tensor:
        """Run every layer, then ``norm``. ``mask`` is each layer's ``src_mask``; ``options`` (``src_key_mask``,
        ``is_causal``, ``attn_weights``) go to every layer as in :meth:`TransformerEncoderLayer.forward` (which
        checks them, and describes the edges)."""
        if mask is not None:
            check_tensor("mask", mask, kind="bool", layout="(True = may attend)")
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, **options)
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(_Stack):
    """A stack of ``num_layers`` copies of ``decoder_layer`` and an optional final ``norm`` (chapter 5)."""

    _layer_type = TransformerDecoderLayer

    def forward(
        self, tgt: torch.Tensor, memory: torch.Tensor | None, *, cache: DecoderCache | None = None, **options
    ) -> torch.Tensor:
        """Run every layer, then ``norm``. ``options`` (masks, ``tgt_is_causal``, weight lists) go to every layer as
        in :meth:`TransformerDecoderLayer.forward`; ``cache`` holds every layer's caches (decoding)."""
        if cache is not None:
            check_instance("cache", cache, DecoderCache)
            if len(cache.layers) != len(self.layers):
                raise ValueError(f"cache must hold one (self, cross) pair per decoder layer ({len(self.layers)}), got "
                                 f"{len(cache.layers)} (a cache made by another model?)")
        x = tgt
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, cache=None if cache is None else cache.layers[i], **options)
        return x if self.norm is None else self.norm(x)
