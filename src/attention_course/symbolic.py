"""SymPy helpers: symbolic matrices and the softmax and attention written symbolically (chapter 1 onwards).

The course's derivations build their objects here and end in an ``assert`` in the notebook; the helpers are
kept small so a reader can see that the symbolic objects are exactly the paper's formulas.
"""

from __future__ import annotations

import sympy as sp

from ._checks import check_flag, check_instance, check_int, describe

__all__ = [
    "symbolic_matrix",
    "softmax_rows",
    "attention_matrix_form",
    "attention_per_query_sum",
    "softmax_weight",
    "attention_entry_matrix_form",
    "attention_entry_per_query_sum",
    "canonical_sums",
    "simplify_sums",
]


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


# ------------------------------------------------------------------------------------------ symbolic sizes
# The helpers above build explicit matrices, so a proof with them holds for the one size it was built at. The
# helpers below keep the sizes symbolic (``n``, ``n_q``, ``n_k``, ``d_k`` as SymPy symbols): a sum over the keys
# is a ``Sum`` with a symbolic upper bound and a matrix is a ``MatrixSymbol``, so what SymPy proves with them
# holds for every size at once.


def _check_index(name: str, index: object) -> sp.Symbol:
    check_instance(name, index, sp.Symbol)
    if index.is_integer is not True:
        raise ValueError(f"{name} must be an integer SymPy symbol (Symbol(..., integer=True)), got {index}")
    return index


def _check_size(name: str, size: object) -> sp.Expr:
    if isinstance(size, bool) or not isinstance(size, (sp.Expr, int)):
        raise TypeError(f"{name} must be a SymPy expression or an int, got {describe(size)}")
    size = sp.sympify(size)
    if size.is_integer is not True or size.is_positive is not True:
        raise ValueError(f"{name} must be a positive integer (e.g. Symbol('n', integer=True, positive=True)), "
                         f"got {size}")
    return size


def softmax_weight(score: sp.Expr, index: sp.Symbol, n: sp.Expr) -> sp.Expr:
    """The softmax weight of key ``index`` among ``n`` keys: ``exp(score) / Σ_{j=0}^{n-1} exp(score[index→j])``.

    ``score`` is the score of key ``index`` written with that index (e.g. ``s[i]``, ``s[i] / tau`` or
    ``Sum(q[l] * k[i, l], (l, 0, d - 1))``); the denominator renames ``index`` to a fresh summation index
    (``index`` followed by a prime), so ``n`` may be a symbol and the result holds for every number of keys.

    At the edges: ``n`` must be a positive integer (a softmax over no scores has no weights); an ``int`` is
    accepted.
    """
    if not isinstance(score, sp.Expr):
        raise TypeError(f"score must be a SymPy expression, got {describe(score)}")
    index, n = _check_index("index", index), _check_size("n", n)
    j = sp.Symbol(f"{index.name}'", integer=True, nonnegative=True)
    return sp.exp(score) / sp.Sum(sp.exp(score.xreplace({index: j})), (j, 0, n - 1))


def _check_matrix_symbols(Q: object, K: object, V: object, scale: object) -> None:
    for name, m in (("Q", Q), ("K", K), ("V", V)):
        check_instance(name, m, sp.MatrixSymbol)
    if isinstance(scale, bool) or not isinstance(scale, (sp.Expr, int, float)):
        raise TypeError(f"scale must be a SymPy expression or a number, got {describe(scale)}")
    if Q.shape[1] != K.shape[1]:
        raise ValueError(f"Q (n_q, d_k) and K (n_k, d_k) must have the same number of columns d_k, got shapes "
                         f"{Q.shape} and {K.shape}")
    if K.shape[0] != V.shape[0]:
        raise ValueError(f"K (n_k, d_k) and V (n_k, d_v) must have the same number of rows n_k, got shapes "
                         f"{K.shape} and {V.shape}")


def attention_entry_matrix_form(
    Q: sp.MatrixSymbol, K: sp.MatrixSymbol, V: sp.MatrixSymbol, a: sp.Symbol, c: sp.Symbol,
    scale: sp.Expr = sp.S.One,
) -> sp.Expr:
    """Entry ``(a, c)`` of ``softmax(Q Kᵀ · scale) V`` for matrices of symbolic size, built from SymPy's own
    matrix products: the scores are the entries of ``Q * K.T`` and the output is entry ``(a, c)`` of ``A * V``,
    where ``A`` has in row ``a`` the softmax of row ``a`` of the scores (over the keys).

    ``Q``, ``K``, ``V`` are ``MatrixSymbol`` of shapes ``(n_q, d_k)``, ``(n_k, d_k)``, ``(n_k, d_v)``; ``a`` and
    ``c`` are integer symbols (a query and a value coordinate).
    """
    _check_matrix_symbols(Q, K, V, scale)
    a, c = _check_index("a", a), _check_index("c", c)
    n_q, n_k = Q.shape[0], K.shape[0]
    S = Q * K.T
    A = sp.MatrixSymbol("A", n_q, n_k)
    i = sp.Symbol("i", integer=True, nonnegative=True)
    out = (A * V)[a, c]  # Σ_i A[a, i] V[i, c], as SymPy defines the product
    return out.replace(
        lambda e: isinstance(e, sp.matrices.expressions.matexpr.MatrixElement) and e.parent == A,
        lambda e: softmax_weight(S[e.i, i] * scale, i, n_k).xreplace({i: e.j}),
    )


def attention_entry_per_query_sum(
    Q: sp.MatrixSymbol, K: sp.MatrixSymbol, V: sp.MatrixSymbol, a: sp.Symbol, c: sp.Symbol,
    scale: sp.Expr = sp.S.One,
) -> sp.Expr:
    """Coordinate ``c`` of ``a(q_a) = Σ_i exp(q_a·k_i) / Σ_j exp(q_a·k_j) · v_i`` for matrices of symbolic size,
    with the dot products written as sums over the ``d_k`` coordinates of the rows (no matrix product of Q and
    K), so that comparing it with :func:`attention_entry_matrix_form` is a real check. Arguments as there."""
    _check_matrix_symbols(Q, K, V, scale)
    a, c = _check_index("a", a), _check_index("c", c)
    n_k, d_k = K.shape
    i, l = sp.symbols("i l", integer=True, nonnegative=True)
    dot = sp.Sum(Q[a, l] * K[i, l], (l, 0, d_k - 1))  # q_a · k_i, coordinate by coordinate
    return sp.Sum(softmax_weight(dot * scale, i, n_k) * V[i, c], (i, 0, n_k - 1))


def canonical_sums(expr: sp.Basic) -> sp.Basic:
    """``expr`` with the index of every ``Sum`` renamed by its nesting depth (``ι0``, ``ι1``, ...), so that two
    expressions that differ only in the names of their summation indices become identical (SymPy compares
    ``Sum(f(i), (i, 0, n))`` and ``Sum(f(j), (j, 0, n))`` as different)."""
    check_instance("expr", expr, sp.Basic)
    return _canonical(expr, 0)


def _canonical(expr: sp.Basic, depth: int) -> sp.Basic:
    if isinstance(expr, sp.Sum):
        body, limits = expr.function, []
        for var, lo, hi in expr.limits:
            new = sp.Symbol(f"ι{depth}", integer=True)
            body = body.xreplace({var: new})
            limits.append((new, _canonical(lo, depth), _canonical(hi, depth)))
            depth += 1
        return sp.Sum(_canonical(body, depth), *limits)
    if not expr.args:
        return expr
    return expr.func(*(_canonical(arg, depth) for arg in expr.args))


def simplify_sums(expr: sp.Basic) -> sp.Basic:
    """Simplify an expression with symbolic-size sums: rename summation indices (:func:`canonical_sums`), expand
    products, split ``exp(a + b)`` into ``exp(a) exp(b)``, split each sum of terms into a sum of sums and pull out
    of each sum the factors that do not depend on its index — the linearity of a finite sum — then cancel common
    factors (``sp.together``, ``sp.cancel``, and ``sp.simplify`` if that leaves something).

    A proof asserts ``simplify_sums(lhs - rhs) == 0``."""
    check_instance("expr", expr, sp.Basic)
    done = _split_exp(_linear(canonical_sums(expr)))
    result = sp.cancel(sp.together(canonical_sums(done)))
    if result != 0:
        try:
            result = sp.simplify(result)
        except StopIteration:  # SymPy's sum_combine fails on some quotients of sums; keep the cancelled form
            pass
    return result


def _split_exp(e: sp.Basic) -> sp.Basic:
    """``exp(a + b + ...)`` → ``exp(a) exp(b) ...`` after expanding products; ``exp(Sum(...))`` stays as it is
    (SymPy's own ``power_exp`` expansion would turn it into a ``Product``)."""
    e = sp.expand(e, power_exp=False)
    return e.replace(
        lambda x: isinstance(x, sp.exp) and isinstance(x.args[0], sp.Add),
        lambda x: sp.Mul(*(sp.exp(t) for t in x.args[0].args)),
    )


def _linear(e: sp.Basic) -> sp.Basic:
    if isinstance(e, sp.Sum):
        indices = [limit[0] for limit in e.limits]
        body = _split_exp(_linear(e.function))
        out = sp.S.Zero
        for term in sp.Add.make_args(sp.expand(body, power_exp=False)):
            const, dep = term.as_independent(*indices, as_Add=False)
            out += const * sp.Sum(dep, *e.limits)
        return out
    if not e.args:
        return e
    return e.func(*(_linear(arg) for arg in e.args))
