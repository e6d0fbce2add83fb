"""Bad inputs for gpt.py: configurations, tokens, caches and generation settings the GPT refuses."""

from __future__ import annotations

import torch

from attention_course.gpt import GPT, GPTCache, GPTConfig, gelu_tanh, generate
from bad_inputs import case

IDS = torch.tensor([[1, 2, 3], [4, 5, 6]])


def _model(**kw) -> GPT:
    return GPT(GPTConfig(**{"vocab_size": 11, "d_model": 8, "n_layers": 2, "n_heads": 2, "max_len": 8, **kw}))


def _other_cache():
    return _model()(IDS, _model().new_cache(2, 8))


def _full_cache():
    m = _model()
    cache = m.new_cache(2, 4)
    m(IDS, cache)
    return m(IDS, cache)


CASES = [
    case(GPTConfig, lambda: GPTConfig(0), ValueError, arg="vocab_size", id="gpt.GPTConfig-vocab"),
    case(GPTConfig, lambda: GPTConfig(10, d_model=10, n_heads=4), ValueError, arg="d_model", says="divisible",
         id="gpt.GPTConfig-divisible"),
    case(GPTConfig, lambda: GPTConfig(10, n_heads=4, num_kv_heads=3), ValueError, arg="num_kv_heads",
         id="gpt.GPTConfig-kv-heads"),
    case(GPTConfig, lambda: GPTConfig(10, positions="sinusoidal"), ValueError, arg="positions",
         id="gpt.GPTConfig-positions"),
    case(GPTConfig, lambda: GPTConfig(10, d_model=12, n_heads=4), ValueError, arg="d_model", says="even",
         id="gpt.GPTConfig-odd-head-rotary"),
    case(GPTConfig, lambda: GPTConfig(10, activation="swish"), ValueError, arg="activation",
         id="gpt.GPTConfig-activation"),
    case(GPTConfig, lambda: GPTConfig(10, dropout=1.5), ValueError, arg="dropout", id="gpt.GPTConfig-dropout"),
    case(GPTConfig, lambda: GPTConfig(10, norm_first=1), TypeError, arg="norm_first", id="gpt.GPTConfig-flag"),
    case(GPT, lambda: GPT({"vocab_size": 10}), TypeError, arg="config", says="GPTConfig", id="gpt.GPT-dict"),
    case(GPT, lambda: _model()(IDS.float()), TypeError, arg="tokens", says="integer", id="gpt.GPT.forward-float"),
    case(GPT, lambda: _model()(IDS[0]), ValueError, arg="tokens", says="(batch, n)", id="gpt.GPT.forward-1d"),
    case(GPT, lambda: _model()(IDS + 10), ValueError, arg="tokens", says="[0, 11)", id="gpt.GPT.forward-ids"),
    case(GPT, lambda: _model(positions="learned")(torch.zeros(1, 9, dtype=torch.long)), ValueError, arg="tokens",
         says="max_len", id="gpt.GPT.forward-too-long"),
    case(GPT, lambda: _model()(IDS, cache=[]), TypeError, arg="cache", says="GPTCache", id="gpt.GPT.forward-cache"),
    case(GPT, _other_cache, ValueError, arg="cache", says="another model", id="gpt.GPT.forward-other-cache"),
    case(GPT, _full_cache, ValueError, arg="tokens", says="fit the cache", id="gpt.GPT.forward-full-cache"),
    case(GPT, lambda: _model()(IDS, _model().new_cache(3, 8)), ValueError, arg="cache", id="gpt.GPT.forward-batch"),
    case(GPT, lambda: _model()(IDS, attn_weights=()), TypeError, arg="attn_weights", id="gpt.GPT.forward-weights"),
    case(GPT, lambda: _model().new_cache(-1), ValueError, arg="batch", id="gpt.GPT.new_cache-batch"),
    case(GPT, lambda: _model(positions="learned").new_cache(1, 9), ValueError, arg="capacity",
         id="gpt.GPT.new_cache-capacity"),
    case(GPT, lambda: _model().embed(IDS, start=-1), ValueError, arg="start", id="gpt.GPT.embed-start"),
    case(GPTCache, lambda: GPTCache([torch.zeros(1)]), TypeError, arg="layers[0]", says="KVCache",
         id="gpt.GPTCache-layer"),
    case(GPTCache, lambda: GPTCache(()), TypeError, arg="layers", id="gpt.GPTCache-tuple"),
    case(generate, lambda: generate(torch.nn.Linear(2, 2), IDS, 3), TypeError, arg="model", says="GPT",
         id="gpt.generate-model"),
    case(generate, lambda: generate(_model(), IDS[:, :0], 3), ValueError, arg="prompt", says="at least one",
         id="gpt.generate-empty-prompt"),
    case(generate, lambda: generate(_model(), IDS, -1), ValueError, arg="max_new_tokens",
         id="gpt.generate-negative"),
    case(generate, lambda: generate(_model(positions="learned"), IDS, 6), ValueError, arg="max_new_tokens",
         says="max_len", id="gpt.generate-too-long"),
    case(generate, lambda: generate(_model(), IDS, 0, temperature=-1.0), ValueError, arg="temperature",
         id="gpt.generate-temperature"),
    case(generate, lambda: generate(_model(), IDS, 2, top_p=0.0), ValueError, arg="top_p", id="gpt.generate-top-p"),
    case(generate, lambda: generate(_model(), IDS, 2, use_cache="yes"), TypeError, arg="use_cache",
         id="gpt.generate-use-cache"),
    case(generate, lambda: generate(_model(), IDS, 2, generator=7), TypeError, arg="generator",
         id="gpt.generate-generator"),
    case(gelu_tanh, lambda: gelu_tanh([1.0]), TypeError, arg="x", id="gpt.gelu_tanh-list"),
]
