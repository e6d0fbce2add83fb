"""symbolic.py: symbolic matrices, softmax and attention, checked against the numeric package and at the edges."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch
import torch.nn.functional as F

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


def _numeric(m: sp.Matrix, rng: np.random.Generator) -> dict:
    return {s: rng.normal() for s in m.free_symbols}


def test_the_two_forms_agree_and_equal_torch_at_random_numbers():
    Q, K, V = symbolic_matrix("q", 2, 3), symbolic_matrix("k", 4, 3), symbolic_matrix("v", 4, 2)
    rng = np.random.default_rng(0)
    values = {**_numeric(Q, rng), **_numeric(K, rng), **_numeric(V, rng)}
    scale = 1 / sp.sqrt(3)
    a = np.array(attention_matrix_form(Q, K, V, scale).subs(values), dtype=float)
    b = np.array(attention_per_query_sum(Q, K, V, scale).subs(values), dtype=float)
    qt, kt, vt = (torch.tensor(np.array(m.subs(values), dtype=float)) for m in (Q, K, V))
    np.testing.assert_allclose(a, b, atol=1e-12)
    np.testing.assert_allclose(a, F.scaled_dot_product_attention(qt, kt, vt).numpy(), atol=1e-12)


def test_symbolic_matrix_names_assumptions_and_empty_shapes():
    m = symbolic_matrix("w", 2, 3, positive=True)
    assert m.shape == (2, 3) and str(m[0, 1]) == "w_{0,1}" and m[1, 2].is_positive and m[1, 2].is_real
    assert symbolic_matrix("w", 0, 3).shape == (0, 3) and symbolic_matrix("w", 2, 0).shape == (2, 0)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3)])
def test_softmax_rows_of_empty_is_empty_as_torch(shape):
    assert softmax_rows(sp.zeros(*shape)).shape == tuple(torch.softmax(torch.zeros(shape), -1).shape)


@pytest.mark.parametrize("form", [attention_matrix_form, attention_per_query_sum])
def test_attention_forms_at_zero_lengths_as_torch(form):
    """No keys: zero rows; d_k = 0: the mean of the values; no queries: (0, d_v) — PyTorch's answers."""
    V = symbolic_matrix("v", 3, 2)
    assert form(symbolic_matrix("q", 2, 4), symbolic_matrix("k", 0, 4), symbolic_matrix("v", 0, 2)) == sp.zeros(2, 2)
    mean = sp.Matrix([[sum(V[:, j]) / 3 for j in range(2)]] * 2)
    assert sp.simplify(form(symbolic_matrix("q", 2, 0), symbolic_matrix("k", 3, 0), V) - mean) == sp.zeros(2, 2)
    assert form(symbolic_matrix("q", 0, 4), symbolic_matrix("k", 3, 4), V).shape == (0, 2)
    out = F.scaled_dot_product_attention(torch.randn(2, 4), torch.randn(0, 4), torch.randn(0, 2))
    assert torch.equal(out, torch.zeros(2, 2))


# ------------------------------------------------------------------------------------------ symbolic sizes
N = sp.Symbol("n", integer=True, positive=True)
I = sp.Symbol("i", integer=True, nonnegative=True)
S = sp.IndexedBase("s", real=True)


def test_softmax_weight_sums_to_one_and_is_shift_invariant_for_symbolic_n():
    w = softmax_weight(S[I], I, N)
    assert simplify_sums(sp.Sum(w, (I, 0, N - 1))) == 1
    assert simplify_sums(softmax_weight(S[I] + sp.Symbol("c", real=True), I, N) - w) == 0
    assert w.is_positive


@pytest.mark.parametrize("size", [1, 3])
def test_softmax_weight_at_a_fixed_size_is_the_numeric_softmax(size):
    values = np.random.default_rng(size).normal(size=size)
    w = softmax_weight(S[I], I, size)
    got = [float(w.subs(I, k).doit().subs({S[j]: values[j] for j in range(size)})) for k in range(size)]
    np.testing.assert_allclose(got, torch.softmax(torch.tensor(values), 0).numpy(), rtol=0, atol=1e-12)


def test_simplify_sums_does_not_prove_a_false_shift():
    """A shift that depends on the key's index is not a shift: the helper must not make it vanish."""
    w = softmax_weight(S[I], I, N)
    assert simplify_sums(softmax_weight(S[I] + I, I, N) - w) != 0


def _matrix_symbols():
    n_q, n_k, d_k, d_v = sp.symbols("n_q n_k d_k d_v", integer=True, positive=True)
    a, c = sp.symbols("a c", integer=True, nonnegative=True)
    Q, K, V = sp.MatrixSymbol("Q", n_q, d_k), sp.MatrixSymbol("K", n_k, d_k), sp.MatrixSymbol("V", n_k, d_v)
    return Q, K, V, a, c


def test_entry_forms_agree_for_symbolic_sizes():
    Q, K, V, a, c = _matrix_symbols()
    scale = 1 / sp.sqrt(Q.shape[1])
    m, p = attention_entry_matrix_form(Q, K, V, a, c, scale), attention_entry_per_query_sum(Q, K, V, a, c, scale)
    assert canonical_sums(m) == canonical_sums(p)
    assert simplify_sums(m - p) == 0


def test_entry_form_is_not_the_softmax_over_queries():
    """The comparison can fail: normalising over the queries (the wrong axis) gives a different expression."""
    Q, K, V, a, c = _matrix_symbols()
    i, j, l = sp.symbols("i j l", integer=True, nonnegative=True)
    score = sp.Sum(Q[j, l] * K[i, l], (l, 0, Q.shape[1] - 1))  # query j, key i
    wrong = sp.Sum(softmax_weight(score, j, Q.shape[0]).xreplace({j: a}) * V[i, c], (i, 0, K.shape[0] - 1))
    assert canonical_sums(wrong) != canonical_sums(attention_entry_matrix_form(Q, K, V, a, c))


def test_entry_form_at_a_fixed_size_equals_torch():
    n_q, n_k, d_k, d_v = 2, 3, 4, 2
    Q, K, V = sp.MatrixSymbol("Q", n_q, d_k), sp.MatrixSymbol("K", n_k, d_k), sp.MatrixSymbol("V", n_k, d_v)
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(n_q, d_k)), rng.normal(size=(n_k, d_k)), rng.normal(size=(n_k, d_v))
    values = {Q: sp.Matrix(q), K: sp.Matrix(k), V: sp.Matrix(v)}
    want = F.scaled_dot_product_attention(*(torch.tensor(x) for x in (q, k, v))).numpy()
    a, c = sp.symbols("a c", integer=True, nonnegative=True)
    expr = attention_entry_matrix_form(Q, K, V, a, c, 1 / sp.sqrt(d_k))
    for row in range(n_q):
        for col in range(d_v):
            got = float(expr.subs({a: row, c: col}).doit().subs(values).doit())
            assert abs(got - want[row, col]) <= 1e-12


def test_canonical_sums_renames_only_bound_indices():
    j, k = sp.symbols("j k", integer=True)
    x = sp.IndexedBase("x")
    assert canonical_sums(sp.Sum(x[j], (j, 0, N))) == canonical_sums(sp.Sum(x[k], (k, 0, N)))
    assert canonical_sums(sp.Sum(x[j] * k, (j, 0, N))) != canonical_sums(sp.Sum(x[k] * j, (k, 0, N)))
    assert canonical_sums(x[j] + 1) == x[j] + 1
