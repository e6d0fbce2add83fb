"""Attention masks in one convention, and the conversions to and from PyTorch's (chapter 5).

**The package convention:** a mask is a boolean tensor broadcastable to ``(..., n_q, n_k)`` with **True = may
attend** — the convention of :func:`torch.nn.functional.scaled_dot_product_attention`. A *key mask* is the
special case of shape ``(batch, n_k)``: True = a real key (not padding); it broadcasts over the queries as
``key_mask[:, None, None, :]`` (:func:`key_mask_to_attn_mask`).

PyTorch's modules (:class:`torch.nn.MultiheadAttention`, :class:`torch.nn.Transformer` and its layers) use the
*opposite* sense: ``key_padding_mask`` is True at padding and a boolean ``attn_mask`` is True where attending is
*not* allowed; float masks hold 0 (allowed) and ``-inf`` (not allowed). :func:`from_torch` (the same function as
:func:`attention_course.multihead.masks_from_torch`) and :func:`to_torch` convert, once, at that boundary.

With these masks a query row that may attend to no key at all (e.g. a padding query whose keys are all masked)
gets zero weights and a zero output in the package's attention functions, never NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .multihead import masks_from_torch

__all__ = [
    "causal_mask",
    "combine_masks",
    "from_torch",
    "key_mask_to_attn_mask",
    "padding_mask",
    "to_torch",
]

#: PyTorch's masks (True/-inf = ignore) -> the package's (True = may attend); see ``multihead.masks_from_torch``.
from_torch = masks_from_torch


def padding_mask(
    lengths: torch.Tensor | Sequence[int] | None = None,
    max_len: int | None = None,
    *,
    tokens: torch.Tensor | None = None,
    pad_id: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Key mask ``(batch, n)``, **True = a real token** (may be attended), False = padding (chapter 5).

    Give either the sequence lengths, or the padded token ids and the padding id:

    * ``padding_mask(lengths, max_len)``: position ``j`` of row ``b`` is real iff ``j < lengths[b]``;
      ``max_len`` defaults to ``max(lengths)``.
    * ``padding_mask(tokens=ids, pad_id=0)``: ``ids != pad_id``.

    Returns:
        A boolean ``(batch, n)`` tensor, usable as ``key_mask`` of :class:`~attention_course.multihead.
        MultiHeadAttention` and of the Transformer in :mod:`attention_course.transformer`; its opposite
        ``~mask`` is PyTorch's ``key_padding_mask``.

    Raises:
        TypeError: tokens not an integer tensor; neither or both ways of calling used.
        ValueError: lengths not 1-D, negative or longer than ``max_len``; tokens not 2-D.
    """
    if (lengths is None) == (tokens is None):
        raise TypeError("padding_mask needs either lengths (with optional max_len) or tokens= and pad_id=, not both")
    if tokens is not None:
        if pad_id is None:
            raise TypeError("padding_mask(tokens=...) needs pad_id")
        if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() or tokens.dtype == torch.bool:
            got = tokens.dtype if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"tokens must be an integer tensor of token ids, got {got}")
        if tokens.ndim != 2:
            raise ValueError(f"tokens must have shape (batch, n), got {tuple(tokens.shape)}")
        return tokens != pad_id
    lengths_t = torch.as_tensor(lengths, device=device)
    if lengths_t.ndim != 1 or lengths_t.is_floating_point():
        raise ValueError(f"lengths must be a 1-D integer sequence (batch,), got shape {tuple(lengths_t.shape)} "
                         f"and dtype {lengths_t.dtype}")
    if lengths_t.numel() and int(lengths_t.min()) < 0:
        raise ValueError(f"lengths must be non-negative, got {lengths_t.tolist()}")
    longest = int(lengths_t.max()) if lengths_t.numel() else 0
    n = longest if max_len is None else int(max_len)
    if longest > n:
        raise ValueError(f"a length {longest} exceeds max_len={n}")
    return torch.arange(n, device=lengths_t.device)[None, :] < lengths_t[:, None]


def causal_mask(
    n_q: int,
    n_k: int | None = None,
    *,
    offset: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Causal mask ``(n_q, n_k)``, True = may attend: query ``i`` sees key ``j`` iff ``j <= i + offset``.

    With the default ``offset = n_k - n_q`` the queries are the *last* ``n_q`` positions of a sequence of
    ``n_k`` (bottom-right alignment): for ``n_q == n_k`` this is ``tril(ones(n, n))``, and for one new query
    against ``n_k`` cached keys (incremental decoding, chapter 5) it allows all of them. Pass ``offset=0`` for
    the top-left alignment of ``F.scaled_dot_product_attention(is_causal=True)``.

    Raises:
        ValueError: non-positive sizes.
    """
    n_k = n_q if n_k is None else n_k
    for name, v in (("n_q", n_q), ("n_k", n_k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    offset = n_k - n_q if offset is None else offset
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(diagonal=offset)


def key_mask_to_attn_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """``(batch, n_k)`` key mask → ``(batch, 1, 1, n_k)``, broadcastable to ``(batch, heads, n_q, n_k)``."""
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool or key_mask.ndim != 2:
        got = (f"{key_mask.dtype} {tuple(key_mask.shape)}" if isinstance(key_mask, torch.Tensor)
               else type(key_mask).__name__)
        raise TypeError(f"key_mask must be a boolean (batch, n_k) tensor (True = real key), got {got}")
    return key_mask[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks in the package convention (a key may be attended only if every mask allows
    it), broadcast together; ``None`` entries are skipped, and ``None`` is returned when all are ``None``.

    Combine attention-shaped masks (``(n_q, n_k)``, ``(batch, heads, n_q, n_k)``, ...); turn a ``(batch, n_k)`` key
    mask into ``(batch, 1, 1, n_k)`` first with :func:`key_mask_to_attn_mask` (broadcasting it directly against
    ``(n_q, n_k)`` would align its batch axis with the queries).

    Raises:
        TypeError: a mask that is not a boolean tensor.
        ValueError: masks whose shapes do not broadcast.
    """
    present = [m for m in masks if m is not None]
    for i, m in enumerate(present):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            got = m.dtype if isinstance(m, torch.Tensor) else type(m).__name__
            raise TypeError(f"mask {i} must be a boolean tensor (True = may attend), got {got}")
    if not present:
        return None
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"mask shapes {shapes} do not broadcast to a common (..., n_q, n_k)") from None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def to_torch(
    key_mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The package's masks → PyTorch modules' boolean masks: ``(key_padding_mask, attn_mask)``, True = ignore.

    The inverse of :func:`from_torch` for boolean masks. ``key_mask`` ``(batch, n_k)`` becomes PyTorch's
    ``key_padding_mask``; ``attn_mask`` ``(n_q, n_k)`` becomes ``nn.MultiheadAttention``'s ``attn_mask``
    (a 4-D ``(batch, heads, n_q, n_k)`` mask is flattened to PyTorch's ``(batch·heads, n_q, n_k)``; it must
    then be expanded to every head).

    Raises:
        TypeError: a mask that is not boolean.
        ValueError: an ``attn_mask`` that is neither 2-D nor 4-D.
    """
    for name, m in (("key_mask", key_mask), ("attn_mask", attn_mask)):
        if m is not None and (not isinstance(m, torch.Tensor) or m.dtype != torch.bool):
            got = m.dtype if isinstance(m, torch.Tensor) else type(m).__name__
            raise TypeError(f"{name} must be a boolean tensor (True = may attend), got {got}")
    kpm = None if key_mask is None else ~key_mask
    am = None
    if attn_mask is not None:
        if attn_mask.ndim == 4:
            am = (~attn_mask).flatten(0, 1)
        elif attn_mask.ndim == 2:
            am = ~attn_mask
        else:
            raise ValueError(f"attn_mask must be (n_q, n_k) or (batch, heads, n_q, n_k), got {tuple(attn_mask.shape)}")
    return kpm, am
