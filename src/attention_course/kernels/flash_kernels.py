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
``P_ij = exp(S_ij − lse_i)`` recomputed tile by tile: :func:`dkdv_kernel` gives each program ``BLOCK_N`` keys
(key blocks outer), walks over all query blocks (inner) and accumulates ``dV += Pᵀ dO`` and ``dK += dSᵀ Q`` in
registers, ``dS = P ∘ (dO Vᵀ − D)``, writing them once; :func:`dq_kernel` is a second pass with the loops the other
way round (query blocks outer) that accumulates ``dQ += dS K``. FlashAttention-2's backward (Dao 2023, Algorithm 2)
adds each ``dS K`` into ``dQ`` from inside the key loop, atomic adds from many programs; the second pass recomputes
``P`` instead, so that every output has one writer and the result does not depend on the order the programs run
in. The price: seven tile matmuls per (query tile, key tile) pair — ``QKᵀ``, ``dO Vᵀ``, ``Pᵀ dO``, ``dSᵀ Q`` in
the first pass, ``QKᵀ``, ``dO Vᵀ`` and ``dS K`` again in the second — against FlashAttention-2's five, 40 % more
backward FLOPs.

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

**exp2.** The softmax is computed in base 2: the scores are multiplied by ``scale · log₂e`` once, and ``exp2``
(one GPU instruction; ``exp`` is ``exp2`` after a multiply) replaces ``exp`` in every tile; ``lse`` is stored in
natural-log units, as the other tiled passes return it.

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


def _load_rows(ptr, rows, cols_d, n, D):  # noqa: ANN001, N803 -- Triton's arguments
    """The ``(len(rows), BLOCK_D)`` tile of an ``(n, D)`` row-major matrix at ``ptr``, zeros outside it."""
    return tl.load(ptr + rows[:, None] * D + cols_d[None, :], mask=(rows[:, None] < n) & (cols_d[None, :] < D),
                   other=0.0)


def _visible(rows, cols, N_Q, N_K, OFFSET, WINDOW, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr):  # noqa: ANN001, N803
    """The ``(query, key)`` pairs of a tile that may attend: inside both matrices and, if causal, key ≤ query +
    OFFSET (the diagonal's alignment), and, with a window, key > query + OFFSET − WINDOW."""
    visible = (rows[:, None] < N_Q) & (cols[None, :] < N_K)
    if CAUSAL:
        visible = visible & (cols[None, :] <= rows[:, None] + OFFSET)
    if WINDOWED:
        visible = visible & (cols[None, :] > rows[:, None] + OFFSET - WINDOW)
    return visible


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


def _forward_tile(acc, m, ell, q, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET, WINDOW,  # noqa: ANN001, N803
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, BLOCK_N: tl.constexpr):
    """One key tile of the online softmax, in base 2: scores ``s · log₂e`` so that ``exp2`` (one instruction)
    replaces ``exp``. Returns the updated state ``(acc, m, ell)``."""
    cols = start + tl.arange(0, BLOCK_N)
    k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)
    s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N) scores × log₂e, float32
    if MASKED:
        s = tl.where(_visible(rows, cols, N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED), s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, axis=1))
    if MASKED:  # a row that has seen no key yet keeps m = -inf: subtract 0 instead, so exp2 gives 0, not NaN
        m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new_safe = m_new  # an unmasked tile gives every row a finite score
    rescale = tl.exp2(m - m_new_safe)  # 0 on a row's first tile (m = -inf)
    p = tl.exp2(s - m_new_safe[:, None])
    ell = ell * rescale + tl.sum(p, axis=1)
    acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)  # 16-bit inputs: P rounded to 16 bits, as fused
    return acc, m_new, ell  # kernels do


def forward_kernel(Q, K, V, O, LSE, qk_scale, N_Q, N_K, D, HEADS, GROUP, OFFSET, WINDOW,  # noqa: ANN001, N803
                    CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_M queries of one (batch, head) against every visible key, online softmax."""
    block, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    kv = bh // HEADS * (HEADS // GROUP) + bh % HEADS // GROUP  # the key-value head this query head reads
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    Q, O, LSE = Q + bh * N_Q * D, O + bh * N_Q * D, LSE + bh * N_Q  # this (batch, head)'s slices
    K, V = K + kv * N_K * D, V + kv * N_K * D
    q = _load_rows(Q, rows, cols_d, N_Q, D)

    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of each row's scores (base 2)
    ell = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(s - m)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)  # running sum of exp2(s - m) v
    lo, inner, full, hi = _key_range(block * BLOCK_M, N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED, BLOCK_M, BLOCK_N)
    for start in range(lo, inner, BLOCK_N):  # a window's left edge
        acc, m, ell = _forward_tile(acc, m, ell, q, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                                    WINDOW, True, CAUSAL, WINDOWED, BLOCK_N)
    for start in range(inner, full, BLOCK_N):  # seen whole by every row: no mask
        acc, m, ell = _forward_tile(acc, m, ell, q, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                                    WINDOW, False, CAUSAL, WINDOWED, BLOCK_N)
    for start in range(full, hi, BLOCK_N):  # on the diagonal, the ragged last tile
        acc, m, ell = _forward_tile(acc, m, ell, q, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                                    WINDOW, True, CAUSAL, WINDOWED, BLOCK_N)
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


def _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start, cols, cols_d, qk_scale, N_Q, N_K, D,  # noqa: ANN001, N803
               OFFSET, WINDOW, MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
               BLOCK_M: tl.constexpr):
    """One query tile's share of a key block's dK and dV, the tile of P recomputed from lse."""
    rows = start + tl.arange(0, BLOCK_M)
    q, do = _load_rows(Q, rows, cols_d, N_Q, D), _load_rows(DO, rows, cols_d, N_Q, D)
    lse, delta = _row_stats(LSE, DELTA, rows, N_Q)
    logit = tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None]  # log₂ of the tile of the weights, recomputed
    if MASKED:  # masked before exp2, so that a masked entry is exp2(-inf) = 0 and never overflows
        logit = tl.where(_visible(rows, cols, N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED), logit, float("-inf"))
    p = tl.exp2(logit)
    # Unmasked tiles need no mask even past the last query: a padded query row has q = dO = 0 and adds nothing.
    dv += tl.dot(tl.trans(p.to(do.dtype)), do)  # dV = Pᵀ dO
    ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])  # dS = P ∘ (dO Vᵀ − D)
    dk += tl.dot(tl.trans(ds.to(q.dtype)), q)  # dK = scale · dSᵀ Q (scaled once, at the end)
    return dk, dv


def dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, scale, N_Q, N_K, D, HEADS, GROUP, OFFSET,  # noqa: ANN001, N803
                 WINDOW, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_N keys of one (batch, query head); walks over the query blocks that see them,
    accumulating dK and dV (per query head: a group's heads are summed afterwards)."""
    block, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    kv = bh // HEADS * (HEADS // GROUP) + bh % HEADS // GROUP
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols_d = tl.arange(0, BLOCK_D)
    Q, DO, LSE, DELTA = Q + bh * N_Q * D, DO + bh * N_Q * D, LSE + bh * N_Q, DELTA + bh * N_Q
    K, V, DK, DV = K + kv * N_K * D, V + kv * N_K * D, DK + bh * N_K * D, DV + bh * N_K * D
    k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)
    qk_scale = scale * 1.4426950408889634  # scale · log₂e

    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    # query tiles [first, full) and [inner_end, end) masked, [full, inner_end) seen whole by every key of the block
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
    # the ragged last key block is masked throughout: a padded key's weight exp2(0 − lse) may overflow
    inner_end = tl.where(block * BLOCK_N + BLOCK_N > N_K, full, inner_end)
    for start in range(first, full, BLOCK_M):
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start, cols, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                            WINDOW, True, CAUSAL, WINDOWED, BLOCK_M)
    for start in range(full, inner_end, BLOCK_M):
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start, cols, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                            WINDOW, False, CAUSAL, WINDOWED, BLOCK_M)
    for start in range(inner_end, end, BLOCK_M):
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start, cols, cols_d, qk_scale, N_Q, N_K, D, OFFSET,
                            WINDOW, True, CAUSAL, WINDOWED, BLOCK_M)
    kv_mask = (cols[:, None] < N_K) & (cols_d[None, :] < D)
    tl.store(DK + cols[:, None] * D + cols_d[None, :], (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + cols[:, None] * D + cols_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


def _dq_tile(dq, q, do, lse, delta, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET,  # noqa: ANN001, N803
             WINDOW, MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, BLOCK_N: tl.constexpr):
    """One key tile's share of a query block's dQ."""
    cols = start + tl.arange(0, BLOCK_N)
    k, v = _load_rows(K, cols, cols_d, N_K, D), _load_rows(V, cols, cols_d, N_K, D)
    logit = tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None]
    if MASKED:  # the ragged last tile too: a padded key's weight exp2(0 − lse) may overflow, and inf · 0 is NaN
        logit = tl.where(_visible(rows, cols, N_Q, N_K, OFFSET, WINDOW, CAUSAL, WINDOWED), logit, float("-inf"))
    p = tl.exp2(logit)
    ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
    return dq + tl.dot(ds.to(k.dtype), k)  # dQ = scale · dS K (scaled once, at the end)


def dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, scale, N_Q, N_K, D, HEADS, GROUP, OFFSET, WINDOW,  # noqa: ANN001, N803
               CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program: BLOCK_M queries of one (batch, head); walks over the visible key blocks, accumulating dQ."""
    block, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    kv = bh // HEADS * (HEADS // GROUP) + bh % HEADS // GROUP
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
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
                      True, CAUSAL, WINDOWED, BLOCK_N)
    for start in range(inner, full, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse, delta, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET, WINDOW,
                      False, CAUSAL, WINDOWED, BLOCK_N)
    for start in range(full, hi, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse, delta, K, V, start, rows, cols_d, qk_scale, N_Q, N_K, D, OFFSET, WINDOW,
                      True, CAUSAL, WINDOWED, BLOCK_N)
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
HELPERS = {f.__name__: f for f in (_load_rows, _visible, _key_range, _forward_tile, _row_stats, _dkdv_tile, _dq_tile)}
