"""Bad inputs for symbolic.py: symbolic matrices, the symbolic softmax and attention."""

from __future__ import annotations

import numpy as np
import sympy as sp

from attention_course.symbolic import (
    attention_entry_matrix_form,
    attention_entry_per_query_sum,
    attention_matrix_form,
    attention_per_query_sum,
    canonical_sums,
    simplify_sums,
    softmax_rows,
    softmax_weight,
    symbolic_matrix,
)

from . import case

Q, K, V = symbolic_matrix("q", 2, 3), symbolic_matrix("k", 4, 3), symbolic_matrix("v", 4, 2)
matrix_form, per_query = attention_matrix_form, attention_per_query_sum
entry_matrix, entry_per_query = attention_entry_matrix_form, attention_entry_per_query_sum
N, D = sp.symbols("n d", integer=True, positive=True)
I, A, C = sp.symbols("i a c", integer=True, nonnegative=True)
S = sp.IndexedBase("s", real=True)
QM, KM, VM = sp.MatrixSymbol("Q", 2, D), sp.MatrixSymbol("K", N, D), sp.MatrixSymbol("V", N, 3)

CASES = [
    # symbolic_matrix
    case(symbolic_matrix, lambda: symbolic_matrix("q", -1, 2), ValueError, arg="rows", says="non-negative",
         id="symbolic.symbolic_matrix-rows"),
    case(symbolic_matrix, lambda: symbolic_matrix("q", 2, 1.5), TypeError, arg="cols",
         id="symbolic.symbolic_matrix-cols"),
    case(symbolic_matrix, lambda: symbolic_matrix(3, 2, 2), TypeError, arg="name", says="str",
         id="symbolic.symbolic_matrix-name"),
    case(symbolic_matrix, lambda: symbolic_matrix("", 2, 2), ValueError, arg="name", says="non-empty",
         id="symbolic.symbolic_matrix-empty-name"),
    case(symbolic_matrix, lambda: symbolic_matrix("q", 2, 2, postive=True), ValueError, arg="assumptions",
         says="postive", id="symbolic.symbolic_matrix-misspelt"),
    case(symbolic_matrix, lambda: symbolic_matrix("q", 2, 2, positive="yes"), TypeError, arg="positive",
         id="symbolic.symbolic_matrix-assumption-value"),
    # softmax_rows
    case(softmax_rows, lambda: softmax_rows([[1, 2]]), TypeError, arg="scores", says="Matrix",
         id="symbolic.softmax_rows-list"),
    case(softmax_rows, lambda: softmax_rows(np.eye(2)), TypeError, arg="scores", id="symbolic.softmax_rows-numpy"),
    # attention_matrix_form, attention_per_query_sum
    case(matrix_form, lambda: matrix_form(Q, symbolic_matrix("k", 4, 2), V), ValueError, arg="d_k",
         id="symbolic.attention_matrix_form-d_k"),
    case(matrix_form, lambda: matrix_form(Q, K, symbolic_matrix("v", 3, 2)), ValueError, arg="n_k",
         id="symbolic.attention_matrix_form-n_k"),
    case(matrix_form, lambda: matrix_form(np.ones((2, 3)), K, V), TypeError, arg="Q",
         id="symbolic.attention_matrix_form-numpy"),
    case(matrix_form, lambda: matrix_form(Q, K, V, scale="1/2"), TypeError, arg="scale",
         id="symbolic.attention_matrix_form-scale"),
    case(per_query, lambda: per_query(Q, symbolic_matrix("k", 4, 2), V), ValueError, arg="d_k",
         id="symbolic.attention_per_query_sum-d_k"),
    case(per_query, lambda: per_query(Q, K, symbolic_matrix("v", 5, 2)), ValueError, arg="n_k",
         id="symbolic.attention_per_query_sum-n_k"),
    case(per_query, lambda: per_query(Q, K.tolist(), V), TypeError, arg="K",
         id="symbolic.attention_per_query_sum-list"),
    case(per_query, lambda: per_query(Q, K, V, scale=sp.Matrix([1])), TypeError, arg="scale",
         id="symbolic.attention_per_query_sum-scale"),
    # softmax_weight
    case(softmax_weight, lambda: softmax_weight("s_i", I, N), TypeError, arg="score",
         id="symbolic.softmax_weight-score"),
    case(softmax_weight, lambda: softmax_weight(S[I], sp.Symbol("x"), N), ValueError, arg="index",
         says="integer", id="symbolic.softmax_weight-index-not-integer"),
    case(softmax_weight, lambda: softmax_weight(S[I], "i", N), TypeError, arg="index",
         id="symbolic.softmax_weight-index-str"),
    case(softmax_weight, lambda: softmax_weight(S[I], I, 0), ValueError, arg="n", says="positive",
         id="symbolic.softmax_weight-n-zero"),
    case(softmax_weight, lambda: softmax_weight(S[I], I, 2.5), TypeError, arg="n",
         id="symbolic.softmax_weight-n-float"),
    # attention_entry_matrix_form, attention_entry_per_query_sum
    case(entry_matrix, lambda: entry_matrix(QM, sp.MatrixSymbol("K", N, 4), VM, A, C), ValueError, arg="d_k",
         id="symbolic.attention_entry_matrix_form-d_k"),
    case(entry_matrix, lambda: entry_matrix(QM, KM, sp.MatrixSymbol("V", 5, 3), A, C), ValueError, arg="n_k",
         id="symbolic.attention_entry_matrix_form-n_k"),
    case(entry_matrix, lambda: entry_matrix(Q, K, V, A, C), TypeError, arg="Q", says="MatrixSymbol",
         id="symbolic.attention_entry_matrix_form-explicit"),
    case(entry_matrix, lambda: entry_matrix(QM, KM, VM, 0, C), TypeError, arg="a",
         id="symbolic.attention_entry_matrix_form-a"),
    case(entry_per_query, lambda: entry_per_query(QM, KM, VM, A, sp.Symbol("c")), ValueError, arg="c",
         says="integer", id="symbolic.attention_entry_per_query_sum-c"),
    case(entry_per_query, lambda: entry_per_query(QM, KM, VM, A, C, scale="1/2"), TypeError, arg="scale",
         id="symbolic.attention_entry_per_query_sum-scale"),
    # canonical_sums, simplify_sums
    case(canonical_sums, lambda: canonical_sums("Sum(x, (i, 0, n))"), TypeError, arg="expr", says="Basic",
         id="symbolic.canonical_sums-str"),
    case(simplify_sums, lambda: simplify_sums([S[I]]), TypeError, arg="expr", id="symbolic.simplify_sums-list"),
]
