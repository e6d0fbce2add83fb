"""Bad inputs for layers.py: the encoder, decoder and decoder-only layers, their stacks and the decoding cache."""

from __future__ import annotations

import torch
from torch import nn

from attention_course.layers import (
    DecoderCache,
    DecoderOnlyLayer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from bad_inputs import case

ENC, DEC, GPT = TransformerEncoderLayer, TransformerDecoderLayer, DecoderOnlyLayer


def _x(*shape, **kw) -> torch.Tensor:
    return torch.zeros(*(shape or (2, 3, 8)), **kw)


def _enc(**kw) -> TransformerEncoderLayer:
    return TransformerEncoderLayer(8, 2, 16, batch_first=True, **kw)


def _dec() -> TransformerDecoderLayer:
    return TransformerDecoderLayer(8, 2, 16, batch_first=True)


def _cached_dec(memory=None, static=True):
    layer = _dec()
    cross = layer.multihead_attn.static_cache(_x(2, 5, 8))
    cross.static = static
    return layer(_x(2, 1, 8), memory, cache=(layer.self_attn.new_cache(2, 4), cross))


def _stack_cache(layers: int) -> DecoderCache:
    mha = _dec().self_attn
    return DecoderCache([(mha.new_cache(2, 4), mha.static_cache(_x(2, 5, 8)))] * layers)


CASES = [
    # constructors (DecoderOnlyLayer shares them)
    case(ENC, lambda: ENC(0, 2), ValueError, arg="d_model", says="positive", id="layers.Encoder-d-model-zero"),
    case(ENC, lambda: ENC(8, -2), ValueError, arg="nhead", id="layers.Encoder-nhead-negative"),
    case(ENC, lambda: ENC(10, 4), ValueError, arg="nhead", says="divisible", id="layers.Encoder-divisible"),
    case(ENC, lambda: ENC(8, 2, 0), ValueError, arg="dim_feedforward", id="layers.Encoder-ff-zero"),
    case(ENC, lambda: ENC(8, 2, 16.0), TypeError, arg="dim_feedforward", id="layers.Encoder-ff-float"),
    case(ENC, lambda: ENC(8, 2, dropout=2.0), ValueError, arg="dropout", says="[0, 1]",
         id="layers.Encoder-dropout"),
    case(ENC, lambda: ENC(8, 2, activation="tanh"), ValueError, arg="activation", says="'relu'",
         id="layers.Encoder-activation-name"),
    case(ENC, lambda: ENC(8, 2, activation=3), TypeError, arg="activation", id="layers.Encoder-activation-kind"),
    case(ENC, lambda: ENC(8, 2, layer_norm_eps=0.0), ValueError, arg="layer_norm_eps",
         id="layers.Encoder-eps"),
    case(ENC, lambda: ENC(8, 2, norm_first="no"), TypeError, arg="norm_first", id="layers.Encoder-norm-first"),
    case(ENC, lambda: ENC(8, 2, num_kv_heads=0), ValueError, arg="num_kv_heads", id="layers.Encoder-kv-heads"),
    case(GPT, lambda: GPT("16", 2), TypeError, arg="d_model", id="layers.DecoderOnly-d-model-str"),
    case(DEC, lambda: DEC(8, 0), ValueError, arg="nhead", id="layers.Decoder-zero-heads"),
    # TransformerEncoderLayer.forward
    case(ENC, lambda: _enc()([[0.0] * 8]), TypeError, arg="src", says="torch.as_tensor",
         id="layers.Encoder.forward-list"),
    case(ENC, lambda: _enc()(_x(dtype=torch.long)), TypeError, arg="src", says="floating",
         id="layers.Encoder.forward-integer"),
    case(ENC, lambda: _enc()(_x(2, 3, 6)), ValueError, arg="src", says="d_model=8",
         id="layers.Encoder.forward-width"),
    case(ENC, lambda: _enc()(_x(dtype=torch.float64)), TypeError, arg="src", says="float32",
         id="layers.Encoder.forward-dtype"),
    case(ENC, lambda: _enc()(_x(device="meta")), ValueError, arg="src", says="meta",
         id="layers.Encoder.forward-device"),
    case(ENC, lambda: _enc()(_x(), src_key_mask=torch.ones(2, 3)), TypeError, arg="src_key_mask",
         says="boolean", id="layers.Encoder.forward-float-key-mask"),
    case(ENC, lambda: _enc()(_x(), src_mask=torch.ones(3, 3, dtype=torch.bool, device="meta")), ValueError,
         arg="src_mask", says="meta", id="layers.Encoder.forward-mask-device"),
    case(ENC, lambda: _enc()(_x(), src_key_mask=torch.ones(2, 4, dtype=torch.bool)), ValueError, arg="key_mask",
         says="(2, 3)", id="layers.Encoder.forward-key-mask-shape"),
    case(ENC, lambda: _enc()(_x(), is_causal=1), TypeError, arg="is_causal", id="layers.Encoder.forward-causal"),
    case(ENC, lambda: _enc()(_x(), attn_weights=()), TypeError, arg="attn_weights",
         id="layers.Encoder.forward-weights"),
    # DecoderOnlyLayer.forward
    case(GPT, lambda: GPT(8, 2)(_x(3, 8).tolist()), TypeError, arg="x", id="layers.DecoderOnly.forward-list"),
    case(GPT, lambda: GPT(8, 2)(_x(), key_mask=torch.ones(2, 3)), TypeError, arg="key_mask", says="boolean",
         id="layers.DecoderOnly.forward-float-mask"),
    case(GPT, lambda: GPT(8, 2)(_x(), cache=GPT(8, 2).self_attn.new_cache(3, 4)), ValueError, arg="cache",
         says="another batch", id="layers.DecoderOnly.forward-cache-batch"),
    # TransformerDecoderLayer.forward
    case(DEC, lambda: _dec()(_x(), None), TypeError, arg="memory", id="layers.Decoder.forward-no-memory"),
    case(DEC, lambda: _dec()(_x(), _x(3, 5, 8)), ValueError, arg="memory", says="batch",
         id="layers.Decoder.forward-memory-batch"),
    case(DEC, lambda: _dec()(_x(), _x(5, 8)), ValueError, arg="memory", says="layout",
         id="layers.Decoder.forward-memory-unbatched"),
    case(DEC, lambda: _dec()(_x(), _x(2, 5, 8, dtype=torch.float64)), TypeError, arg="memory", says="float32",
         id="layers.Decoder.forward-memory-dtype"),
    case(DEC, lambda: _dec()(_x(), _x(2, 5, 8), memory_key_mask=torch.zeros(2, 5)), TypeError,
         arg="memory_key_mask", says="boolean", id="layers.Decoder.forward-float-memory-mask"),
    case(DEC, lambda: _dec()(_x(), _x(), tgt_is_causal="yes"), TypeError, arg="tgt_is_causal",
         id="layers.Decoder.forward-causal"),
    case(DEC, lambda: _dec()(_x(), _x(), cross_weights={}), TypeError, arg="cross_weights",
         id="layers.Decoder.forward-weights"),
    case(DEC, lambda: _dec()(_x(), _x(), cache=_dec().self_attn.new_cache(2, 4)), TypeError, arg="cache",
         says="pair", id="layers.Decoder.forward-cache-kind"),
    case(DEC, lambda: _cached_dec(static=False), ValueError, arg="cache", says="static",
         id="layers.Decoder.forward-cache-not-static"),
    case(DEC, lambda: _cached_dec(memory=_x(2, 5, 8)), ValueError, arg="memory", says="None",
         id="layers.Decoder.forward-memory-with-cache"),
    # the stacks
    case(TransformerEncoder, lambda: TransformerEncoder(nn.Linear(8, 8), 2), TypeError, arg="layer",
         says="TransformerEncoderLayer", id="layers.TransformerEncoder-layer"),
    case(TransformerEncoder, lambda: TransformerEncoder(_enc(), 0), ValueError, arg="num_layers",
         id="layers.TransformerEncoder-zero-layers"),
    case(TransformerEncoder, lambda: TransformerEncoder(_enc(), 2, norm="layernorm"), TypeError, arg="norm",
         id="layers.TransformerEncoder-norm"),
    case(TransformerEncoder, lambda: TransformerEncoder(_enc(), 1)(_x(), mask=torch.zeros(3, 3)), TypeError,
         arg="mask", says="boolean", id="layers.TransformerEncoder.forward-float-mask"),
    case(TransformerDecoder, lambda: TransformerDecoder(_enc(), 1), TypeError, arg="layer",
         says="TransformerDecoderLayer", id="layers.TransformerDecoder-layer"),
    case(TransformerDecoder, lambda: TransformerDecoder(_dec(), -1), ValueError, arg="num_layers",
         id="layers.TransformerDecoder-negative-layers"),
    case(TransformerDecoder, lambda: TransformerDecoder(_dec(), 1)(_x(), None, cache=[]), TypeError, arg="cache",
         says="DecoderCache", id="layers.TransformerDecoder.forward-cache-kind"),
    case(TransformerDecoder, lambda: TransformerDecoder(_dec(), 2)(_x(2, 1, 8), None, cache=_stack_cache(3)),
         ValueError, arg="cache", says="per decoder layer", id="layers.TransformerDecoder.forward-cache-layers"),
    # DecoderCache
    case(DecoderCache, lambda: DecoderCache("layers"), TypeError, arg="layers", id="layers.DecoderCache-kind"),
    case(DecoderCache, lambda: DecoderCache([(_stack_cache(1).layers[0][0], None)]), TypeError, arg="layers",
         says="pair", id="layers.DecoderCache-pair"),
    case(DecoderCache, lambda: DecoderCache([], torch.ones(2, 5)), TypeError, arg="memory_key_mask",
         says="boolean", id="layers.DecoderCache-float-mask"),
    case(DecoderCache, lambda: DecoderCache([], torch.ones(5, dtype=torch.bool)), ValueError,
         arg="memory_key_mask", says="(batch, n_src)", id="layers.DecoderCache-mask-shape"),
]
