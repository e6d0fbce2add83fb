"""symbolic.py: symbolic matrices, softmax and attention, checked against the numeric package and at the edges."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch
import torch.nn.functional as F

from attention_course.symbolic import attention_matrix_form, attention_per_query_sum, softmax_rows, symbolic_matrix


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
