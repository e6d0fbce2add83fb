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

from ._checks import check_choice, check_device, check_int, check_same_device, check_tensor, describe

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
    "tile_mask",
    "to_torch_masks",
]

Alignment = Literal["upper_left", "lower_right"]
#: The two causal alignments, named as in :mod:`torch.nn.attention.bias`.
ALIGNMENTS: tuple[str, ...] = ("upper_left", "lower_right")


def _check_bool(name: str, m: object, what: str = "True = may attend", hint: str = "") -> torch.Tensor:
    if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor ({what}), got {describe(m)}{hint}")
    return m


def _device(device: object) -> torch.device | None:
    return None if device is None else check_device("device", device)


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

    At the edges: an empty batch (``lengths=[]``) gives a ``(0, max_len or 0)`` mask; a length 0 gives a row of
    padding only, a query row that attends to nothing (the package's attention then returns zeros there).

    Raises:
        TypeError: tokens not an integer tensor, lengths not integers, ``pad_id``/``max_len`` not integers;
            neither or both ways of calling used.
        ValueError: lengths not 1-D, negative or longer than ``max_len``; tokens not 2-D.
    """
    if (lengths is None) == (tokens is None):
        given = "both" if tokens is not None else "neither"
        raise TypeError(f"padding_mask must be given either lengths (with optional max_len) or tokens= and pad_id=; "
                        f"got {given}")
    if tokens is not None:
        if pad_id is None:
            raise TypeError("padding_mask(tokens=...) must be given pad_id too, got pad_id=None")
        check_int("pad_id", pad_id, low=None)
        check_tensor("tokens", tokens, kind="integer", ndim=2, layout="of token ids (batch, n)")
        device = _device(device)
        return (tokens != pad_id) if device is None else (tokens != pad_id).to(device)
    if pad_id is not None:
        raise TypeError(f"pad_id must be given only with tokens= (lengths need none), got pad_id={pad_id!r}")
    device = _device(device)
    if isinstance(lengths, torch.Tensor):
        lengths_t = check_tensor("lengths", lengths, kind="integer", ndim=1, layout="(batch,)")
        lengths_t = lengths_t if device is None else lengths_t.to(device)
    else:
        if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
            raise TypeError(f"lengths must be a sequence of integers or a 1-D integer tensor, got {describe(lengths)}")
        values = [check_int(f"lengths[{i}]", v, low=0) for i, v in enumerate(lengths)]
        lengths_t = torch.tensor(values, dtype=torch.long, device=device)
    if lengths_t.numel() and int(lengths_t.min()) < 0:
        raise ValueError(f"lengths must be non-negative, got {lengths_t.tolist()}")
    longest = int(lengths_t.max()) if lengths_t.numel() else 0
    n = longest if max_len is None else check_int("max_len", max_len, low=0)
    if longest > n:
        raise ValueError(f"every length must be at most max_len={n}, got a length {longest}")
    return torch.arange(n, device=lengths_t.device)[None, :] < lengths_t[:, None]


def causal_block(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """The causal rule on absolute positions: ``(n_q, n_k)``, True where key position ≤ query position.

    Every causal mask in the package is this rule: :func:`causal_mask` for whole sequences, one tile of it in
    tiled attention, the new queries against a cache in decoding.

    Args:
        q_positions: ``(n_q,)`` integer positions of the queries. k_positions: ``(n_k,)`` of the keys.

    At the edges: zero queries or zero keys give an empty ``(n_q, n_k)`` mask.
    """
    for name, p in (("q_positions", q_positions), ("k_positions", k_positions)):
        check_tensor(name, p, kind="integer", ndim=1, layout="of positions (n,)")
    check_same_device(("q_positions", "k_positions"), (q_positions, k_positions))
    return k_positions[None, :] <= q_positions[:, None]


def tile_mask(
    mask: torch.Tensor | None, rows: range, cols: range, *, causal: bool = False, offset: int = 0,
    device: torch.device | str = "cpu"
) -> torch.Tensor | None:
    """One tile of a tiled pass's mask (chapter 6): the slice ``mask[..., rows, cols]`` and, with ``causal``, the
    causal rule (:func:`causal_block`) on the tile's positions, query ``i`` at position ``i + offset``, combined by
    logical and.

    Args:
        mask: ``None`` or a boolean mask broadcastable to the scores, True = may attend.
        rows, cols: the query and key positions the tile covers, ``range(i0, i1)`` and ``range(j0, j1)``.
        causal: apply the causal rule (only tiles that cross the diagonal need it).
        offset: where the diagonal lies: 0 for the upper-left alignment (``is_causal``), ``n_k − n_q`` for the
            lower-right one (:func:`causal_mask`'s two alignments).
        device: where the causal part is built (that of the scores).

    Returns:
        The tile's mask, or None when every pair of the tile is visible.
    """
    for name, r in (("rows", rows), ("cols", cols)):
        if not isinstance(r, range) or r.step != 1:
            raise TypeError(f"{name} must be a range of consecutive positions such as range(0, 64), got {describe(r)}")
    if mask is not None:
        check_tensor("mask", mask, kind="bool", layout="(..., n_q, n_k)")
    allowed = None if mask is None else mask[..., rows.start : rows.stop, cols.start : cols.stop]
    offset = check_int("offset", offset, low=None)
    if causal and cols.stop - 1 > rows.start + offset:  # the tile crosses the diagonal
        device = check_device("device", device)
        tri = causal_block(torch.arange(rows.start + offset, rows.stop + offset, device=device),
                           torch.arange(cols.start, cols.stop, device=device))
        allowed = tri if allowed is None else allowed & tri
    return allowed


def causal_mask(
    n_q: int,
    n_k: int | None = None,
    *,
    alignment: Alignment | None = None,
    window: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Causal mask ``(n_q, n_k)``, True = may attend (chapter 5), optionally a sliding window (chapter 6).

    Args:
        n_q: number of queries. n_k: number of keys (default ``n_q``).
        alignment: ``"upper_left"`` (query ``i`` sees keys ``j ≤ i``, PyTorch's ``is_causal``) or
            ``"lower_right"`` (the queries are the last ``n_q`` positions: query ``i`` sees ``j ≤ i + n_k − n_q``).
            Required when ``n_q ≠ n_k``; for a square mask both give ``tril(ones(n, n))``.
        window: a sliding window (Mistral's): each query sees only the ``window`` latest keys it may see, itself
            included — key position ``> query position − window``. ``None``: no window.

    At the edges: ``n_q = 0`` or ``n_k = 0`` gives an empty mask. With ``"lower_right"`` and ``n_q > n_k`` the
    first ``n_q − n_k`` queries precede every key and see none (PyTorch's ``causal_lower_right`` agrees).

    Raises:
        TypeError: sizes that are not integers.
        ValueError: negative sizes, an unknown alignment, or none given for ``n_q ≠ n_k``; a window below 1.
    """
    n_q = check_int("n_q", n_q, low=0)
    window = None if window is None else check_int("window", window, low=1)
    n_k = n_q if n_k is None else check_int("n_k", n_k, low=0)
    if alignment is None and n_q != n_k:
        raise ValueError(
            f"alignment must be 'upper_left' (queries start at key 0, as PyTorch's is_causal) or 'lower_right' "
            f"(queries are the last positions, as with a KV cache) when n_q != n_k; got n_q={n_q}, n_k={n_k} "
            "and no alignment"
        )
    if alignment is not None:
        check_choice("alignment", alignment, ALIGNMENTS)
    device = _device(device)
    first_q = n_k - n_q if alignment == "lower_right" else 0
    q_pos, k_pos = torch.arange(first_q, first_q + n_q, device=device), torch.arange(n_k, device=device)
    mask = causal_block(q_pos, k_pos)
    return mask if window is None else mask & causal_block(k_pos + window - 1, q_pos).T  # key > query − window


def key_mask_to_attn_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """``(batch, n_k)`` key mask → ``(batch, 1, 1, n_k)``, broadcastable to ``(batch, heads, n_q, n_k)``."""
    _check_bool("key_mask", key_mask, "True = real key")
    check_tensor("key_mask", key_mask, kind="bool", ndim=2, layout="(batch, n_k)")
    return key_mask[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (a key may be attended only if every mask allows it), broadcast together;
    ``None`` entries are skipped, and ``None`` is returned when all are ``None``.

    Turn a ``(batch, n_k)`` key mask into ``(batch, 1, 1, n_k)`` first with :func:`key_mask_to_attn_mask`
    (broadcasting it directly against ``(n_q, n_k)`` would align its batch axis with the queries).

    Raises:
        TypeError: a mask that is not a boolean tensor.
        ValueError: masks whose shapes do not broadcast, or masks on different devices.
    """
    named = [(f"masks[{i}]", _check_bool(f"masks[{i}]", m)) for i, m in enumerate(masks) if m is not None]
    if not named:
        return None
    present = [m for _, m in named]
    check_same_device([n for n, _ in named], present)
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError:
        shapes = ", ".join(f"{n} {tuple(m.shape)}" for n, m in named)
        raise ValueError(f"masks must broadcast to a common (..., n_q, n_k); got shapes {shapes}") from None
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

    At the edges: zero queries or keys give an empty mask; a row that may attend to no key is kept as it is
    (the attention functions return zeros there).

    Raises:
        TypeError: a mask that is not boolean (with the hint to convert PyTorch's masks); sizes not integers.
        ValueError: a mask of the wrong shape or on another device than ``device``; negative sizes.
    """
    for name, size in (("batch", batch), ("num_heads", num_heads), ("n_q", n_q), ("n_k", n_k)):
        check_int(name, size, low=0)
    device = _device(device)
    mask = None
    hint = "; convert PyTorch's masks with masks.from_torch_masks"
    if attn_mask is not None:
        _check_bool("attn_mask", attn_mask, hint=hint)
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
        _check_bool("key_mask", key_mask, "True = a real key", hint)
        if tuple(key_mask.shape) != (batch, n_k):
            raise ValueError(f"key_mask must have shape (batch, n_k) = {(batch, n_k)}, got {tuple(key_mask.shape)}")
        keys = key_mask_to_attn_mask(key_mask)
    given = [(n, m) for n, m in (("attn_mask", attn_mask), ("key_mask", key_mask)) if m is not None]
    if given:
        check_same_device([n for n, _ in given], [m for _, m in given])
        where = given[0][1].device
        if device is not None and (where.type != device.type or device.index not in (None, where.index)):
            raise ValueError(f"masks must be on device={device}, got {given[0][0]} on {given[0][1].device}")
        device = given[0][1].device
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

    A float mask is read once to check that it holds only 0 and ``-inf`` (a conversion reads every entry anyway).
    """

    def allowed(name: str, m: object) -> torch.Tensor:
        check_tensor(name, m, kind=None)
        if m.dtype == torch.bool:
            return ~m
        if m.is_floating_point():
            if not bool(((m == 0) | (m == float("-inf"))).all()):
                raise ValueError(f"float {name} must hold only 0 and -inf to have a boolean equivalent; got "
                                 "other values (an additive bias, which a boolean mask cannot express)")
            return m == 0
        raise TypeError(f"{name} must be boolean or floating point, got {describe(m)}")

    if num_heads is not None:
        check_int("num_heads", num_heads)
    key_mask = None
    if key_padding_mask is not None:
        key_mask = allowed("key_padding_mask", key_padding_mask)
        check_tensor("key_padding_mask", key_padding_mask, kind=None, ndim=2, layout="(batch, n_k)")
    am = None
    if attn_mask is not None:
        am = allowed("attn_mask", attn_mask)
        if am.ndim == 3:
            if num_heads is None or am.shape[0] % num_heads:
                raise ValueError(
                    f"num_heads must be given and divide the first dimension of a 3-D attn_mask "
                    f"(batch·num_heads, n_q, n_k); got num_heads={num_heads} for shape {tuple(am.shape)}"
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
        check_tensor("key_mask", key_mask, kind="bool", ndim=2, layout="(batch, n_k)")
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
