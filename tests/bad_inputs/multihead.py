"""Bad inputs for multihead.py: split_heads, merge_heads, KVCache and MultiHeadAttention (constructor, forward,
attend, the caches)."""

from __future__ import annotations

import numpy as np
import torch

from attention_course.multihead import KVCache, MultiHeadAttention, merge_heads, split_heads
from bad_inputs import case

MHA = MultiHeadAttention


def _mha(**kw) -> MultiHeadAttention:
    return MultiHeadAttention(8, 2, batch_first=True, **kw)


def _x(*shape, **kw) -> torch.Tensor:
    return torch.zeros(*shape, **kw) if shape else torch.zeros(2, 3, 8, **kw)


def _kv(*shape, **kw) -> torch.Tensor:
    return torch.zeros(*(shape or (2, 2, 4, 4)), **kw)


def _call(*args, **kw):
    x = _x()
    return _mha()(x, x, x, *args, **kw)


def _full_cache_call():
    mha, x = _mha(), _x()
    cache = mha.new_cache(2, 4)
    mha(x, x, x, cache=cache)
    return mha(x, x, x, cache=cache)  # 3 cached + 3 new > 4


def _static_cache_call(**kw):
    mha, x = _mha(), _x()
    return mha(x, kw.pop("key", None), kw.pop("value", None), cache=mha.static_cache(x), **kw)


def _append(cache: KVCache, k: object, v: object = None):
    return cache.append(k, k if v is None else v)


CASES = [
    # split_heads / merge_heads
    case(split_heads, lambda: split_heads([[1.0] * 8], 2), TypeError, arg="x", says="torch.as_tensor",
         id="multihead.split_heads-list"),
    case(split_heads, lambda: split_heads(_x(3, 8), 2), ValueError, arg="x", says="(batch, n, num_heads·d_k)",
         id="multihead.split_heads-ndim"),
    case(split_heads, lambda: split_heads(_x(), 0), ValueError, arg="num_heads", says="positive",
         id="multihead.split_heads-zero-heads"),
    case(split_heads, lambda: split_heads(_x(), 2.0), TypeError, arg="num_heads", id="multihead.split_heads-float"),
    case(split_heads, lambda: split_heads(_x(), 3), ValueError, arg="num_heads", says="divisible",
         id="multihead.split_heads-divisible"),
    case(merge_heads, lambda: merge_heads(_x()), ValueError, arg="x", says="(batch, num_heads, n, d_k)",
         id="multihead.merge_heads-ndim"),
    case(merge_heads, lambda: merge_heads(np.zeros((1, 2, 3, 4))), TypeError, arg="x",
         id="multihead.merge_heads-numpy"),
    # KVCache
    case(KVCache, lambda: KVCache([[0.0]], _kv()), TypeError, arg="keys", id="multihead.KVCache-list"),
    case(KVCache, lambda: KVCache(_kv(2, 4, 4), _kv(2, 4, 4)), ValueError, arg="keys", says="capacity",
         id="multihead.KVCache-ndim"),
    case(KVCache, lambda: KVCache(_kv(dtype=torch.long), _kv(dtype=torch.long)), TypeError, arg="keys",
         says="floating", id="multihead.KVCache-integer"),
    case(KVCache, lambda: KVCache(_kv(), _kv(2, 2, 4, 5)), ValueError, arg="values", says="shape",
         id="multihead.KVCache-shapes"),
    case(KVCache, lambda: KVCache(_kv(), _kv(dtype=torch.float64)), TypeError, arg="values", says="dtype",
         id="multihead.KVCache-dtypes"),
    case(KVCache, lambda: KVCache(_kv(), _kv(device="meta")), ValueError, arg="values", says="meta",
         id="multihead.KVCache-device"),
    case(KVCache, lambda: KVCache(_kv(), _kv(), length=5), ValueError, arg="length", says="[0, 4]",
         id="multihead.KVCache-length-over-capacity"),
    case(KVCache, lambda: KVCache(_kv(), _kv(), length=-1), ValueError, arg="length",
         id="multihead.KVCache-length-negative"),
    case(KVCache, lambda: KVCache(_kv(), _kv(), static="yes"), TypeError, arg="static",
         id="multihead.KVCache-static-flag"),
    case(KVCache, lambda: _append(KVCache(_kv(), _kv(), length=4, static=True), _kv(2, 2, 1, 4)), ValueError,
         arg="static", id="multihead.KVCache.append-static"),
    case(KVCache, lambda: _append(KVCache(_kv(), _kv()), _kv(2, 3, 1, 4)), ValueError, arg="k",
         says="(2, 2, n_new, 4)", id="multihead.KVCache.append-heads"),
    case(KVCache, lambda: _append(KVCache(_kv(), _kv()), _kv(2, 2, 1, 4, dtype=torch.float64)), TypeError, arg="k",
         says="dtype", id="multihead.KVCache.append-dtype"),
    case(KVCache, lambda: _append(KVCache(_kv(), _kv()), _kv(2, 2, 1, 4), [[0.0]]), TypeError, arg="v",
         id="multihead.KVCache.append-list"),
    case(KVCache, lambda: _append(KVCache(_kv(), _kv()), _kv(2, 2, 1, 4, device="meta")), ValueError, arg="k",
         says="meta", id="multihead.KVCache.append-device"),
    case(KVCache, lambda: _append(KVCache(_kv(), _kv(), length=3), _kv(2, 2, 2, 4)), ValueError, arg="k",
         says="at most 1 more", id="multihead.KVCache.append-full"),
    # MultiHeadAttention: the constructor
    case(MHA, lambda: MHA(0, 2), ValueError, arg="embed_dim", says="positive", id="multihead.MHA-embed-zero"),
    case(MHA, lambda: MHA(-8, 2), ValueError, arg="embed_dim", id="multihead.MHA-embed-negative"),
    case(MHA, lambda: MHA(8.0, 2), TypeError, arg="embed_dim", id="multihead.MHA-embed-float"),
    case(MHA, lambda: MHA(8, 0), ValueError, arg="num_heads", id="multihead.MHA-zero-heads"),
    case(MHA, lambda: MHA(10, 3), ValueError, arg="num_heads", says="divisible", id="multihead.MHA-divisible"),
    case(MHA, lambda: MHA(12, 4, num_kv_heads=3), ValueError, arg="num_kv_heads", says="divisible",
         id="multihead.MHA-kv-heads"),
    case(MHA, lambda: MHA(8, 2, kdim=0), ValueError, arg="kdim", id="multihead.MHA-kdim"),
    case(MHA, lambda: MHA(8, 2, dropout=1.5), ValueError, arg="dropout", says="[0, 1]",
         id="multihead.MHA-dropout-high"),
    case(MHA, lambda: MHA(8, 2, dropout=-0.1), ValueError, arg="dropout", id="multihead.MHA-dropout-negative"),
    case(MHA, lambda: MHA(8, 2, dropout="0.1"), TypeError, arg="dropout", id="multihead.MHA-dropout-str"),
    case(MHA, lambda: MHA(8, 2, batch_first=1), TypeError, arg="batch_first", id="multihead.MHA-batch-first"),
    case(MHA, lambda: MHA(8, 2, rotary="rope"), TypeError, arg="rotary", id="multihead.MHA-rotary"),
    case(MHA, lambda: MHA(8, 2, dtype=torch.long), TypeError, arg="dtype", id="multihead.MHA-dtype"),
    case(MHA, lambda: MHA(8, 2, device="nowhere"), ValueError, arg="device", id="multihead.MHA-device"),
    # MultiHeadAttention.forward
    case(MHA, lambda: _mha()([[0.0] * 8], _x(), _x()), TypeError, arg="query", says="torch.as_tensor",
         id="multihead.MHA.forward-list"),
    case(MHA, lambda: _mha()(_x(dtype=torch.long), _x(), _x()), TypeError, arg="query", says="floating",
         id="multihead.MHA.forward-integer"),
    case(MHA, lambda: _mha()(*[_x(dtype=torch.float64)] * 3), TypeError, arg="query", says="float32",
         id="multihead.MHA.forward-dtype"),
    case(MHA, lambda: _mha()(*[_x(device="meta")] * 3), ValueError, arg="query", says="meta",
         id="multihead.MHA.forward-device"),
    case(MHA, lambda: _mha()(_x(1, 2, 3, 8), _x(), _x()), ValueError, arg="query", says="2-D or 3-D",
         id="multihead.MHA.forward-ndim"),
    case(MHA, lambda: _mha()(_x(), _x(2, 3, 7), _x()), ValueError, arg="key", says="8 features",
         id="multihead.MHA.forward-width"),
    case(MHA, lambda: _mha()(_x(), _x(), _x(2, 4, 8)), ValueError, arg="value", says="same length",
         id="multihead.MHA.forward-lengths"),
    case(MHA, lambda: _mha()(_x(), _x(3, 3, 8), _x(3, 3, 8)), ValueError, arg="query", says="batch size",
         id="multihead.MHA.forward-batch"),
    case(MHA, lambda: _call(key_mask=torch.ones(2, 3)), TypeError, arg="key_mask", says="boolean",
         id="multihead.MHA.forward-float-key-mask"),
    case(MHA, lambda: _call(key_mask=torch.ones(3, dtype=torch.bool)), ValueError, arg="key_mask",
         says="(batch, n_k)", id="multihead.MHA.forward-key-mask-shape"),
    case(MHA, lambda: _call(attn_mask=torch.zeros(3, 3)), TypeError, arg="attn_mask", says="boolean",
         id="multihead.MHA.forward-float-attn-mask"),
    case(MHA, lambda: _call(key_mask=torch.ones(2, 3, dtype=torch.bool, device="meta")), ValueError,
         arg="key_mask", says="meta", id="multihead.MHA.forward-mask-device"),
    case(MHA, lambda: _call(is_causal="yes"), TypeError, arg="is_causal", id="multihead.MHA.forward-is-causal"),
    case(MHA, lambda: _call(need_weights=None), TypeError, arg="need_weights", id="multihead.MHA.forward-need"),
    case(MHA, lambda: _call(average_attn_weights=1), TypeError, arg="average_attn_weights",
         id="multihead.MHA.forward-average"),
    case(MHA, lambda: _call(cache=(_kv(), _kv())), TypeError, arg="cache", says="KVCache",
         id="multihead.MHA.forward-cache-kind"),
    case(MHA, lambda: _call(cache=_mha().new_cache(3, 8)), ValueError, arg="cache", says="another batch",
         id="multihead.MHA.forward-cache-batch"),
    case(MHA, lambda: _call(cache=_mha(num_kv_heads=1).new_cache(2, 8)), ValueError, arg="cache",
         says="another module", id="multihead.MHA.forward-cache-heads"),
    case(MHA, lambda: _call(cache=_mha(dtype=torch.float64).new_cache(2, 8)), TypeError, arg="cache",
         says="float32", id="multihead.MHA.forward-cache-dtype"),
    case(MHA, _full_cache_call, ValueError, arg="key", says="at most 1 more", id="multihead.MHA.forward-cache-full"),
    case(MHA, lambda: _static_cache_call(key=_x(), value=_x()), ValueError, arg="key", says="static",
         id="multihead.MHA.forward-static-key"),
    case(MHA, lambda: _static_cache_call(is_causal=True), ValueError, arg="is_causal", says="static",
         id="multihead.MHA.forward-static-causal"),
    case(MHA, lambda: _mha().attend(_x(3, 8), _x(3, 8), _x(3, 8)), ValueError, arg="query", says="3-D",
         id="multihead.MHA.attend-unbatched"),
    # the caches a module makes
    case(MHA, lambda: _mha().new_cache(2, 0), ValueError, arg="capacity", id="multihead.MHA.new_cache-capacity"),
    case(MHA, lambda: _mha().new_cache(-1, 4), ValueError, arg="batch", id="multihead.MHA.new_cache-batch"),
    case(MHA, lambda: _mha().new_cache(2.0, 4), TypeError, arg="batch", id="multihead.MHA.new_cache-float"),
    case(MHA, lambda: _mha().static_cache([[0.0] * 8]), TypeError, arg="key", id="multihead.MHA.static_cache-list"),
    case(MHA, lambda: _mha().static_cache(_x(2, 3, 6)), ValueError, arg="key", says="8 features",
         id="multihead.MHA.static_cache-width"),
    case(MHA, lambda: _mha().static_cache(_x(), _x(2, 4, 8)), ValueError, arg="value", says="(batch, n_k)",
         id="multihead.MHA.static_cache-lengths"),
]

CASES += [
    case(MHA, lambda: MHA(8, 2, rotary=lambda t, positions: t[..., :2])(torch.ones(1, 3, 8), torch.ones(1, 3, 8),
                                                                         torch.ones(1, 3, 8)),
         ValueError, arg="rotary", says="shape", id="multihead.MHA-rotary-shape"),
    case(MHA, lambda: MHA(8, 2, device="cuda:9"), ValueError, arg="device", says="machine has",
         id="multihead.MHA-absent-device"),
]
