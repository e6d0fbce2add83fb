"""Conversion between the package's modules and PyTorch's, in one place (chapters 4 and 5).

The package's :class:`~attention_course.multihead.MultiHeadAttention`, its layers and :class:`~attention_course.
seq2seq.Transformer` have PyTorch's parameter names and layouts, so a conversion is a ``load_state_dict`` plus the
settings. Masks convert separately, with :func:`attention_course.masks.from_torch_masks` and ``to_torch_masks``:
PyTorch's modules use the opposite sense (True = ignore).
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import describe
from .layers import TransformerDecoderLayer, TransformerEncoderLayer
from .multihead import MultiHeadAttention
from .seq2seq import Transformer

__all__ = ["from_torch", "to_torch"]


def _copy(src: nn.Module, dst: nn.Module) -> nn.Module:
    """``src``'s weights and its training/evaluation mode, copied into ``dst``."""
    with torch.no_grad():
        dst.load_state_dict(src.state_dict())
    return dst.train(src.training)


def _factory(w: torch.Tensor) -> dict:
    return {"device": w.device, "dtype": w.dtype}


def _layer_settings(layer: nn.Module) -> tuple:
    """What PyTorch's encoder and decoder layers and the package's share, in constructor order after d_model, nhead."""
    return (layer.linear1.out_features, layer.dropout.p, layer.activation, layer.norm1.eps, layer.self_attn.batch_first,
            layer.norm_first, layer.linear1.bias is not None)


def from_torch(module: nn.Module) -> nn.Module:
    """The package's equivalent of a PyTorch module, holding a copy of its weights (same device and dtype).

    ``nn.MultiheadAttention`` → :class:`~attention_course.multihead.MultiHeadAttention`;
    ``nn.TransformerEncoderLayer``/``nn.TransformerDecoderLayer`` → :mod:`attention_course.layers`' layers;
    ``nn.Transformer`` (built from those layers) → :class:`~attention_course.seq2seq.Transformer`.

    Raises:
        TypeError: another kind of module, or an ``nn.Transformer`` with custom encoder or decoder layers.
        ValueError: ``nn.MultiheadAttention`` with ``add_bias_kv`` or ``add_zero_attn`` (not implemented here).
    """
    if isinstance(module, nn.MultiheadAttention):
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("module must not use add_bias_kv or add_zero_attn (MultiHeadAttention has neither), got "
                             f"add_bias_kv={module.bias_k is not None}, add_zero_attn={module.add_zero_attn}")
        new = MultiHeadAttention(module.embed_dim, module.num_heads, dropout=module.dropout,
                                 bias=module.in_proj_bias is not None, batch_first=bool(module.batch_first),
                                 kdim=module.kdim, vdim=module.vdim, **_factory(module.out_proj.weight))
        return _copy(module, new)
    for torch_cls, ours in ((nn.TransformerEncoderLayer, TransformerEncoderLayer),
                            (nn.TransformerDecoderLayer, TransformerDecoderLayer)):
        if isinstance(module, torch_cls):
            new = ours(module.self_attn.embed_dim, module.self_attn.num_heads, *_layer_settings(module),
                       **_factory(module.linear1.weight))
            return _copy(module, new)
    if isinstance(module, nn.Transformer):
        enc, dec = getattr(module.encoder, "layers", [None]), getattr(module.decoder, "layers", [None])
        if len(enc) == 0 or len(dec) == 0:
            raise ValueError(f"module must have at least one encoder and one decoder layer (the package's Transformer "
                             f"needs both), got {len(enc)} and {len(dec)}")
        norms = getattr(module.encoder, "norm", None), getattr(module.decoder, "norm", None)
        if not (isinstance(enc[0], nn.TransformerEncoderLayer) and isinstance(dec[0], nn.TransformerDecoderLayer)
                and all(isinstance(n, nn.LayerNorm) for n in norms)):
            raise TypeError("module's encoder and decoder must be nn.TransformerEncoder and nn.TransformerDecoder of "
                            "PyTorch's layers with a final LayerNorm (as nn.Transformer builds them), got "
                            f"{describe(module.encoder)} and {describe(module.decoder)}")
        settings = _layer_settings(enc[0])
        new = Transformer(module.d_model, module.nhead, len(enc), len(dec), *settings[:4], module.batch_first,
                          *settings[5:], **_factory(enc[0].linear1.weight))
        return _copy(module, new)
    raise TypeError("module must be an nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer "
                    f"or nn.Transformer, got {describe(module)}")


def to_torch(module: MultiHeadAttention) -> nn.MultiheadAttention:
    """The inverse of :func:`from_torch` for multi-head attention: an ``nn.MultiheadAttention`` with a copy of the
    weights.

    Raises:
        TypeError: not a :class:`~attention_course.multihead.MultiHeadAttention`.
        ValueError: grouped-query attention or a rotary hook, which ``nn.MultiheadAttention`` does not have.
    """
    if not isinstance(module, MultiHeadAttention):
        raise TypeError(f"module must be a MultiHeadAttention (to_torch converts attention only), got "
                        f"{describe(module)}")
    if module.num_kv_heads != module.num_heads or module.rotary is not None:
        raise ValueError("nn.MultiheadAttention has no grouped-query attention and no rotary positions: module must "
                         f"have num_kv_heads == num_heads and no rotary hook, got num_kv_heads={module.num_kv_heads}, "
                         f"num_heads={module.num_heads} and {'a' if module.rotary else 'no'} rotary hook")
    new = nn.MultiheadAttention(module.embed_dim, module.num_heads, dropout=module.dropout,
                                bias=module.in_proj_bias is not None, batch_first=module.batch_first,
                                kdim=module.kdim, vdim=module.vdim, **_factory(module.out_proj.weight))
    return _copy(module, new)
