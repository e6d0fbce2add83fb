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
