"""circuits.py: the QK and OV circuits of single matrices and of every head of a MultiHeadAttention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_course.circuits import head_weights, ov_circuit, qk_circuit
from attention_course.multihead import MultiHeadAttention


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(sum(shape)))


def test_qk_and_ov_circuits_of_matrices_numpy_and_torch():
    x, w_q, w_k, w_v, w_o = _randn(5, 6), _randn(6, 2), _randn(6, 2), _randn(6, 3), _randn(3, 6)
    torch.testing.assert_close(x @ qk_circuit(w_q, w_k) @ x.T, (x @ w_q) @ (x @ w_k).T)
    torch.testing.assert_close(ov_circuit(w_v, w_o), w_v @ w_o)
    as_numpy = qk_circuit(w_q.numpy(), w_k.numpy())
    assert isinstance(as_numpy, np.ndarray)
    np.testing.assert_allclose(as_numpy, (w_q @ w_k.T).numpy(), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="share d_k"):
        qk_circuit(w_q, _randn(6, 3))
    with pytest.raises(ValueError, match="share d_v"):
        ov_circuit(w_v, _randn(4, 6))
    with pytest.raises(TypeError, match="all numpy arrays or all torch tensors"):
        qk_circuit(w_q.numpy(), w_k)
    with pytest.raises(ValueError, match="stack of matrices"):
        qk_circuit(_randn(6), w_k)
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        head_weights(torch.nn.Linear(2, 2))


def test_head_weights_are_column_slices_and_qk_matrices_give_the_scores():
    torch.manual_seed(23)
    mha = MultiHeadAttention(12, 3, bias=False, batch_first=True, dtype=torch.float64)
    hw = head_weights(mha)
    qk, ov = qk_circuit(hw.w_q, hw.w_k), ov_circuit(hw.w_v, hw.w_o)
    W_Q = mha.in_proj_weight[:12].T  # the paper's d_model × d_model W^Q
    for i in range(3):
        torch.testing.assert_close(hw.w_q[i], W_Q[:, 4 * i : 4 * (i + 1)])
    x = torch.randn(1, 5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(24))
    _, w = mha(x, x, x, average_attn_weights=False)
    scores = x[0] @ qk @ x[0].T / 2.0  # x W_QK xᵀ / √d_k, d_k = 4
    torch.testing.assert_close(w[0], torch.softmax(scores, dim=-1))
    ranks = torch.linalg.matrix_rank(qk)
    assert ranks.tolist() == [4, 4, 4]
    out_explicit = sum(torch.softmax(scores[i], -1) @ x[0] @ ov[i] for i in range(3))
    torch.testing.assert_close(mha(x, x, x)[0][0], out_explicit)


def test_products_in_float64_show_the_exact_rank_of_float32_weights():
    torch.manual_seed(25)
    mha = MultiHeadAttention(32, 4, num_kv_heads=2)  # float32 parameters
    assert head_weights(mha).w_q.dtype == torch.float32
    hw = head_weights(mha, torch.float64)
    qk, ov = qk_circuit(hw.w_q, hw.w_k), ov_circuit(hw.w_v, hw.w_o)
    assert qk.dtype == ov.dtype == torch.float64 and qk.shape == ov.shape == (4, 32, 32)
    assert torch.linalg.matrix_rank(qk).tolist() == [8] * 4 and torch.linalg.matrix_rank(ov).tolist() == [8] * 4
    hw32 = head_weights(mha)
    torch.testing.assert_close(qk.float(), qk_circuit(hw32.w_q, hw32.w_k), atol=1e-5, rtol=1e-4)


# --- edges --------------------------------------------------------------------------------------------------------


def test_circuits_of_zero_width_heads_are_zero_as_matmul():
    w_q, w_k = torch.randn(6, 0), torch.randn(5, 0)
    assert torch.equal(qk_circuit(w_q, w_k), w_q @ w_k.T) and torch.all(qk_circuit(w_q, w_k) == 0)
    w_v, w_o = torch.randn(3, 6, 0), torch.randn(0, 4)
    assert torch.equal(ov_circuit(w_v, w_o), torch.zeros(3, 6, 4))
    assert qk_circuit(torch.randn(0, 6, 2), torch.randn(0, 5, 2)).shape == (0, 6, 5)  # no heads


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_circuits_keep_low_precision(dtype):
    w_q, w_k = _randn(6, 2), _randn(5, 2)
    got = qk_circuit(w_q.to(dtype), w_k.to(dtype))
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), w_q.to(dtype).double() @ w_k.to(dtype).double().T, atol=3e-2, rtol=2e-2)
    torch.manual_seed(26)
    hw = head_weights(MultiHeadAttention(8, 2), dtype)
    assert {w.dtype for w in hw} == {dtype}


@pytest.mark.parametrize("kwargs", [{}, {"kdim": 5, "vdim": 7}, {"bias": False}], ids=["fused", "separate", "no-bias"])
def test_reparametrized_keeps_the_function_and_the_circuits_and_moves_the_factors(kwargs):
    from attention_course.circuits import reparametrized

    torch.manual_seed(2)
    mha = MultiHeadAttention(12, 3, batch_first=True, dtype=torch.float64, **kwargs).eval()
    eye = torch.eye(4, dtype=torch.float64)
    m, n = _randn(3, 4, 4) + 3 * eye, _randn(3, 4, 4).flip(-1) + 3 * eye
    before = head_weights(mha)
    new = reparametrized(mha, m, n)
    q = _randn(2, 5, 12)
    k, v = _randn(2, 6, kwargs.get("kdim", 12)), _randn(2, 6, kwargs.get("vdim", 12))
    out_a, w_a = mha(q, k, v, average_attn_weights=False)
    out_b, w_b = new(q, k, v, average_attn_weights=False)
    torch.testing.assert_close(out_b, out_a, rtol=0, atol=1e-12)
    torch.testing.assert_close(w_b, w_a, rtol=0, atol=1e-12)
    a, b = head_weights(mha), head_weights(new)
    torch.testing.assert_close(b.w_q, a.w_q @ m, rtol=0, atol=1e-12)
    torch.testing.assert_close(b.w_k, a.w_k @ torch.linalg.inv(m).mT, rtol=0, atol=1e-12)
    torch.testing.assert_close(b.w_v, a.w_v @ n, rtol=0, atol=1e-12)
    torch.testing.assert_close(b.w_o, torch.linalg.inv(n) @ a.w_o, rtol=0, atol=1e-12)
    torch.testing.assert_close(qk_circuit(b.w_q, b.w_k), qk_circuit(a.w_q, a.w_k), rtol=0, atol=1e-12)
    assert float((b.w_q - a.w_q).norm() / a.w_q.norm()) > 1  # the factors moved far
    if kwargs.get("bias", True):  # b_q M: the biases moved with their matrices
        b_q = mha.in_proj_bias[:12].reshape(3, 1, 4)
        torch.testing.assert_close(new.in_proj_bias[:12], (b_q @ m).flatten(), rtol=0, atol=1e-12)
    assert all(torch.equal(x, y) for x, y in zip(a, before, strict=True))  # a copy: mha itself is unchanged
    torch.testing.assert_close(reparametrized(mha, eye.expand(3, 4, 4)).state_dict()["out_proj.weight"],
                               mha.out_proj.weight.detach(), rtol=0, atol=0)  # default n: identities


def test_reparametrized_refuses_what_it_cannot_do():
    from attention_course.circuits import reparametrized

    eye = torch.eye(4).expand(2, 4, 4)
    with pytest.raises(ValueError, match="one key and value head per query head"):
        reparametrized(MultiHeadAttention(8, 2, num_kv_heads=1), eye)
    with pytest.raises(ValueError, match="singular"):
        reparametrized(MultiHeadAttention(8, 2), torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match=r"\(2, 4, 4\)"):
        reparametrized(MultiHeadAttention(8, 2), torch.eye(4).expand(3, 4, 4))
