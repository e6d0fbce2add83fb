"""FlashAttention-2 as Triton kernels (chapter 6): the forward pass and the backward pass of
:mod:`attention_course.flash`, each tile now one block of a GPU program instead of a PyTorch call.

A Triton kernel is a Python function run once per *program*; a launch runs a grid of them, here one per block of
rows and per (batch, head). ``tl.load``/``tl.store`` move whole tiles between memory and registers, ``tl.dot``
multiplies tiles, the rest is element-wise — ``tiled.py`` without the round trips to memory between operations.

**Forward** (:func:`forward_kernel`, Dao 2023, Algorithm 1): each program owns ``BLOCK_M`` queries (the outer
loop is the grid) and walks over the keys ``BLOCK_N`` at a time (the inner loop), carrying the online-softmax
state ``(m, ℓ, acc)`` of :mod:`attention_course.tiled`; it divides by ``ℓ`` once at the end and writes the output
and each row's log-sum-exp ``lse = m + log ℓ``, the one number per row the backward pass needs.

**Backward**, from what the forward pass saved — ``Q``, ``K``, ``V``, ``O`` and ``lse`` — with
``D = rowsum(dO ∘ O)`` (:func:`delta_kernel`, one read of ``O`` and ``dO``, linear in ``n``) and
``P_ij = exp(S_ij − lse_i)`` recomputed tile by tile. :func:`dkdv_kernel` gives each program ``BLOCK_N`` keys (key
blocks outer) and walks over the query blocks (inner), accumulating ``dV += Pᵀ dO`` and ``dK += dSᵀ Q`` with
``dS = P ∘ (dO Vᵀ − D)``, all **in the transposed form**: it computes ``Sᵀ = K Qᵀ``, ``Pᵀ`` and ``dPᵀ = V dOᵀ``
directly, so that its own ``K`` and ``V`` are the left operand of every product — loaded once and written to
shared memory once, before the loop — the query tile's ``Q`` and ``dO`` the right ones (put in shared memory by
the loop's loads), and ``Pᵀ`` and ``dSᵀ`` go into ``Pᵀ dO`` and ``dSᵀ Q`` from registers as they are computed.
Written the other way (``S = Q Kᵀ``, then ``tl.trans``), the compiled kernel wrote tiles into shared memory on every
iteration, eight such writes across its loops (:func:`~attention_course.kernels.aot.stores_in_loops` counts them).

``dQ`` has two ways. By default, :func:`dq_kernel` is a second pass with the loops the other way round (query
blocks outer) that recomputes ``P`` and ``dS`` and accumulates ``dQ += dS K``: every output has one writer, so the
gradients do not depend on the order the programs run in — seven tile products per (query tile, key tile) pair,
``QKᵀ``, ``dO Vᵀ``, ``Pᵀ dO``, ``dSᵀ Q`` in the first pass and ``QKᵀ``, ``dO Vᵀ``, ``dS K`` in the second, 40 % more
backward arithmetic than FlashAttention-2's five, and every weight's ``exp2`` twice. With ``ATOMIC_DQ``
(``triton_attention(..., deterministic=False)``) the dK, dV programs also form ``dS K`` for each tile and add it
into a float32 ``dQ`` with atomic adds (Dao 2023, Algorithm 2): five products, no second pass, but the additions
from different programs land in an order that varies from run to run, and so do the last bits of ``dQ``.

**Masks only where they are needed.** Block sizes are powers of two (``tl.arange`` needs them), so the last tile
of an ``n`` that is not a multiple overhangs the tensor: its loads are masked (``other=0``), its stores masked.
``causal`` is a diagonal at ``OFFSET``: query ``i`` sees keys ``j ≤ i + OFFSET`` (0: upper-left, as
``is_causal``; ``n_k − n_q``: lower-right, new queries after cached keys), and ``WINDOW`` (a sliding window, as
Mistral's) keeps only keys ``j > i + OFFSET − WINDOW``. Each loop runs in parts (:func:`_key_range`): the tiles
every row of the block sees whole, with no mask at all, and the few that need one — a window's left edge, the tiles
crossing the diagonal, the ragged last tile — where scores outside the mask are set to ``-inf`` (weight 0) before
``exp2``. Tiles no real row sees are not visited: about half of them in a causal square, all but
``≈ (WINDOW + BLOCK_M) / BLOCK_N + 1`` per row of tiles with a window. A row that sees no key (lower-right with
``n_q > n_k``) gets a zero output and ``lse = -inf``, as :func:`attention_course.tiled.tiled_attention`.

**exp2, one FMA a weight.** The softmax is computed in base 2: ``exp2`` (one GPU instruction; ``exp`` is ``exp2``
after a multiply) replaces ``exp`` in every tile, and each weight's exponent ``qk · scale · log₂e − m`` is one
fused multiply-add of the raw product — the row's maximum ``m`` is taken from the products before scaling (their
smallest when the scale is negative, ``NEGATIVE``); ``lse`` is stored in natural-log units, as the other tiled
passes return it.

**Any size the GPU can hold.** The grid is one axis of ``blocks × batch × heads`` programs
(:func:`_block_and_head`), whose limit is 2³¹ − 1, not 65,535 as on the grid's other axes. Offsets within a head,
``position · d``, are int32 — cheaper in registers and address arithmetic — unless one head's ``n · d`` reaches
2³¹, where the launch asks for int64 (``LONG``); offsets between heads are always int64.

**Grouped-query attention.** ``K`` and ``V`` may have fewer heads than ``Q`` (``GROUP`` query heads share each
key-value head): a program reads the key-value head of its query head, and the backward pass writes dK and dV per
query head, which the wrapper sums over each group — float32 buffers ``GROUP`` times the size of K and V (twice
that again for 16-bit inputs), the price of one writer per output without atomic adds.

**Without a GPU.** With ``TRITON_INTERPRET=1`` set before triton is first imported (this module imports it at
the first call), Triton runs the same kernels in its numpy interpreter on CPU tensors, exact enough to test
against ``F.scaled_dot_product_attention``; :mod:`attention_course.kernels.aot` compiles them for an NVIDIA
architecture without one, to show that they compile and how much shared memory their tiles take.
"""

from __future__ import annotations

from typing import Any

#: The kernels (``forward_kernel``, ``dkdv_kernel``, ``dq_kernel``, ``delta_kernel``) are launched by
#: :func:`~attention_course.kernels.flash_triton.triton_attention` only, which checks their arguments.
__all__ = ["HELPERS"]

#: ``triton.language``, bound by :func:`~attention_course.kernels.flash_triton.kernels_for` at the first call
#: (the kernels read it as a global).
tl: Any = None


def _positions(first, BLOCK: tl.constexpr, LONG: tl.constexpr):  # noqa: ANN001, N803 -- Triton's arguments
    """Positions ``first … first + BLOCK − 1`` along a sequence: int32, or int64 when ``LONG`` (one head's
    ``n · d`` reaches 2³¹, where the int32 offsets ``position · D`` would wrap)."""
    positions = first + tl.arange(0, BLOCK)
    if LONG:
        positions = positions.to(tl.int64)
    return positions


def _load_rows(ptr, rows, cols_d, n, D):  # noqa: ANN001, N803
    """The ``(len(rows), BLOCK_D)`` tile of an ``(n, D)`` row-major matrix at ``ptr``, zeros outside it."""
    return tl.load(ptr + rows[:, None] * D + cols_d[None, :], mask=(rows[:, None] < n) & (cols_d[None, :] < D),
                   other=0.0)


def _visible(i, j, N_Q, N_K, OFFSET, WINDOW, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr):  # noqa: ANN001, N803
    """Whether query position ``i`` may attend to key position ``j`` (two broadcastable tiles of positions:
    ``rows[:, None], cols[None, :]`` for a tile of S, ``rows[None, :], cols[:, None]`` for one of Sᵀ): inside
    both matrices and, if causal, ``j ≤ i + OFFSET`` (the diagonal's alignment), and, with a window,
    ``j > i + OFFSET − WINDOW``."""
    visible = (i < N_Q) & (j < N_K)
    if CAUSAL:
        visible = visible & (j <= i + OFFSET)
    if WINDOWED:
        visible = visible & (j > i + OFFSET - WINDOW)
    return visible


def _block_and_head(N, HEADS, GROUP, BLOCK: tl.constexpr):  # noqa: ANN001, N803
    """This program's block along a sequence of ``N`` positions, its (batch, query head) ``bh`` (int64, for the
    offsets ``bh · n · d``) and the key-value head ``kv`` that query head reads. The grid is one axis (up to
    2³¹ − 1 programs; axes 1 and 2 stop at 65,535), the blocks of one head adjacent, so that they share K and V in
    the L2 cache."""
    blocks = tl.cdiv(N, BLOCK)
    pid = tl.program_id(0)
    block, bh = pid % blocks, (pid // blocks).to(tl.int64)
    return block, bh, bh // HEADS * (HEADS // GROUP) + bh % HEADS // GROUP


def _key_range(first_row, N_Q, N_K, OFFSET, WINDOW, CAUSAL: tl.constexpr,  # noqa: ANN001, N803
               WINDOWED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """For the query block starting at ``first_row``, key positions ``lo ≤ inner ≤ full ≤ hi`` (``lo``, ``inner``,
    ``full`` multiples of BLOCK_N): the block's real rows see keys only in ``[lo, hi)``, and every one of them
    sees each key of the tiles in ``[inner, full)`` — those need no mask. The tiles in ``[lo, inner)`` (a window's
    edge) and ``[full, hi)`` (the diagonal, the ragged last tile) are masked."""
    last_row = tl.minimum(first_row + BLOCK_M, N_Q) - 1  # the block's last real row
    lo = 0
    hi = N_K
    full = N_K // BLOCK_N * BLOCK_N  # tiles wholly inside the keys
    if CAUSAL:  # the last row sees keys ≤ last_row + OFFSET; every row, keys ≤ first_row + OFFSET
        hi = tl.maximum(tl.minimum(last_row + OFFSET + 1, N_K), 0)
        full = tl.maximum(tl.minimum(first_row + OFFSET + 1, N_K), 0) // BLOCK_N * BLOCK_N
    inner = lo
    if WINDOWED:  # the first row sees keys > first_row + OFFSET − WINDOW; every row, keys > last_row + OFFSET − WINDOW
        lo = tl.maximum(first_row + OFFSET - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
        inner = tl.minimum((tl.maximum(last_row + OFFSET - WINDOW + 1, 0) + BLOCK_N - 1) // BLOCK_N * BLOCK_N, full)
        inner = tl.maximum(inner, lo)
        full = tl.maximum(full, inner)
    return lo, inner, full, hi


def _query_range(block, N_Q, N_K, OFFSET, WINDOW, CAUSAL: tl.constexpr,  # noqa: ANN001, N803
                 WINDOWED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """For key block ``block``, query positions ``first ≤ full ≤ inner_end ≤ end``: only queries in
    ``[first, end)`` see its keys, and each query tile in ``[full, inner_end)`` sees every one of them — no mask;
    the tiles in ``[first, full)`` (the diagonal) and ``[inner_end, end)`` (a window's far edge) are masked, and
    so is every tile of a ragged last key block (a padded key's weight ``exp2(0 − lse)`` may overflow)."""
    first, full, end = 0, 0, N_Q
    last_key = tl.minimum(block * BLOCK_N + BLOCK_N, N_K) - 1  # the block's last real key
    if CAUSAL:  # queries before first_key − OFFSET see none of this block; from last_key − OFFSET on, all of it
        first = tl.maximum(block * BLOCK_N - OFFSET, 0) // BLOCK_M * BLOCK_M
        full = tl.minimum((tl.maximum(last_key - OFFSET, 0) + BLOCK_M - 1) // BLOCK_M * BLOCK_M,
                          (N_Q + BLOCK_M - 1) // BLOCK_M * BLOCK_M)
    inner_end = end
    if WINDOWED:  # queries from first_key − OFFSET + WINDOW on no longer see the block's first key; none see it
        end = tl.minimum(last_key - OFFSET + WINDOW, N_Q)  # from last_key − OFFSET + WINDOW on
        inner_end = tl.maximum(tl.minimum((block * BLOCK_N - OFFSET + WINDOW) // BLOCK_M * BLOCK_M, end), full)
    inner_end = tl.where(block * BLOCK_N + BLOCK_N > N_K, full, inner_end)
    return first, full, inner_end, end


def _forward_tile(acc, m, ell, q, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET, WINDOW,  # noqa: ANN001, N803
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, NEGATIVE: tl.constexpr,
                  BLOCK_N: tl.constexpr, LONG: tl.constexpr):
    """One key tile of the online softmax, in base 2: the weights are ``exp2(qk · scale · log₂e − m)``, one FMA
    and one ``exp2`` each. Returns the updated state ``(acc, m, ell)``; ``m`` is the running maximum of the scaled
    scores (``NEGATIVE``: the scale is negative, so that is ``scale`` times the smallest ``qk``)."""
    cols = _positions(start, BLOCK_N, LONG)
    k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)
    qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) dot products, float32
    if MASKED:  # scaled, then masked: -inf outside the mask whatever the scale's sign
        s = tl.where(_visible(rows[:, None], cols[None, :], N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED),
                     qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        # a row that has seen no key yet keeps m = -inf: subtract 0 instead, so exp2 gives 0, not NaN
        m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_new_safe[:, None])
    else:  # every row sees every key: the row's maximum from the products, the weights by one FMA each
        if NEGATIVE:
            m_new = tl.maximum(m, tl.min(qk, axis=1) * qk_scale)
        else:
            m_new = tl.maximum(m, tl.max(qk, axis=1) * qk_scale)
        m_new_safe = m_new  # finite: an unmasked tile gives every row a finite score
        p = tl.exp2(qk * qk_scale - m_new_safe[:, None])
    rescale = tl.exp2(m - m_new_safe)  # 0 on a row's first tile (m = -inf)
    ell = ell * rescale + tl.sum(p, axis=1)
    acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)  # 16-bit inputs: P rounded to 16 bits, as fused
    return acc, m_new, ell  # kernels do


def forward_kernel(Q, K, V, O, LSE, qk_scale, N_Q, N_K, D, HEADS, GROUP, OFFSET, WINDOW,  # noqa: ANN001, N803
                   CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, NEGATIVE: tl.constexpr, LONG: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_M queries of one (batch, head) against every visible key, online softmax."""
    block, bh, kv = _block_and_head(N_Q, HEADS, GROUP, BLOCK_M)
    rows = _positions(block * BLOCK_M, BLOCK_M, LONG)
    cols_d = tl.arange(0, BLOCK_D)
    Q, O, LSE = Q + bh * N_Q * D, O + bh * N_Q * D, LSE + bh * N_Q  # this (batch, head)'s slices
    K, V = K + kv * N_K * D, V + kv * N_K * D
    q = _load_rows(Q, rows, cols_d, N_Q, D)

    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of each row's scaled scores (base 2)
    ell = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(s - m)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)  # running sum of exp2(s - m) v
    lo, inner, full, hi = _key_range(block * BLOCK_M, N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED, BLOCK_M, BLOCK_N)
    for start in range(lo, inner, BLOCK_N):  # a window's left edge
        acc, m, ell = _forward_tile(acc, m, ell, q, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                                    WINDOW, True, CAUSAL, WINDOWED, NEGATIVE, BLOCK_N, LONG)
    for start in range(inner, full, BLOCK_N):  # seen whole by every row: no mask
        acc, m, ell = _forward_tile(acc, m, ell, q, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                                    WINDOW, False, CAUSAL, WINDOWED, NEGATIVE, BLOCK_N, LONG)
    for start in range(full, hi, BLOCK_N):  # on the diagonal, the ragged last tile
        acc, m, ell = _forward_tile(acc, m, ell, q, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                                    WINDOW, True, CAUSAL, WINDOWED, NEGATIVE, BLOCK_N, LONG)
    empty = ell == 0.0  # a row that sees no key (lower-right with n_q > n_k): zero output, lse = -inf
    out = acc / tl.where(empty, 1.0, ell)[:, None]  # normalise once
    lse2 = m + tl.log2(tl.where(empty, 1.0, ell))  # base 2; times ln 2 below: natural log
    lse = tl.where(empty, float("-inf"), lse2 * 0.6931471805599453)
    tl.store(O + rows[:, None] * D + cols_d[None, :], out.to(O.dtype.element_ty),
             mask=(rows[:, None] < N_Q) & (cols_d[None, :] < D))
    tl.store(LSE + rows, lse, mask=rows < N_Q)


def _row_stats(LSE, DELTA, rows, N_Q):  # noqa: ANN001, N803
    """A query block's ``lse · log₂e`` and ``D``; a row that saw no key gets lse = +inf, so its P is 0."""
    lse = tl.load(LSE + rows, mask=rows < N_Q, other=0.0)
    lse = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)  # log₂e
    return lse, tl.load(DELTA + rows, mask=rows < N_Q, other=0.0)


def _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, DQ, start, cols, cols_d, scale, qk_scale, N_Q, N_K, D,  # noqa: ANN001, N803
               OFFSET, WINDOW, MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
               ATOMIC_DQ: tl.constexpr, BLOCK_M: tl.constexpr, LONG: tl.constexpr):
    """One query tile's share of a key block's dK and dV, in the transposed form: the key block's ``k`` and ``v``
    are the left operands of every product (loaded once; the compiled kernel writes them to shared memory once,
    before the loop, and never again), the query tile's ``q`` and ``dO`` the right ones, and ``Pᵀ``, ``dSᵀ`` go
    into their products as they are computed. ``ATOMIC_DQ``: also add this tile's ``dS K`` into dQ (float32,
    atomic: FlashAttention-2's fifth product)."""
    rows = _positions(start, BLOCK_M, LONG)
    q, do = _load_rows(Q, rows, cols_d, N_Q, D), _load_rows(DO, rows, cols_d, N_Q, D)
    lse, delta = _row_stats(LSE, DELTA, rows, N_Q)
    logit_t = tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :]  # log₂ of Pᵀ, recomputed: one FMA an entry
    if MASKED:  # masked before exp2, so that a masked entry is exp2(-inf) = 0 and never overflows
        logit_t = tl.where(_visible(rows[None, :], cols[:, None], N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED),
                           logit_t, float("-inf"))
    p_t = tl.exp2(logit_t)  # Pᵀ, (BLOCK_N, BLOCK_M)
    # Unmasked tiles need no mask even past the last query: a padded query row has q = dO = 0 and adds nothing.
    dv += tl.dot(p_t.to(do.dtype), do)  # dV += Pᵀ dO
    ds_t = p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])  # dSᵀ = Pᵀ ∘ (V dOᵀ − D)
    dk += tl.dot(ds_t.to(q.dtype), q)  # dK += dSᵀ Q (times the scale once, at the end)
    if ATOMIC_DQ:
        dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k) * scale  # (BLOCK_M, BLOCK_D) = scale · dS K
        tl.atomic_add(DQ + rows[:, None] * D + cols_d[None, :], dq,
                      mask=(rows[:, None] < N_Q) & (cols_d[None, :] < D), sem="relaxed")
    return dk, dv


def dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQ, scale, N_Q, N_K, D, HEADS, GROUP, OFFSET,  # noqa: ANN001, N803
                WINDOW, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                LONG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_N keys of one (batch, query head); walks over the query blocks that see them,
    accumulating dK and dV (per query head: a group's heads are summed afterwards), and with ``ATOMIC_DQ`` adding
    into dQ as it goes."""
    block, bh, kv = _block_and_head(N_K, HEADS, GROUP, BLOCK_N)
    cols = _positions(block * BLOCK_N, BLOCK_N, LONG)
    cols_d = tl.arange(0, BLOCK_D)
    Q, DO, DQ = Q + bh * N_Q * D, DO + bh * N_Q * D, DQ + bh * N_Q * D
    LSE, DELTA = LSE + bh * N_Q, DELTA + bh * N_Q
    K, V, DK, DV = K + kv * N_K * D, V + kv * N_K * D, DK + bh * N_K * D, DV + bh * N_K * D
    k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)
    qk_scale = scale * 1.4426950408889634  # scale · log₂e

    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    first, full, inner_end, end = _query_range(block, N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED, BLOCK_M, BLOCK_N)
    for start in range(first, full, BLOCK_M):  # the diagonal
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, DQ, start, cols, cols_d, scale, qk_scale, N_Q, N_K, D,
                            OFFSET, WINDOW, True, CAUSAL, WINDOWED, ATOMIC_DQ, BLOCK_M, LONG)
    for start in range(full, inner_end, BLOCK_M):  # seen whole: no mask
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, DQ, start, cols, cols_d, scale, qk_scale, N_Q, N_K, D,
                            OFFSET, WINDOW, False, CAUSAL, WINDOWED, ATOMIC_DQ, BLOCK_M, LONG)
    for start in range(inner_end, end, BLOCK_M):  # a window's far edge, the ragged last key block
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, DQ, start, cols, cols_d, scale, qk_scale, N_Q, N_K, D,
                            OFFSET, WINDOW, True, CAUSAL, WINDOWED, ATOMIC_DQ, BLOCK_M, LONG)
    kv_mask = (cols[:, None] < N_K) & (cols_d[None, :] < D)
    tl.store(DK + cols[:, None] * D + cols_d[None, :], (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + cols[:, None] * D + cols_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


def _dq_tile(dq, q, do, lse, delta, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET,  # noqa: ANN001, N803
             WINDOW, MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, BLOCK_N: tl.constexpr,
             LONG: tl.constexpr):
    """One key tile's share of a query block's dQ: the query block's ``q`` and ``dO`` are the left operands,
    held across the loop, and ``dS`` goes into ``dS K`` as it is computed."""
    cols = _positions(start, BLOCK_N, LONG)
    k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)
    logit = tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None]  # log₂ of P: one FMA an entry
    if MASKED:  # the ragged last tile too: a padded key's weight exp2(0 − lse) may overflow, and inf · 0 is NaN
        logit = tl.where(_visible(rows[:, None], cols[None, :], N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED),
                         logit, float("-inf"))
    p = tl.exp2(logit)
    ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
    return dq + tl.dot(ds.to(k.dtype), k)  # dQ = scale · dS K (scaled once, at the end)


def dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, scale, N_Q, N_K, D, HEADS, GROUP, OFFSET, WINDOW,  # noqa: ANN001, N803
              CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, LONG: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_M queries of one (batch, head); walks over the visible key blocks, accumulating dQ
    (the deterministic second pass)."""
    block, bh, kv = _block_and_head(N_Q, HEADS, GROUP, BLOCK_M)
    rows = _positions(block * BLOCK_M, BLOCK_M, LONG)
    cols_d = tl.arange(0, BLOCK_D)
    Q, DO, DQ = Q + bh * N_Q * D, DO + bh * N_Q * D, DQ + bh * N_Q * D
    LSE, DELTA = LSE + bh * N_Q, DELTA + bh * N_Q
    K, V = K + kv * N_K * D, V + kv * N_K * D
    q, do = _load_rows(Q, rows, cols_d, N_Q, D), _load_rows(DO, rows, cols_d, N_Q, D)
    lse, delta = _row_stats(LSE, DELTA, rows, N_Q)
    qk_scale = scale * 1.4426950408889634  # scale · log₂e

    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    lo, inner, full, hi = _key_range(block * BLOCK_M, N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED, BLOCK_M, BLOCK_N)
    for start in range(lo, inner, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse, delta, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET, WINDOW,
                      True, CAUSAL, WINDOWED, BLOCK_N, LONG)
    for start in range(inner, full, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse, delta, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET, WINDOW,
                      False, CAUSAL, WINDOWED, BLOCK_N, LONG)
    for start in range(full, hi, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse, delta, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET, WINDOW,
                      True, CAUSAL, WINDOWED, BLOCK_N, LONG)
    q_mask = (rows[:, None] < N_Q) & (cols_d[None, :] < D)
    tl.store(DQ + rows[:, None] * D + cols_d[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=q_mask)


def delta_kernel(O, DO, DELTA, ROWS, D, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):  # noqa: ANN001, N803
    """``D = rowsum(dO ∘ O)`` in float32, read once from the 16-bit tensors (no float32 copies of O and dO)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    o = _load_rows(O, rows, cols_d, ROWS, D).to(tl.float32)
    do = _load_rows(DO, rows, cols_d, ROWS, D).to(tl.float32)
    tl.store(DELTA + rows, tl.sum(o * do, axis=1), mask=rows < ROWS)


#: The helpers the kernels call by their module-level names, as plain functions: ``kernels_for`` binds each name
#: to its ``triton.jit`` version before the first launch.
HELPERS = {f.__name__: f for f in (_positions, _load_rows, _visible, _block_and_head, _key_range, _query_range,
                                   _forward_tile, _row_stats, _dkdv_tile, _dq_tile)}
