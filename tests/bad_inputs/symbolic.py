"""Bad inputs for symbolic.py: symbolic matrices, the symbolic softmax and attention."""

from __future__ import annotations

import numpy as np
import sympy as sp

from attention_course.symbolic import attention_matrix_form, attention_per_query_sum, softmax_rows, symbolic_matrix

from . import case

Q, K, V = symbolic_matrix("q", 2, 3), symbolic_matrix("k", 4, 3), symbolic_matrix("v", 4, 2)
matrix_form, per_query = attention_matrix_form, attention_per_query_sum

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
]
