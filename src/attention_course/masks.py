"""Every attention mask the package uses, in one convention, and the conversions to and from PyTorch's (chapter 5).

**The convention:** a mask is a boolean tensor broadcastable to ``(..., n_q, n_k)`` with **True = may attend**,
as in :func:`torch.nn.functional.scaled_dot_product_attention`. A *key mask* is the special case ``(batch, n_k)``:
True = a real key (not padding); :func:`key_mask_to_attn_mask` makes it ``(batch, 1, 1, n_k)``.

**Causal masks always name their alignment** when there are more keys than queries or fewer (``n_q ≠ n_k``), the
two names of :mod:`torch.nn.attention.bias`:

* ``"upper_left"``: query ``i`` sees keys ``j ≤ i``; queries and keys both start at position 0. This is
  ``F.scaled_dot_product_attention(is_causal=True)`` and what a model computes on one whole sequence.
* ``"lower_right"``: the queries are the *last* ``n_q`` of ``n_k`` positions, so query ``i`` sees keys
  ``j ≤ i + n_k − n_q``. This is what new tokens need when the keys of earlier tokens are already cached
  (chunked prefill, decoding one token at a time).

Both are the one rule of :func:`causal_block`, key position ≤ query position, for the positions each alignment
gives the queries. For ``n_q == n_k`` the two coincide and the alignment may be left out.

PyTorch's modules (:class:`torch.nn.MultiheadAttention`, :class:`torch.nn.Transformer`) use the *opposite* sense:
``key_padding_mask`` is True at padding and a boolean ``attn_mask`` is True where attending is *not* allowed;
float masks hold 0 (allowed) and ``-inf``. :func:`from_torch_masks` and :func:`to_torch_masks` convert, once, at
that boundary. A query row that may attend to no key gets zero weights and a zero output in the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

__all__ = [
    "ALIGNMENTS",
    "Alignment",
    "attention_mask",
    "causal_block",
    "causal_mask",
    "combine_masks",
    "from_torch_masks",
    "key_mask_to_attn_mask",
    "padding_mask",
    "to_torch_masks",
]

Alignment = Literal["upper_left", "lower_right"]
#: The two causal alignments, named as in :mod:`torch.nn.attention.bias`.
ALIGNMENTS: tuple[str, ...] = ("upper_left", "lower_right")


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _describe(x: object) -> str:
    return f"{x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__


def _check_bool(name: str, m: object, what: str = "True = may attend") -> torch.Tensor:
    if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor ({what}), got {_describe(m)}")
    return m


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

    Its negation ``~mask`` is PyTorch's ``key_padding_mask``.

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
            raise TypeError(f"tokens must be an integer tensor of token ids, got {_describe(tokens)}")
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


def causal_block(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """The causal rule on absolute positions: ``(n_q, n_k)``, True where key position ≤ query position.

    Every causal mask in the package is this rule: :func:`causal_mask` for whole sequences, one tile of it in
    tiled attention, the new queries against a cache in decoding.

    Args:
        q_positions: ``(n_q,)`` integer positions of the queries. k_positions: ``(n_k,)`` of the keys.
    """
    for name, p in (("q_positions", q_positions), ("k_positions", k_positions)):
        if not isinstance(p, torch.Tensor) or p.ndim != 1 or p.is_floating_point() or p.dtype == torch.bool:
            raise TypeError(f"{name} must be a 1-D integer tensor of positions, got {_describe(p)}")
    return k_positions[None, :] <= q_positions[:, None]


def causal_mask(
    n_q: int,
    n_k: int | None = None,
    *,
    alignment: Alignment | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Causal mask ``(n_q, n_k)``, True = may attend (chapter 5).

    Args:
        n_q: number of queries. n_k: number of keys (default ``n_q``).
        alignment: ``"upper_left"`` (query ``i`` sees keys ``j ≤ i``, PyTorch's ``is_causal``) or
            ``"lower_right"`` (the queries are the last ``n_q`` positions: query ``i`` sees ``j ≤ i + n_k − n_q``).
            Required when ``n_q ≠ n_k``; for a square mask both give ``tril(ones(n, n))``.

    Raises:
        ValueError: non-positive sizes, an unknown alignment, or none given for ``n_q ≠ n_k``.
    """
    n_q = _positive_int("n_q", n_q)
    n_k = n_q if n_k is None else _positive_int("n_k", n_k)
    if alignment is None and n_q != n_k:
        raise ValueError(
            f"a causal mask with n_q={n_q} != n_k={n_k} needs alignment='upper_left' (queries start at key 0, "
            "as PyTorch's is_causal) or 'lower_right' (queries are the last positions, as with a KV cache)"
        )
    if alignment is not None and alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    first_q = n_k - n_q if alignment == "lower_right" else 0
    q_pos = torch.arange(first_q, first_q + n_q, device=device)
    return causal_block(q_pos, torch.arange(n_k, device=device))


def key_mask_to_attn_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """``(batch, n_k)`` key mask → ``(batch, 1, 1, n_k)``, broadcastable to ``(batch, heads, n_q, n_k)``."""
    _check_bool("key_mask", key_mask, "True = real key")
    if key_mask.ndim != 2:
        raise ValueError(f"key_mask must have shape (batch, n_k), got {tuple(key_mask.shape)}")
    return key_mask[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (a key may be attended only if every mask allows it), broadcast together;
    ``None`` entries are skipped, and ``None`` is returned when all are ``None``.

    Turn a ``(batch, n_k)`` key mask into ``(batch, 1, 1, n_k)`` first with :func:`key_mask_to_attn_mask`
    (broadcasting it directly against ``(n_q, n_k)`` would align its batch axis with the queries).

    Raises:
        TypeError: a mask that is not a boolean tensor.
        ValueError: masks whose shapes do not broadcast.
    """
    present = [_check_bool(f"mask {i}", m) for i, m in enumerate(masks) if m is not None]
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


def attention_mask(
    batch: int,
    num_heads: int,
    n_q: int,
    n_k: int,
    *,
    key_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    causal: Alignment | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor | None:
    """The one mask a multi-head attention layer applies, ``(batch|1, num_heads|1, n_q, n_k)``, or None (chapter 5).

    Checks and combines what a caller may give :class:`~attention_course.multihead.MultiHeadAttention`.

    Args:
        batch, num_heads, n_q, n_k: the scores' shape ``(batch, num_heads, n_q, n_k)``.
        key_mask: boolean ``(batch, n_k)``, True = a real key.
        attn_mask: boolean ``(n_q, n_k)`` or ``(batch|1, num_heads|1, n_q, n_k)``, True = may attend.
        causal: add a causal mask with this alignment (None: no causal mask).

    Raises:
        TypeError: a mask that is not boolean (with the hint to convert PyTorch's masks).
        ValueError: a mask of the wrong shape.
    """
    mask = None
    hint = "; convert PyTorch's masks with masks.from_torch_masks"
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
            raise TypeError(f"attn_mask must be a boolean tensor (True = may attend), got {_describe(attn_mask)}{hint}")
        ok = attn_mask.ndim == 2 and tuple(attn_mask.shape) == (n_q, n_k)
        if attn_mask.ndim == 4:
            b, h = attn_mask.shape[:2]
            ok = tuple(attn_mask.shape[2:]) == (n_q, n_k) and b in (1, batch) and h in (1, num_heads)
        if not ok:
            raise ValueError(
                f"attn_mask must have shape (n_q, n_k) = {(n_q, n_k)} or (batch|1, num_heads|1, n_q, n_k) = "
                f"({batch}|1, {num_heads}|1, {n_q}, {n_k}), got {tuple(attn_mask.shape)}"
            )
        mask = attn_mask if attn_mask.ndim == 4 else attn_mask[None, None]
    keys = tri = None
    if key_mask is not None:
        if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
            raise TypeError(f"key_mask must be a boolean tensor (True = a real key), got {_describe(key_mask)}{hint}")
        if tuple(key_mask.shape) != (batch, n_k):
            raise ValueError(f"key_mask must have shape (batch, n_k) = {(batch, n_k)}, got {tuple(key_mask.shape)}")
        keys = key_mask_to_attn_mask(key_mask)
    if causal is not None:
        tri = causal_mask(n_q, n_k, alignment=causal, device=device)[None, None]
    return combine_masks(mask, keys, tri)


def from_torch_masks(
    key_padding_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    num_heads: int | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """PyTorch modules' masks → the package's ``(key_mask, attn_mask)``: boolean, True = may attend.

    The one place where PyTorch's sense (True or ``-inf`` = *ignore*) is translated.

    Args:
        key_padding_mask: PyTorch's ``(batch, n_k)`` mask, True = padding, or a float mask of 0 and ``-inf``.
        attn_mask: PyTorch's ``(n_q, n_k)`` or ``(batch·num_heads, n_q, n_k)`` mask, True = not allowed, or a
            float mask of 0 and ``-inf`` (other additive biases have no boolean equivalent and raise).
        num_heads: needed only to unfold a 3-D ``attn_mask`` to ``(batch, num_heads, n_q, n_k)``.

    Returns:
        ``(key_mask, attn_mask)``, ``None`` where the input was ``None``.
    """

    def allowed(name: str, m: object) -> torch.Tensor:
        if not isinstance(m, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor, got {type(m).__name__}")
        if m.dtype == torch.bool:
            return ~m
        if m.is_floating_point():
            if not bool(((m == 0) | (m == float("-inf"))).all()):
                raise ValueError(f"float {name} must hold only 0 and -inf to have a boolean equivalent")
            return m == 0
        raise TypeError(f"{name} must be boolean or floating point, got dtype {m.dtype}")

    key_mask = None if key_padding_mask is None else allowed("key_padding_mask", key_padding_mask)
    am = None
    if attn_mask is not None:
        am = allowed("attn_mask", attn_mask)
        if am.ndim == 3:
            if num_heads is None or am.shape[0] % num_heads:
                raise ValueError(
                    f"a 3-D attn_mask of shape {tuple(am.shape)} = (batch·num_heads, n_q, n_k) needs "
                    f"num_heads dividing its first dimension, got num_heads={num_heads}"
                )
            am = am.unflatten(0, (-1, num_heads))
        elif am.ndim != 2:
            raise ValueError(
                f"attn_mask must be (n_q, n_k) or (batch·num_heads, n_q, n_k), got shape {tuple(am.shape)}"
            )
    return key_mask, am


def to_torch_masks(
    key_mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The package's masks → PyTorch modules' boolean masks ``(key_padding_mask, attn_mask)``, True = ignore.

    The inverse of :func:`from_torch_masks` for boolean masks. A 4-D ``(batch, heads, n_q, n_k)`` ``attn_mask``
    becomes PyTorch's ``(batch·heads, n_q, n_k)`` (it must then be expanded to every head).

    Raises:
        TypeError: a mask that is not boolean.
        ValueError: an ``attn_mask`` that is neither 2-D nor 4-D.
    """
    if key_mask is not None:
        _check_bool("key_mask", key_mask, "True = real key")
    if attn_mask is not None:
        _check_bool("attn_mask", attn_mask)
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
