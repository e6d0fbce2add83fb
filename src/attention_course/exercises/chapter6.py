"""Chapter 6's exercises: attention at scale (checks only; the solutions live in ``solutions/ch06.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from .._checks import describe
from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from .checking import Check, agrees, autograd_saves, changed_inputs, compare, compare_count, register

__all__: list[str] = []


def _state(g: torch.Generator, rows: int, n: int, d: int, spread: float = 3.0) -> tuple[torch.Tensor, ...]:
    """The online-softmax state (m, ℓ, acc) of ``n`` random scores (standard deviation ``spread``) and values per
    row."""
    s, v = torch.randn(rows, n, generator=g) * spread, torch.randn(rows, n, d, generator=g)
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
    if changed_inputs((*first, *second), kept):
        return "the answer changed its input states in place"
    m, ell, acc = got
    return (compare(m, want_m, atol=1e-6, what="m") or compare(ell, want_l, atol=1e-5, rtol=1e-5, what="ℓ")
            or compare(acc, want_acc, atol=1e-5, rtol=1e-5, what="acc"))


def _merges(answer, g):  # noqa: ANN001, ANN202
    pairs = {"typical": (_state(g, 4, 5, 3), _state(g, 4, 7, 3)),
             # maxima thousands apart: the smaller block's terms underflow to 0 and must not become NaN
             "extreme": (_state(g, 5, 6, 2, spread=2000.0), _state(g, 5, 3, 2, spread=2000.0)),
             "unusual shapes": (_state(g, 1, 1, 1), _state(g, 1, 2, 1))}  # one row, one score, d = 1
    for family, (first, second) in pairs.items():
        verdict = _merged(answer, first, second)
        if verdict:
            return f"{family} states: {verdict}"
    return None


def _empty_states(answer, g):  # noqa: ANN001, ANN202
    empty = (torch.full((3,), -math.inf), torch.zeros(3), torch.zeros(3, 2))
    m, ell, acc = answer(*empty, *empty)
    if not (torch.isneginf(m).all() and (ell == 0).all() and (acc == 0).all()):
        return f"two empty states should merge to (−inf, 0, 0), got m = {m.tolist()}, ℓ = {ell.tolist()}"
    state = _state(g, 3, 4, 2)
    verdict = _merged(answer, empty, state) or _merged(answer, state, empty)
    if verdict:
        return verdict
    # row 1 empty in both states, row 0 in the first only, row 2 in the second only: a guard that handles "every
    # row empty" and nothing less gives NaN in row 1
    mixed_a, mixed_b = _state(g, 3, 4, 2), _state(g, 3, 5, 2)
    for (m, ell, acc), rows in ((mixed_a, [0, 1]), (mixed_b, [1, 2])):
        m[rows], ell[rows], acc[rows] = -math.inf, 0.0, 0.0
    verdict = _merged(answer, mixed_a, mixed_b)
    return f"some rows empty, in one state or both: {verdict}" if verdict else None


register("6.1", "merging two online-softmax states", "build", "merge_states", [
    Check("(m, ℓ, acc) of the two key blocks together: typical states, maxima thousands apart, one row", _merges),
    Check("an empty state (m = −inf, ℓ = 0) is the identity, in every row or in some rows, and two empty states "
          "give no NaN", _empty_states),
])


def _stream64(q, k, v, block):  # noqa: ANN001, ANN202
    return scaled_dot_product_attention(q, k, v).output  # the package's own, tested against PyTorch's


def _stream_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    rising = torch.arange(1.0, 13.0)[:, None] * 30  # each block's keys longer than the last: the max keeps rising
    return {
        "typical": [(torch.randn(5, 8, generator=g), torch.randn(13, 8, generator=g), torch.randn(13, 4, generator=g),
                     4),
                    (torch.randn(3, 16, generator=g) * 4, torch.randn(9, 16, generator=g),
                     torch.randn(9, 2, generator=g), 9)],
        "extreme": [(torch.randn(4, 6, generator=g).abs(), torch.randn(12, 6, generator=g).abs() * rising,
                     torch.randn(12, 3, generator=g), 3),
                    (torch.randn(2, 4, generator=g) * 300, torch.randn(10, 4, generator=g),
                     torch.randn(10, 5, generator=g), 4)],
        "unusual shapes": [(torch.randn(3, 5, generator=g), torch.randn(1, 5, generator=g),
                            torch.randn(1, 2, generator=g), 4),  # one key, a block larger than the keys
                           (torch.randn(1, 7, generator=g), torch.randn(7, 7, generator=g),
                            torch.randn(7, 1, generator=g), 1)],  # one query, blocks of one key
    }


def _never_all_scores(answer, g):  # noqa: ANN001, ANN202
    """Every tensor the answer's PyTorch operations make, watched by a dispatch mode (a hook that sees each
    operation PyTorch runs): each score is computed once (one pass over the keys, as the online softmax makes
    it), no tensor holds as many scores as all the keys at once, and no more than a few blocks of scores are alive
    at a time. Tiling the queries as well as the keys (as FlashAttention does) is allowed."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    n_q, n_k, d, d_v, block = 3, 40, 6, 7, 4
    q, k, v = torch.randn(n_q, d, generator=g), torch.randn(n_k, d, generator=g), torch.randn(n_k, d_v, generator=g)
    big, blocks, most, computed = [], [], [0], [0]
    products = {"mm", "bmm", "matmul", "addmm", "baddbmm", "mv", "dot", "einsum"}

    def is_block(t: torch.Tensor) -> bool:  # scores or weights of up to n_q queries against one block of keys
        return t.ndim == 2 and block in t.shape and min(t.shape) <= n_q and t.shape != (block, block)

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if not isinstance(t, torch.Tensor):
                    continue
                # k, v and their copies, reshapes or transposes hold all the keys; nothing else may hold as many
                # numbers as one score per query and key
                if t.numel() >= n_q * n_k and t.numel() not in (k.numel(), v.numel()):
                    big.append(tuple(t.shape))
                if is_block(t):
                    blocks.append(weakref.ref(t))
                    if func.__name__.split(".")[0] in products:
                        computed[0] += t.numel()
            most[0] = max(most[0], sum(r() is not None for r in blocks))
            return out

    with Watch():
        answer(q, k, v, block)
    if big:
        return f"an operation made a tensor of shape {big[0]}: as many scores as all {n_k} keys at once"
    if not blocks:
        return f"no PyTorch operation made a block of scores (up to {n_q} queries × {block} keys)"
    if computed[0] > n_q * n_k:
        return (f"{computed[0]} scores were computed for {n_q} queries × {n_k} keys: a second pass over the keys "
                "(the online softmax needs one)")
    if most[0] > 8:  # a streaming answer holds about 4 (scores, weights, the previous ones)
        return (f"{most[0]} blocks of scores or weights were alive at once (of {n_k // block}): the blocks are "
                "collected, not streamed")
    return None


register("6.2", "attention that streams over the keys", "build", "streaming_attention", [
    agrees("equals softmax(q kᵀ / √d) v: typical inputs, scores that rise from block to block or reach the "
           "hundreds, one key, blocks of one key", _stream_cases, _stream64, atol=1e-4, rtol=1e-4),
    Check("streams: one pass over the keys, never as many scores as all keys at once, never more than a few blocks "
          "alive (40 keys, blocks of 4)", _never_all_scores),
])


def _cache_bytes(answer, g):  # noqa: ANN001, ANN202
    for args in ((32, 32, 128, 4096, 2), (32, 8, 128, 4096, 2), (12, 12, 64, 1024, 4)):
        layers, kv_heads, d_head, tokens, size = args
        verdict = compare_count(answer(*args), 2 * layers * kv_heads * d_head * tokens * size,
                                what="number of bytes", where=f"layers, kv heads, d_head, tokens, bytes = {args}")
        if verdict:
            return verdict
    return None


register("6.3", "the KV cache's size", "measure", "kv_cache_bytes", [
    Check("bytes of keys and values for every layer, key-value head and token", _cache_bytes),
])


def _window_mask(answer, g):  # noqa: ANN001, ANN202
    for n, window in ((6, 2), (8, 1), (5, 9), (10, 4), (7, 7)):
        got, want = answer(n, window), causal_mask(n, window=window)
        if isinstance(got, np.ndarray) and got.dtype == np.bool_:
            got = torch.from_numpy(got)  # judged by value: a NumPy mask is a mask too
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (n, n) or got.dtype != torch.bool:
            return f"n = {n}: expected a bool tensor of shape ({n}, {n}), got {describe(got)}"
        if not torch.equal(got, want):
            i, j = (got != want).nonzero()[0].tolist()
            return f"n = {n}, window = {window}: query {i} and key {j} are {'' if got[i, j] else 'not '}allowed"
    return None


register("6.4", "a sliding-window mask", "build", "sliding_window_mask", [
    Check("query i sees keys j with i − window < j ≤ i (the window counts the query itself)", _window_mask),
])


# ------------------------------------------------------------------------------------------ 6.5, the project
def _flash64(q, k, v, grad_out, block_q, block_k, causal):  # noqa: ANN001, ANN202
    """The float64 oracle, live: PyTorch's attention and autograd's gradients, and each row's log-sum-exp."""
    import torch.nn.functional as F

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # upper left, as masks.causal_mask
        grads = torch.autograd.grad(out, (q, k, v), grad_out)
    s = q.detach() @ k.detach().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], alignment="upper_left"), -math.inf)
    return out.detach(), torch.logsumexp(s, -1), *grads


def _flash_inputs(g: torch.Generator, batch: int, heads: int, n_q: int, n_k: int, d: int, d_v: int,
                  spread: float = 1.0) -> list[torch.Tensor]:
    """q, k, v and grad_out, (batch, heads, n, width), float32 from the check's generator; q times ``spread``."""
    q = torch.randn(batch, heads, n_q, d, generator=g) * spread
    return [q, *(torch.randn(batch, heads, n, w, generator=g) for n, w in ((n_k, d), (n_k, d_v), (n_q, d_v)))]


def _flash_typical(g: torch.Generator) -> list[tuple]:
    return [(*_flash_inputs(g, 1, 1, 12, 12, 8, 8), 4, 4, False),
            (*_flash_inputs(g, 1, 2, 16, 16, 8, 6, spread=2.0), 4, 8, True),
            (*_flash_inputs(g, 2, 1, 10, 14, 4, 4), 4, 4, False)]


def _flash_extreme(g: torch.Generator) -> list[tuple]:
    hundreds = _flash_inputs(g, 1, 2, 9, 11, 8, 4, spread=100.0)  # scores in the hundreds
    # rows whose maxima differ by thousands: each key's last coordinate is 1, so query i's last coordinate adds the
    # same offset (thousands) to all its scores, and the softmax within the row stays as spread as ever
    q, k, v, do = _flash_inputs(g, 1, 2, 10, 12, 5, 3)
    k[..., -1] = 1.0
    q[..., -1] = torch.randn(1, 2, 10, generator=g) * 1500 * math.sqrt(5)
    # scores that rise from key block to key block (by ~30 per key): a max kept from an earlier block overflows
    rising = torch.arange(1.0, 13.0)[:, None] * 30
    up = _flash_inputs(g, 1, 1, 8, 12, 6, 3)
    up[0], up[1] = up[0].abs(), up[1].abs() * rising
    return [(*hundreds, 3, 4, False), (q, k, v, do, 4, 3, False), (*up, 4, 3, False), (*up, 3, 4, True)]


def _flash_unusual(g: torch.Generator) -> list[tuple]:
    return [(*_flash_inputs(g, 2, 3, 9, 11, 5, 3), 4, 5, False),  # batch and heads; n not a multiple of the blocks
            (*_flash_inputs(g, 1, 2, 7, 13, 4, 2), 3, 5, True),  # causal, fewer queries than keys
            (*_flash_inputs(g, 1, 1, 13, 5, 4, 3), 4, 2, True),  # causal, more queries than keys
            (*_flash_inputs(g, 1, 1, 5, 1, 3, 2), 2, 4, False),  # a single key, a block larger than the keys
            (*_flash_inputs(g, 1, 1, 3, 4, 3, 1), 1, 1, True),  # blocks of one query and one key; d_v = 1
            (*_flash_inputs(g, 2, 1, 5, 7, 2, 3), 16, 32, True)]  # blocks larger than n


_FLASH_PARTS = ("out", "lse", "dq", "dk", "dv")


def _flash_agrees(cases: Callable[[torch.Generator], list[tuple]], family: str) -> Callable:
    def run(answer, g):  # noqa: ANN001, ANN202
        for number, args in enumerate(cases(g), 1):
            kept = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            got = answer(*args)
            shapes = ", ".join(str(tuple(a.shape)) for a in kept[:4])
            where = f"{family} inputs, case {number} (q, k, v, grad_out {shapes}; blocks {args[4]}×{args[5]}" + (
                ", causal)" if args[6] else ")")
            if not (isinstance(got, (tuple, list)) and len(got) == len(_FLASH_PARTS)):
                return f"{where}: the answer should be a tuple (out, lse, dq, dk, dv), got {describe(got)}"
            want = _flash64(*(a.double() if isinstance(a, torch.Tensor) else a for a in kept))
            for name, got_part, want_part in zip(_FLASH_PARTS, got, want, strict=True):
                # float32 rounds each score to ~6e-8 of its size, and the weights inherit that absolute error:
                # the tolerance grows with the largest score and with the part's own size
                tol = 5e-5 * (1 + float(want[1].abs().max()) / 50)
                verdict = compare(got_part, want_part, atol=tol * (1 + float(want_part.abs().max())), what=name)
                if verdict:
                    return f"{where}: {verdict}"
            if changed_inputs(args, kept):
                return f"{where}: the answer changed its inputs in place"
        return None

    return run


def _watch_tiles(answer, args: tuple, tiles: set[tuple[int, int]], limit: int,
                 too_wide: Callable[[tuple[int, ...]], bool] = lambda shape: False) -> dict:  # noqa: ANN001
    """Run ``answer(*args)`` under a dispatch mode (a hook that sees each operation PyTorch runs, as 6.2's check):
    what its operations made — tensors of ``limit`` numbers or more, tiles (last two dimensions in ``tiles``), the
    most tiles alive at once — and whether it called PyTorch's fused attention."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict = {"big": [], "fused": [], "tiles": 0, "most": 0}
    alive: list[weakref.ref] = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            if "attention" in name:  # PyTorch's fused attention, forward or backward
                seen["fused"].append(name)
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if not isinstance(t, torch.Tensor):
                    continue
                if t.numel() >= limit or too_wide(tuple(t.shape)):
                    seen["big"].append((tuple(t.shape), name))
                if t.ndim >= 2 and tuple(t.shape[-2:]) in tiles:
                    seen["tiles"] += 1
                    alive.append(weakref.ref(t))
            alive[:] = [r for r in alive if r() is not None]
            seen["most"] = max(seen["most"], len(alive))
            return out

    with Watch():
        answer(*args)
    return seen


def _flash_memory(answer, g):  # noqa: ANN001, ANN202
    """Every tensor the answer's PyTorch operations make, in both passes: none as large as the scores of a tile of
    queries against all the keys (or of all the queries against a block of keys), tiles of block_q × block_k scores
    made, no more than a few of them alive at once (autograd through a tiled loop keeps every one), and no fused
    attention."""
    batch, heads, n_q, n_k, d, d_v, block_q, block_k = 1, 2, 48, 84, 2, 3, 8, 7  # twelve key blocks a tile
    limit = batch * heads * min(block_q * n_k, n_q * block_k)  # inputs and outputs hold at most 504 numbers

    def too_wide(shape: tuple[int, ...]) -> bool:
        """One head's scores of a query tile against all the keys, or of all the queries against a key block (a
        loop over the heads makes them smaller than ``limit``): inputs, outputs and heads side by side are narrower."""
        rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[-1] if shape else 1)
        return any((a == n_k and b >= block_q) or (a == n_q and b >= block_k) for a, b in ((rows, cols), (cols, rows)))

    for causal in (False, True):
        args = (*_flash_inputs(g, batch, heads, n_q, n_k, d, d_v), block_q, block_k, causal)
        seen = _watch_tiles(answer, args, {(block_q, block_k), (block_k, block_q)}, limit, too_wide)
        where = f"causal = {causal}, q {tuple(args[0].shape)}, k {tuple(args[1].shape)}, blocks {block_q}×{block_k}"
        if seen["fused"]:
            return f"{where}: the answer called PyTorch's fused attention ({seen['fused'][0]})"
        if seen["big"]:
            shape, name = seen["big"][0]
            return (f"{where}: an operation ({name}) made a tensor of shape {shape}, as large as the scores of "
                    f"{block_q} queries against all {n_k} keys or more")
        if not seen["tiles"]:
            return f"{where}: no PyTorch operation made a tile of {block_q} × {block_k} scores"
        if seen["most"] > 16:  # a streaming answer holds about six; one that collects a tile's 12 blocks, 24 or more
            return (f"{where}: {seen['most']} tiles of scores were alive at once: the tiles are kept (autograd "
                    "through the loop keeps every one for its backward pass), not recomputed")
    return None


def _flash_without_autograd(answer, g):  # noqa: ANN001, ANN202
    args = (*_flash_inputs(g, 1, 2, 9, 11, 4, 3), 4, 3, False)  # inputs that do not require grad
    saved, _ = autograd_saves(answer, args)  # autograd, on a whole pass or on one tile, saves tensors
    return f"autograd saved {saved} tensor(s) while the answer ran: the backward pass is to be written by hand" \
        if saved else None


register("6.5", "FlashAttention's forward and backward passes, tile by tile", "project", "flash_forward_backward", [
    Check("equals attention and its gradients (float64 oracle: out, lse, dq, dk, dv), leaving the inputs "
          "unchanged: typical inputs", _flash_agrees(_flash_typical, "typical")),
    Check("the same with scores in the hundreds, row maxima thousands apart, scores rising from key block to key "
          "block", _flash_agrees(_flash_extreme, "extreme")),
    Check("the same with batch and heads, n not a multiple of the blocks, n_q ≠ n_k (causal, upper left), one "
          "key, blocks of one and blocks larger than n", _flash_agrees(_flash_unusual, "unusual shapes")),
    Check("memory-bounded in both passes: never a tensor as large as one query tile against all keys, tiles of "
          "block_q × block_k scores, a few alive at a time, no fused attention", _flash_memory),
    Check("uses no autograd, on the whole or on a tile", _flash_without_autograd),
])
