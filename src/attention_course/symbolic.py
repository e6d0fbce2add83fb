"""SymPy helpers: symbolic matrices and the softmax and attention written symbolically (chapter 1 onwards).

The course's derivations build their objects here and end in an ``assert`` in the notebook; the helpers are
kept small so a reader can see that the symbolic objects are exactly the paper's formulas.
"""

from __future__ import annotations

import sympy as sp

from ._checks import check_flag, check_instance, check_int, describe

__all__ = ["symbolic_matrix", "softmax_rows", "attention_matrix_form", "attention_per_query_sum"]


def symbolic_matrix(name: str, rows: int, cols: int, **assumptions: bool) -> sp.Matrix:
    """A ``rows × cols`` matrix of real symbols ``name_{i,j}`` (0-based), e.g. ``q_{0,1}``.

    Extra keyword arguments are SymPy assumptions (``positive=True``, ...); ``real=True`` is the default.

    At the edges: ``rows = 0`` or ``cols = 0`` gives an empty matrix of that shape, as ``sp.zeros``.
    """
    check_instance("name", name, str)
    if not name:
        raise ValueError("name must be a non-empty string, got ''")
    rows, cols = check_int("rows", rows, low=0), check_int("cols", cols, low=0)
    for key, value in assumptions.items():  # SymPy would keep a misspelt assumption without a word
        if not (key.islower() and hasattr(sp.Symbol, f"is_{key}")):
            raise ValueError(f"assumptions must be SymPy's (real, positive, integer, ...), got {key}={value!r}")
        check_flag(key, value)
    assumptions = {"real": True, **assumptions}
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{name}_{{{i},{j}}}", **assumptions))


def softmax_rows(scores: sp.Matrix) -> sp.Matrix:
    """Softmax of each row of a symbolic matrix: entry (i, j) is ``exp(s_ij) / Σ_l exp(s_il)``.

    At the edges: a matrix with no columns (or no rows) gives an empty matrix of its shape, as ``torch.softmax``.
    """
    check_instance("scores", scores, sp.MatrixBase)
    out = sp.zeros(scores.rows, scores.cols)
    for i in range(scores.rows):
        denom = sum(sp.exp(scores[i, l]) for l in range(scores.cols))
        for j in range(scores.cols):
            out[i, j] = sp.exp(scores[i, j]) / denom
    return out


def _check_qkv(Q: object, K: object, V: object, scale: object) -> None:
    for name, m in (("Q", Q), ("K", K), ("V", V)):
        check_instance(name, m, sp.MatrixBase)
    if isinstance(scale, bool) or not isinstance(scale, (sp.Expr, int, float)):
        raise TypeError(f"scale must be a SymPy expression or a number, got {describe(scale)}")
    if Q.cols != K.cols:
        raise ValueError(f"Q (n_q, d_k) and K (n_k, d_k) must have the same number of columns d_k, got shapes "
                         f"{Q.shape} and {K.shape}")
    if K.rows != V.rows:
        raise ValueError(f"K (n_k, d_k) and V (n_k, d_v) must have the same number of rows n_k, got shapes "
                         f"{K.shape} and {V.shape}")


def attention_matrix_form(Q: sp.Matrix, K: sp.Matrix, V: sp.Matrix, scale: sp.Expr = sp.S.One) -> sp.Matrix:
    """``softmax(Q Kᵀ · scale) V`` with the softmax over each row (the keys). Shapes (n_q, d_k), (n_k, d_k),
    (n_k, d_v) → (n_q, d_v).

    At the edges, as PyTorch's attention: no keys (``n_k = 0``) gives zero rows, ``d_k = 0`` the mean of the
    values, no queries an empty ``(0, d_v)`` matrix."""
    _check_qkv(Q, K, V, scale)
    return softmax_rows(Q * K.T * scale) * V


def attention_per_query_sum(Q: sp.Matrix, K: sp.Matrix, V: sp.Matrix, scale: sp.Expr = sp.S.One) -> sp.Matrix:
    """Row by row, ``a(q) = Σ_i exp(q·k_i) / Σ_j exp(q·k_j) · v_i``: the per-query sum, built without any matrix
    product of Q and K, so that comparing it with :func:`attention_matrix_form` is a real check.

    At the edges: as :func:`attention_matrix_form`."""
    _check_qkv(Q, K, V, scale)
    rows = []
    for a in range(Q.rows):
        q = Q.row(a)
        s = [q.dot(K.row(i)) * scale for i in range(K.rows)]
        denom = sum(sp.exp(si) for si in s)
        rows.append(sum((sp.exp(s[i]) / denom * V.row(i) for i in range(K.rows)), sp.zeros(1, V.cols)))
    return sp.Matrix.vstack(*rows) if rows else sp.zeros(0, V.cols)
