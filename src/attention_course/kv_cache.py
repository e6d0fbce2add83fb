"""The key/value cache of incremental decoding (chapter 5; timed in chapter 6, used by the GPT of chapter 7).

Each attention layer keeps the keys and values it has projected so far, so that a decoding step projects only
its new token's: :meth:`attention_course.multihead.MultiHeadAttention.new_cache` makes one for self-attention and
:meth:`~attention_course.multihead.MultiHeadAttention.static_cache` one for cross-attention's encoder memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import check_flag, check_int, check_same_device, check_tensor, describe

__all__ = ["KVCache"]


@dataclass
class KVCache:
    """One attention layer's projected keys and values, kept between calls (chapter 5; timed in chapter 6).

    Self-attention appends each call's new keys and values (:meth:`MultiHeadAttention.new_cache`); a *static*
    cache holds keys and values projected once, e.g. the encoder's output in cross-attention
    (:meth:`MultiHeadAttention.static_cache`).

    Attributes:
        keys, values: ``(batch, num_kv_heads, capacity, d_k)``, filled up to ``length``.
        length: positions held.
        static: True for keys and values that are never appended to.

    At the edges: a static cache of an empty memory has ``capacity = length = 0`` (queries then attend to nothing
    and get zero attention outputs).
    """

    keys: torch.Tensor
    values: torch.Tensor
    length: int = 0
    static: bool = False

    def __post_init__(self) -> None:
        layout = "(batch, num_kv_heads, capacity, d_k)"
        check_tensor("keys", self.keys, ndim=4, layout=layout)
        check_tensor("values", self.values, ndim=4, layout=layout)
        if self.values.shape != self.keys.shape:
            raise ValueError(f"values must have the keys' shape {tuple(self.keys.shape)} {layout}, "
                             f"got {tuple(self.values.shape)}")
        if self.values.dtype != self.keys.dtype:
            raise TypeError(f"values must have the keys' dtype {self.keys.dtype}, got {describe(self.values)}")
        check_same_device(("keys", "values"), (self.keys, self.values))
        self.length = check_int("length", self.length, low=0, high=self.capacity)
        self.static = check_flag("static", self.static)

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values in use (preallocated room not counted)."""
        return 2 * self.keys[:, :, : self.length].numel() * self.keys.element_size()

    @staticmethod
    def dtype_for(weight: torch.Tensor) -> torch.dtype:
        """The dtype of keys and values projected with ``weight``: autocast's where ``torch.autocast`` is on for its
        device (a GPU training in bfloat16, say), else the weight's own."""
        kind = weight.device.type
        if weight.is_floating_point() and torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind):
            return torch.get_autocast_dtype(kind)
        return weight.dtype

    @classmethod
    def empty(cls, shape: tuple[int, int, int, int], like: torch.Tensor) -> KVCache:
        """An empty cache of ``shape`` ``(batch, num_kv_heads, capacity, d_k)`` on ``like``'s device, in
        :meth:`dtype_for` ``like`` (so make it inside the autocast region that decodes, if there is one)."""
        dtype = cls.dtype_for(like)
        return cls(like.new_empty(shape, dtype=dtype), like.new_empty(shape, dtype=dtype))

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k``, ``v`` ``(batch, num_kv_heads, n_new, d_k)`` after the cached positions; return all of them.
        At the edges: ``n_new = 0`` stores nothing. A refused call leaves the cache as it was."""
        if self.static:
            raise ValueError(f"a cache to append to must have static=False; this one holds keys and values projected "
                             f"once (static=True), got new keys {describe(k)}")
        b, h, _, d = self.keys.shape
        for name, t in (("k", k), ("v", v)):
            check_tensor(name, t, ndim=4, layout="(batch, num_kv_heads, n_new, d_k)")
            if t.shape[:2] != (b, h) or t.shape[3] != d:
                raise ValueError(f"{name} must have shape (batch, num_kv_heads, n_new, d_k) = ({b}, {h}, n_new, {d}) "
                                 f"to fit the cache, got {tuple(t.shape)}")
            if t.dtype != self.keys.dtype:
                raise TypeError(f"{name} must have the cache's dtype {self.keys.dtype}, got {describe(t)}")
        if v.shape != k.shape:
            raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
        check_same_device(("the cache", "k", "v"), (self.keys, k, v))
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"k must fit the cache: it holds {self.capacity} positions and {self.length} are used, "
                             f"so at most {self.capacity - self.length} more; got {k.shape[2]} more")
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]
