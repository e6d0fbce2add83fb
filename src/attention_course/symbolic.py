"""SymPy helpers: symbolic matrices and the softmax and attention written symbolically (chapter 1 onwards).

The course's derivations build their objects here and end in an ``assert`` in the notebook; the helpers are
kept small so a reader can see that the symbolic objects are exactly the paper's formulas.
"""

from __future__ import annotations

import sympy as sp

__all__ = ["symbolic_matrix", "softmax_rows", "attention_matrix_form", "attention_per_query_sum"]


def symbolic_matrix(name: str, rows: int, cols: int, **assumptions: bool) -> sp.Matrix:
    """A ``rows × cols`` matrix of real symbols ``name_{i,j}`` (0-based), e.g. ``q_{0,1}``.

    Extra keyword arguments are SymPy assumptions (``positive=True``, ...); ``real=True`` is the default.
    """
    assumptions = {"real": True, **assumptions}
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{name}_{{{i},{j}}}", **assumptions))


def softmax_rows(scores: sp.Matrix) -> sp.Matrix:
    """Softmax of each row of a symbolic matrix: entry (i, j) is ``exp(s_ij) / Σ_l exp(s_il)``."""
    out = sp.zeros(scores.rows, scores.cols)
    for i in range(scores.rows):
        denom = sum(sp.exp(scores[i, l]) for l in range(scores.cols))
        for j in range(scores.cols):
            out[i, j] = sp.exp(scores[i, j]) / denom
    return out


def attention_matrix_form(Q: sp.Matrix, K: sp.Matrix, V: sp.Matrix, scale: sp.Expr = sp.S.One) -> sp.Matrix:
    """``softmax(Q Kᵀ · scale) V`` with the softmax over each row (the keys). Shapes (n_q, d_k), (n_k, d_k),
    (n_k, d_v) → (n_q, d_v)."""
    return softmax_rows(Q * K.T * scale) * V


def attention_per_query_sum(Q: sp.Matrix, K: sp.Matrix, V: sp.Matrix, scale: sp.Expr = sp.S.One) -> sp.Matrix:
    """Row by row, ``a(q) = Σ_i exp(q·k_i) / Σ_j exp(q·k_j) · v_i``: the per-query sum, built without any matrix
    product of Q and K, so that comparing it with :func:`attention_matrix_form` is a real check."""
    rows = []
    for a in range(Q.rows):
        q = Q.row(a)
        s = [q.dot(K.row(i)) * scale for i in range(K.rows)]
        denom = sum(sp.exp(si) for si in s)
        rows.append(sum((sp.exp(s[i]) / denom * V.row(i) for i in range(K.rows)), sp.zeros(1, V.cols)))
    return sp.Matrix.vstack(*rows)
