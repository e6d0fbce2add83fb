"""Bad inputs for interop.py: modules from_torch and to_torch cannot convert."""

from __future__ import annotations

from torch import nn

from attention_course.interop import from_torch, to_torch
from attention_course.multihead import MultiHeadAttention
from attention_course.positional import apply_rope
from bad_inputs import case


def _custom_transformer() -> nn.Transformer:
    return nn.Transformer(8, 2, 1, 1, 16, custom_encoder=nn.Identity(), custom_decoder=nn.Identity())


CASES = [
    case(from_torch, lambda: from_torch(nn.Linear(2, 2)), TypeError, arg="module", says="Linear",
         id="interop.from_torch-linear"),
    case(from_torch, lambda: from_torch("mha"), TypeError, arg="module", id="interop.from_torch-str"),
    case(from_torch, lambda: from_torch(MultiHeadAttention(8, 2)), TypeError, arg="module",
         says="MultiHeadAttention", id="interop.from_torch-already-ours"),
    case(from_torch, lambda: from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True)), ValueError, arg="module",
         says="add_bias_kv", id="interop.from_torch-bias-kv"),
    case(from_torch, lambda: from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True)), ValueError,
         arg="module", says="add_zero_attn=True", id="interop.from_torch-zero-attn"),
    case(from_torch, lambda: from_torch(_custom_transformer()), TypeError, arg="module", says="Identity",
         id="interop.from_torch-custom-layers"),
    case(to_torch, lambda: to_torch(nn.MultiheadAttention(8, 2)), TypeError, arg="module",
         says="MultiheadAttention", id="interop.to_torch-torch-module"),
    case(to_torch, lambda: to_torch(None), TypeError, arg="module", id="interop.to_torch-none"),
    case(to_torch, lambda: to_torch(MultiHeadAttention(8, 2, num_kv_heads=1)), ValueError, arg="module",
         says="num_kv_heads=1", id="interop.to_torch-gqa"),
    case(to_torch, lambda: to_torch(MultiHeadAttention(8, 2, rotary=apply_rope)), ValueError, arg="module",
         says="rotary", id="interop.to_torch-rotary"),
]

CASES += [
    case(from_torch, lambda: from_torch(nn.Transformer(8, 2, 0, 1, 16)), ValueError, arg="module",
         says="at least one encoder", id="interop.from_torch-no-encoder-layers"),
]

# ----------------------------------------------------------------------------------------- GPT-2 (chapter 7)
from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402

from attention_course.gpt import GPT, GPTConfig  # noqa: E402
from attention_course.interop import from_gpt2_state_dict, gpt2_config  # noqa: E402

_GPT2 = GPTConfig(13, 8, 1, 2, max_len=6, positions="learned", activation="gelu_tanh")


def _gpt2_weights(**replace) -> dict:
    """A GPT-2 state dict of ``_GPT2``'s sizes, made by converting a package GPT's weights back by hand."""
    m = GPT(_GPT2)
    sd = {"transformer.wte.weight": m.tok_embed.weight, "transformer.wpe.weight": m.pos_embed.weight,
          "transformer.ln_f.weight": m.norm.weight, "transformer.ln_f.bias": m.norm.bias,
          "lm_head.weight": m.tok_embed.weight}
    layer = m.layers[0]
    for ours, theirs in (("norm1", "ln_1"), ("norm2", "ln_2"), ("self_attn.out_proj", "attn.c_proj"),
                         ("linear1", "mlp.c_fc"), ("linear2", "mlp.c_proj")):
        module = layer.get_submodule(ours)
        sd[f"transformer.h.0.{theirs}.weight"] = module.weight if "norm" in ours else module.weight.t()
        sd[f"transformer.h.0.{theirs}.bias"] = module.bias
    sd["transformer.h.0.attn.c_attn.weight"] = layer.self_attn.in_proj_weight.t()
    sd["transformer.h.0.attn.c_attn.bias"] = layer.self_attn.in_proj_bias
    sd.update(replace)
    return {k: v for k, v in sd.items() if v is not None}


def _gpt2_hf_config(**kw):
    base = dict(vocab_size=13, n_embd=8, n_layer=1, n_head=2, n_positions=6, layer_norm_epsilon=1e-5,
                activation_function="gelu_new", n_inner=None)
    return SimpleNamespace(**{**base, **kw})


CASES += [
    case(from_gpt2_state_dict, lambda: from_gpt2_state_dict([1, 2], _GPT2), TypeError, arg="state_dict",
         id="interop.from_gpt2_state_dict-list"),
    case(from_gpt2_state_dict, lambda: from_gpt2_state_dict(_gpt2_weights(), {"n_layer": 1}), TypeError,
         arg="config", says="GPTConfig", id="interop.from_gpt2_state_dict-config-dict"),
    case(from_gpt2_state_dict, lambda: from_gpt2_state_dict(_gpt2_weights(), GPTConfig(13, 8, 1, 2)), ValueError,
         arg="config", says="learned", id="interop.from_gpt2_state_dict-rotary"),
    case(from_gpt2_state_dict,
         lambda: from_gpt2_state_dict(_gpt2_weights(**{"transformer.h.0.attn.c_attn.weight": None}), _GPT2),
         ValueError, arg="state_dict", says="attn.c_attn.weight", id="interop.from_gpt2_state_dict-missing"),
    case(from_gpt2_state_dict,
         lambda: from_gpt2_state_dict(_gpt2_weights(**{"transformer.wpe.weight": torch.zeros(7, 8)}), _GPT2),
         ValueError, arg="state_dict", says="(6, 8)", id="interop.from_gpt2_state_dict-shape"),
    case(from_gpt2_state_dict,
         lambda: from_gpt2_state_dict(_gpt2_weights(**{"lm_head.weight": torch.zeros(13, 8)}), _GPT2),
         ValueError, arg="lm_head.weight", says="tie", id="interop.from_gpt2_state_dict-untied"),
    case(from_gpt2_state_dict,
         lambda: from_gpt2_state_dict(_gpt2_weights(**{"transformer.ln_f.bias": [0.0]}), _GPT2),
         TypeError, arg="state_dict['ln_f.bias']", id="interop.from_gpt2_state_dict-not-tensor"),
    case(gpt2_config, lambda: gpt2_config({"n_embd": 8}), TypeError, arg="config", says="n_layer",
         id="interop.gpt2_config-dict"),
    case(gpt2_config, lambda: gpt2_config(_gpt2_hf_config(activation_function="swish")), ValueError,
         arg="config.activation_function", id="interop.gpt2_config-activation"),
]
