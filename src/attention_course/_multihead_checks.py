"""The checks of a :class:`~attention_course.multihead.MultiHeadAttention` call (chapter 4): kinds, shapes, dtypes
and devices of the inputs, the masks' devices and the cache, never the data (this is the hot path). Kept apart from
the module's computation, which reads top to bottom without them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ._checks import check_flag, check_instance, check_tensor, describe
from .kv_cache import KVCache

if TYPE_CHECKING:
    from .multihead import MultiHeadAttention

__all__: list[str] = []


def check_input(name: str, t: object, width: int, ndims: tuple[int, ...], layout: str, like: torch.Tensor) -> None:
    """``t``: a tensor of ``width`` features with ``ndims`` dimensions, in ``like``'s dtype and on its device."""
    check_tensor(name, t, ndim=ndims, layout=layout)
    if t.shape[-1] != width:
        raise ValueError(f"{name} must have {width} features (its last dimension) {layout}, got shape "
                         f"{tuple(t.shape)}")
    if t.dtype != like.dtype:
        raise TypeError(f"{name} must have the parameters' dtype {like.dtype}, got {describe(t)}")
    if t.device != like.device:
        raise ValueError(f"{name} must be on the parameters' device {like.device}, got {describe(t)}")


def check_call(mha: MultiHeadAttention, query, key, value, cache, key_mask, attn_mask, is_causal,  # noqa: ANN001
               batch_first: bool, ndims: tuple[int, ...]) -> bool:
    """Validate kinds, shapes, dtypes and devices of a call (never the data: this is the hot path); the masks'
    kinds and shapes are checked by :func:`attention_course.masks.attention_mask`. Return whether batched."""
    check_flag("is_causal", is_causal)
    w = mha.out_proj.weight
    static = cache is not None and check_instance("cache", cache, KVCache).static
    layout = "(batch, n, features)" if batch_first else "(n, batch, features)"
    check_input("query", query, mha.embed_dim, ndims, layout, w)
    if static:
        # A static cache holds keys without positions (an encoder's output): causality and rotary positions
        # between a decoder's queries and those keys mean nothing.
        if key is not None or value is not None:
            raise ValueError(f"key and value must be None with a static cache (its keys and values are used), "
                             f"got key {describe(key)} and value {describe(value)}")
        if is_causal or mha.rotary is not None:
            hook = "a" if mha.rotary else "no"
            raise ValueError("a static cache's keys have no positions: is_causal must be False and the module "
                             f"must have no rotary hook, got is_causal={is_causal} and {hook} rotary hook")
    else:
        check_input("key", key, mha.kdim, (query.ndim,), layout, w)
        check_input("value", value, mha.vdim, (query.ndim,), layout, w)
        seq, b = (1, 0) if batch_first and query.ndim == 3 else (0, 1)
        if key.shape[seq] != value.shape[seq]:
            raise ValueError(f"key and value must have the same length n_k, got key {tuple(key.shape)} and "
                             f"value {tuple(value.shape)} in layout {layout}")
        if query.ndim == 3 and not query.shape[b] == key.shape[b] == value.shape[b]:
            raise ValueError(f"query, key and value must share the batch size in layout {layout}, got "
                             f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    for name, m in (("key_mask", key_mask), ("attn_mask", attn_mask)):
        if isinstance(m, torch.Tensor) and m.device != w.device:
            raise ValueError(f"{name} must be on the parameters' device {w.device}, got {describe(m)}")
    if cache is not None:
        batch, seq = (0, 1) if batch_first else (1, 0)
        check_cache(mha, cache, 1 if query.ndim == 2 else query.shape[batch], w)
        n_new = 0 if static else key.shape[seq if key.ndim == 3 else 0]
        if cache.length + n_new > cache.capacity:
            raise ValueError(f"key must fit the cache: it holds {cache.capacity} positions and {cache.length} are "
                             f"used, so at most {cache.capacity - cache.length} more; got {n_new}")
    return query.ndim == 3


def check_cache(mha: MultiHeadAttention, cache: KVCache, batch: int, like: torch.Tensor) -> None:
    """A cache made for this module (key/value heads, d_k, dtype, device) and this batch."""
    keys = cache.keys
    want = (batch, mha.num_kv_heads, mha.head_dim)
    if (keys.shape[0], keys.shape[1], keys.shape[3]) != want:
        raise ValueError(f"cache must hold (batch, num_kv_heads, capacity, d_k) = ({want[0]}, {want[1]}, capacity, "
                         f"{want[2]}) for this module and this query, got keys of shape {tuple(keys.shape)} "
                         "(a cache made for another batch or by another module?)")
    want_dtype = KVCache.dtype_for(like)
    if keys.dtype != want_dtype:
        where = "autocast's dtype" if want_dtype != like.dtype else "the parameters' dtype"
        raise TypeError(f"cache must hold keys in {where} {want_dtype}, got {describe(keys)} (a cache made "
                        "outside the autocast region that decodes, or inside it for one outside?)")
    if keys.device != like.device:
        raise ValueError(f"cache must be on the parameters' device {like.device}, got keys {describe(keys)}")
