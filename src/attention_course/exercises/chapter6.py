"""Chapter 6's exercises: attention at scale (checks only; the solutions live in ``solutions/ch06.py``)."""

from __future__ import annotations

import math

import numpy as np
import torch

from .._checks import describe
from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from .checking import Check, agrees, compare, register

__all__: list[str] = []


def _state(g: torch.Generator, rows: int, n: int, d: int) -> tuple[torch.Tensor, ...]:
    """The online-softmax state (m, ℓ, acc) of ``n`` random scores and values per row."""
    s, v = torch.randn(rows, n, generator=g) * 3, torch.randn(rows, n, d, generator=g)
    m = s.amax(-1)
    p = torch.exp(s - m[:, None])
    return m, p.sum(-1), (p[..., None] * v).sum(-2)


def _merge64(m1, l1, a1, m2, l2, a2):  # noqa: ANN001, ANN202
    m = torch.maximum(m1, m2)
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    r1, r2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    return torch.stack([m, r1 * l1 + r2 * l2]), r1[:, None] * a1 + r2[:, None] * a2


def _merged(answer, first, second):  # noqa: ANN001, ANN202
    """None if answer merges the two states as the reference does, leaving them as they were."""
    (want_m, want_l), want_acc = _merge64(*(t.double() for t in (*first, *second)))
    kept = [t.clone() for t in (*first, *second)]
    got = answer(*first, *second)
    if not (isinstance(got, (tuple, list)) and len(got) == 3):
        return f"the answer should be a tuple (m, ℓ, acc), got {describe(got)}"
    if any(not torch.equal(a, b) for a, b in zip((*first, *second), kept, strict=True)):
        return "the answer changed its input states in place"
    m, ell, acc = got
    return (compare(m, want_m, atol=1e-6, what="m") or compare(ell, want_l, atol=1e-5, rtol=1e-5, what="ℓ")
            or compare(acc, want_acc, atol=1e-5, rtol=1e-5, what="acc"))


def _merges(answer, g):  # noqa: ANN001, ANN202
    return _merged(answer, _state(g, 4, 5, 3), _state(g, 4, 7, 3))


def _empty_states(answer, g):  # noqa: ANN001, ANN202
    empty = (torch.full((3,), -math.inf), torch.zeros(3), torch.zeros(3, 2))
    m, ell, acc = answer(*empty, *empty)
    if not (torch.isneginf(m).all() and (ell == 0).all() and (acc == 0).all()):
        return f"two empty states should merge to (−inf, 0, 0), got m = {m.tolist()}, ℓ = {ell.tolist()}"
    state = _state(g, 3, 4, 2)
    return _merged(answer, empty, state) or _merged(answer, state, empty)


register("6.1", "merging two online-softmax states", "build", "merge_states", [
    Check("(m, ℓ, acc) of the two key blocks together: max, rescaled sums", _merges),
    Check("an empty state (m = −inf, ℓ = 0) is the identity, and two empty states give no NaN", _empty_states),
])


def _stream64(q, k, v, block):  # noqa: ANN001, ANN202
    return scaled_dot_product_attention(q, k, v).output  # the package's own, tested against PyTorch's


def _stream_cases(g: torch.Generator) -> list[tuple]:
    return [(torch.randn(5, 8, generator=g), torch.randn(13, 8, generator=g), torch.randn(13, 4, generator=g), 4),
            (torch.randn(3, 16, generator=g) * 4, torch.randn(9, 16, generator=g), torch.randn(9, 2, generator=g), 9)]


def _never_all_scores(answer, g):  # noqa: ANN001, ANN202
    """Every tensor the answer's PyTorch operations make, watched by a dispatch mode: none may hold scores against
    all the keys, and no more than a few blocks of scores may be alive at once (streaming, not collecting)."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    n_q, n_k, d, d_v, block = 3, 40, 6, 7, 4
    q, k, v = torch.randn(n_q, d, generator=g), torch.randn(n_k, d, generator=g), torch.randn(n_k, d_v, generator=g)
    shapes, blocks, most = [], [], [0]

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    shapes.append(tuple(t.shape))
                    if sorted(t.shape) == sorted((n_q, block)):
                        blocks.append(weakref.ref(t))
            most[0] = max(most[0], sum(r() is not None for r in blocks))
            return out

    with Watch():
        answer(q, k, v, block)
    # k, v and their copies or transposes may span the keys; nothing else may (a query's scores against every key)
    spanning = [sh for sh in shapes if n_k in sh and sorted(sh) not in (sorted((n_k, d)), sorted((n_k, d_v)))]
    if spanning:
        return f"an operation made a tensor of shape {spanning[0]}: scores against all {n_k} keys at once"
    if not blocks:
        return f"no PyTorch operation made a block of scores ({n_q} queries × {block} keys)"
    if most[0] > 8:  # a streaming answer holds about 4 (scores, weights, the previous ones)
        return (f"{most[0]} blocks of scores or weights were alive at once (of {n_k // block}): the blocks are "
                "collected, not streamed")
    return None


register("6.2", "attention that streams over the keys", "build", "streaming_attention", [
    agrees("equals softmax(q kᵀ / √d) v, keys taken block by block with the online softmax", _stream_cases,
           _stream64, atol=1e-5),
    Check("streams: never scores against all keys at once, never more than a few blocks alive (40 keys, blocks of 4)",
          _never_all_scores),
])


def _cache_bytes(answer, g):  # noqa: ANN001, ANN202
    for args in ((32, 32, 128, 4096, 2), (32, 8, 128, 4096, 2), (12, 12, 64, 1024, 4)):
        got = answer(*args)
        layers, kv_heads, d_head, tokens, size = args
        want = 2 * layers * kv_heads * d_head * tokens * size
        if not isinstance(got, int) or got != want:
            if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
                return f"the answer should be an integer number of bytes, got {describe(got)}"
            return (f"layers, kv heads, d_head, tokens, bytes per number = {args}: {got} is too "
                    f"{'small' if got < want else 'large'}")
    return None


register("6.3", "the KV cache's size", "measure", "kv_cache_bytes", [
    Check("bytes of keys and values for every layer, key-value head and token", _cache_bytes),
])


def _window_mask(answer, g):  # noqa: ANN001, ANN202
    for n, window in ((6, 2), (8, 1), (5, 9), (10, 4), (7, 7)):
        got, want = answer(n, window), causal_mask(n, window=window)
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (n, n) or got.dtype != torch.bool:
            return f"n = {n}: expected a bool tensor of shape ({n}, {n}), got {describe(got)}"
        if not torch.equal(got, want):
            i, j = (got != want).nonzero()[0].tolist()
            return f"n = {n}, window = {window}: query {i} and key {j} are {'' if got[i, j] else 'not '}allowed"
    return None


register("6.4", "a sliding-window mask", "build", "sliding_window_mask", [
    Check("query i sees keys j with i − window < j ≤ i (the window counts the query itself)", _window_mask),
])
