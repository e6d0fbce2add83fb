"""Conversion between the package's modules and PyTorch's, in one place (chapters 4, 5 and 7).

The package's :class:`~attention_course.multihead.MultiHeadAttention`, its layers and :class:`~attention_course.
seq2seq.Transformer` have PyTorch's parameter names and layouts, so a conversion is a ``load_state_dict`` plus the
settings. Masks convert separately, with :func:`attention_course.masks.from_torch_masks` and ``to_torch_masks``:
PyTorch's modules use the opposite sense (True = ignore).

Chapter 7 adds GPT-2: :func:`from_gpt2_state_dict` reads the weights of Hugging Face's ``GPT2LMHeadModel`` (its
``state_dict()``, or the checkpoint file's tensors) into the package's :class:`~attention_course.gpt.GPT`, and
:func:`gpt2_config` reads its sizes from a ``GPT2Config``. Nothing here imports ``transformers``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ._checks import check_instance, describe
from .gpt import GPT, GPTConfig
from .layers import TransformerDecoderLayer, TransformerEncoderLayer
from .multihead import MultiHeadAttention
from .seq2seq import Transformer

__all__ = ["from_gpt2_state_dict", "from_torch", "gpt2_config", "to_torch"]


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


# ------------------------------------------------------------------------------------------------- GPT-2
#: GPT-2's activation names (``GPT2Config.activation_function``) → :class:`~attention_course.gpt.GPTConfig`'s.
GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def gpt2_config(config: object) -> GPTConfig:
    """The :class:`~attention_course.gpt.GPTConfig` of a Hugging Face ``GPT2Config`` (read by attribute name:
    ``vocab_size``, ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``, ``n_inner``, ``layer_norm_epsilon``,
    ``activation_function``): learned positions, pre-LN, biases, no dropout (the model is for inference).

    Raises:
        TypeError: an object without those attributes. ValueError: an activation GPT-2 loading does not support.
    """
    names = ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions", "layer_norm_epsilon", "activation_function")
    missing = [n for n in names if not hasattr(config, n)]
    if missing:
        raise TypeError(f"config must be a GPT2Config (with {', '.join(names)}), got {describe(config)} without "
                        f"{', '.join(missing)}")
    act = config.activation_function
    if act not in GPT2_ACTIVATIONS:
        raise ValueError(f"config.activation_function must be one of {', '.join(map(repr, GPT2_ACTIVATIONS))}, "
                         f"got {act!r}")
    return GPTConfig(config.vocab_size, config.n_embd, config.n_layer, config.n_head, max_len=config.n_positions,
                     positions="learned", dim_feedforward=getattr(config, "n_inner", None),
                     activation=GPT2_ACTIVATIONS[act], layer_norm_eps=config.layer_norm_epsilon)


def from_gpt2_state_dict(state_dict: Mapping[str, torch.Tensor], config: GPTConfig) -> GPT:
    """A :class:`~attention_course.gpt.GPT` holding GPT-2's weights, from Hugging Face's ``GPT2LMHeadModel`` layout.

    GPT-2 stores its linear maps as ``Conv1D`` weights ``(in, out)`` — the paper's row-vector orientation — where
    the package keeps PyTorch's ``(out, in)``: each is transposed. Its fused ``c_attn`` projects to queries, keys
    and values in that order, as the package's ``in_proj_weight`` does, so it is copied whole. Keys may carry the
    ``transformer.`` prefix (``GPT2LMHeadModel``) or not (``GPT2Model``); ``lm_head.weight`` is GPT-2's token
    embedding again (tied) and is checked to be; the causal-mask buffers of old checkpoints (``attn.bias``,
    ``attn.masked_bias``) are ignored. The model is returned in eval mode, in the weights' dtype and device.

    Args:
        state_dict: name → tensor, as ``GPT2LMHeadModel.state_dict()``.
        config: the sizes, with learned positions (:func:`gpt2_config` reads them from a ``GPT2Config``).

    Raises:
        TypeError: ``state_dict`` not a mapping, ``config`` not a ``GPTConfig``.
        ValueError: rotary positions or grouped-query heads in ``config``; a missing weight, or one whose shape
            does not fit ``config``; an untied ``lm_head``.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping name → tensor (GPT2LMHeadModel.state_dict()), got "
                        f"{describe(state_dict)}")
    check_instance("config", config, GPTConfig)
    if config.positions != "learned" or config.num_kv_heads not in (None, config.n_heads) or not config.bias:
        raise ValueError(f"config must describe GPT-2: positions='learned', num_kv_heads=None and bias=True, got "
                         f"positions={config.positions!r}, num_kv_heads={config.num_kv_heads}, bias={config.bias}")
    sd = {k.removeprefix("transformer."): v for k, v in state_dict.items()}

    def get(name: str, transpose: bool = False) -> torch.Tensor:
        if name not in sd:
            raise ValueError(f"state_dict must hold GPT-2's weight {name!r} (with or without 'transformer.'), got "
                             f"{len(sd)} keys without it (a GPT2LMHeadModel of fewer layers?)")
        t = sd[name]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"state_dict[{name!r}] must be a tensor, got {describe(t)}")
        return t.t() if transpose else t

    wte = get("wte.weight")
    model = GPT(config, device=wte.device, dtype=wte.dtype)
    ours = {"tok_embed.weight": get("wte.weight"), "pos_embed.weight": get("wpe.weight"),
            "norm.weight": get("ln_f.weight"), "norm.bias": get("ln_f.bias")}
    parts = {"norm1": "ln_1", "norm2": "ln_2", "self_attn.out_proj": "attn.c_proj", "linear1": "mlp.c_fc",
             "linear2": "mlp.c_proj"}
    for i in range(config.n_layers):
        h = f"h.{i}."
        ours[f"layers.{i}.self_attn.in_proj_weight"] = get(h + "attn.c_attn.weight", transpose=True)
        ours[f"layers.{i}.self_attn.in_proj_bias"] = get(h + "attn.c_attn.bias")
        for mine, theirs in parts.items():
            conv = not mine.startswith("norm")
            ours[f"layers.{i}.{mine}.weight"] = get(h + theirs + ".weight", transpose=conv)
            ours[f"layers.{i}.{mine}.bias"] = get(h + theirs + ".bias")
    head = sd.get("lm_head.weight")
    if head is not None and not (head.shape == wte.shape and torch.equal(head, wte)):
        raise ValueError("state_dict's lm_head.weight must equal its wte.weight (GPT-2 ties them, as the package's "
                         f"GPT does), got a different {describe(head)}")
    expected = model.state_dict()
    for name, t in ours.items():
        if t.shape != expected[name].shape:
            raise ValueError(f"state_dict's weight for {name} must have shape {tuple(expected[name].shape)} to fit "
                             f"config, got {tuple(t.shape)}")
    with torch.no_grad():
        model.load_state_dict({**ours, "head.weight": ours["tok_embed.weight"]})
    return model.eval()
