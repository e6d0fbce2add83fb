"""attention.py against PyTorch's own scaled_dot_product_attention, plus stability and error handling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention_course import (
    attention_entropy,
    attention_per_query,
    hard_lookup,
    scaled_dot_product_attention,
    softmax,
)
from attention_course.attention import argmax_attention

TOL = {torch.float32: dict(atol=2e-6, rtol=2e-5), torch.float64: dict(atol=1e-12, rtol=1e-10)}


def _random_case(gen: torch.Generator, dtype: torch.dtype):
    batch = tuple(int(b) for b in torch.randint(1, 4, (int(torch.randint(0, 3, (1,), generator=gen)),), generator=gen))
    n_q, n_k, d_k, d_v = (int(x) for x in torch.randint(1, 9, (4,), generator=gen))
    q = torch.randn(*batch, n_q, d_k, generator=gen, dtype=dtype)
    k = torch.randn(*batch, n_k, d_k, generator=gen, dtype=dtype)
    v = torch.randn(*batch, n_k, d_v, generator=gen, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(8))
def test_matches_torch_sdpa(dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = _random_case(gen, dtype)
    out, w = scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    assert w.shape == (*q.shape[:-1], k.shape[-2])
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_torch_sdpa_with_mask_scale_and_broadcast(dtype):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 5, 4, generator=gen, dtype=dtype)
    k = torch.randn(2, 3, 7, 4, generator=gen, dtype=dtype)
    v = torch.randn(2, 3, 7, 6, generator=gen, dtype=dtype)
    mask = torch.rand(2, 1, 5, 7, generator=gen) > 0.3
    mask[..., 0] = True  # every row keeps one key, so PyTorch's result is defined too
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, scale=0.3)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    assert torch.all(w[~mask.expand_as(w)] == 0)
    # causal: PyTorch's is_causal is the lower-triangular mask
    causal = torch.ones(5, 7, dtype=torch.bool).tril()
    out, _ = scaled_dot_product_attention(q, k, v, mask=causal)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL[dtype])


def test_gradients_match_torch_sdpa():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[1, 1, 0, 1]] * 4, dtype=torch.bool)
    g = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad((scaled_dot_product_attention(q, k, v, mask)[0] * g).sum(), (q, k, v))
    theirs = torch.autograd.grad((F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * g).sum(), (q, k, v))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, 2, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[1, 0, 1], [1, 1, 1], [0, 0, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, mask)[0], (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, mask)[1], (q, k, v))


def test_fully_masked_row_gives_zeros_and_finite_gradients():
    q, k, v = (torch.randn(4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(out[2] == 0) and torch.all(w[2] == 0)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[2] == 0)


def test_numpy_in_numpy_out_equals_torch():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 6))
    mask = rng.random((3, 5)) > 0.2
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert isinstance(out, np.ndarray) and isinstance(w, np.ndarray)
    ref, ref_w = scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)), torch.from_numpy(mask))
    np.testing.assert_allclose(out, ref.numpy(), atol=1e-12)
    np.testing.assert_allclose(w, ref_w.numpy(), atol=1e-12)
    assert isinstance(softmax(q), np.ndarray)


def test_per_query_loop_equals_matrix_form():
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 2))
    np.testing.assert_allclose(attention_per_query(q, k, v), scaled_dot_product_attention(q, k, v)[0], atol=1e-12)
    np.testing.assert_allclose(
        attention_per_query(q, k, v, scale=1.0), scaled_dot_product_attention(q, k, v, scale=1.0)[0], atol=1e-12
    )


@pytest.mark.parametrize("big", [1e4, -1e4])
def test_softmax_large_logits_is_stable(big):
    x = torch.tensor([[big, 0.0, -big], [big, big, big]], dtype=torch.float32)
    p = softmax(x)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(2))
    torch.testing.assert_close(p, torch.softmax(x, -1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_low_precision(dtype):
    x = (torch.randn(16, 33, generator=torch.Generator().manual_seed(0)) * 300).to(dtype)
    p = softmax(x)
    assert p.dtype == dtype and torch.isfinite(p).all()
    torch.testing.assert_close(p.float().sum(-1), torch.ones(16), atol=1e-2, rtol=0)
    q = k = v = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1)).to(dtype)
    out, w = scaled_dot_product_attention(q * 50, k * 50, v)
    assert out.dtype == dtype and torch.isfinite(out).all() and torch.isfinite(w).all()


def test_softmax_mask():
    x = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    m = torch.tensor([[True, False, True], [False, False, False]])
    p = softmax(x, mask=m)
    assert p[0, 1] == 0 and torch.all(p[1] == 0)
    torch.testing.assert_close(p[0, [0, 2]], torch.softmax(torch.tensor([1.0, 3.0]), -1))


def test_entropy_bounds():
    n = 7
    uniform = torch.full((n,), 1 / n, dtype=torch.float64)
    onehot = torch.zeros(n, dtype=torch.float64)
    onehot[3] = 1
    assert math.isclose(float(attention_entropy(uniform)), math.log(n), rel_tol=1e-12)
    assert float(attention_entropy(onehot)) == 0.0


def test_hard_lookup():
    values = [np.array([1.0, 0.0]), np.array([0.0, 2.0])]
    np.testing.assert_array_equal(hard_lookup("b", ["a", "b"], values), [0.0, 2.0])
    with pytest.raises(KeyError):
        hard_lookup("c", ["a", "b"], values)
    with pytest.raises(ValueError, match="one value per key"):
        hard_lookup("a", ["a"], values)


# --- bad input: each raises a clear error naming what it got and expected -------------------------------

def _qkv(n_q=3, n_k=4, d_k=5, d_v=6):
    return torch.randn(n_q, d_k), torch.randn(n_k, d_k), torch.randn(n_k, d_v)


def test_error_dk_mismatch():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"same last dimension d_k.*\(3, 5\).*\(4, 7\)"):
        scaled_dot_product_attention(q, torch.randn(4, 7), v)


def test_error_kv_length_mismatch():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"same length n_k.*\(4, 5\).*\(9, 6\)"):
        scaled_dot_product_attention(q, k, torch.randn(9, 6))


def test_error_mask_not_broadcastable():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"mask must be broadcastable.*\(3, 4\), got shape \(4, 3\)"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(4, 3, dtype=torch.bool))


def test_error_mask_dtype():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="mask must be boolean.*float32"):
        scaled_dot_product_attention(q, k, v, mask=torch.zeros(3, 4))


def test_error_too_few_dims():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"q must have at least 2 dimensions.*got shape \(5,\)"):
        scaled_dot_product_attention(q[0], k, v)


def test_error_types():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="all numpy arrays or all torch tensors"):
        scaled_dot_product_attention(q.numpy(), k, v)
    with pytest.raises(TypeError, match="floating-point dtype"):
        scaled_dot_product_attention(q.long(), k.long(), v.long())
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        scaled_dot_product_attention([[1.0]], k, v)
    with pytest.raises(TypeError, match="share a dtype"):
        scaled_dot_product_attention(q.double(), k, v)


# --- edges: PyTorch's answers (torch 2.13, CPU) -----------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0,), (2, 0, 4)])
def test_softmax_of_empty_is_empty_as_torch(shape):
    x = torch.randn(shape)
    for axis in range(-len(shape), len(shape)):
        got = softmax(x, axis)
        assert got.shape == shape and got.dtype == x.dtype
        torch.testing.assert_close(got, torch.softmax(x, axis))
    assert softmax(np.zeros(shape), -1).shape == shape


def test_softmax_of_a_scalar_is_one_as_torch():
    for x in (torch.tensor(-7.0), torch.tensor(3.0, dtype=torch.float16)):
        torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
    assert softmax(torch.tensor(2.0), mask=torch.tensor(False)) == 0  # a fully masked "row" of one


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("n_q", "n_k", "d_k", "d_v", "batch"),
    [(3, 0, 4, 2, (2,)), (0, 5, 4, 2, (2,)), (3, 5, 0, 2, (2,)), (3, 5, 4, 0, (2,)), (3, 5, 4, 2, (0,)),
     (0, 0, 0, 0, ())],
)
def test_attention_at_zero_lengths_equals_torch_sdpa(dtype, n_q, n_k, d_k, d_v, batch):
    """No keys: zero rows; no queries or batch 0: empty; d_k = 0: every score 0, the mean of the values."""
    gen = torch.Generator().manual_seed(n_q + 10 * n_k + 100 * d_k)
    q = torch.randn(*batch, n_q, d_k, generator=gen).to(dtype)
    k = torch.randn(*batch, n_k, d_k, generator=gen).to(dtype)
    v = torch.randn(*batch, n_k, d_v, generator=gen).to(dtype)
    out, w = scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v)
    assert out.shape == ref.shape and w.shape == (*batch, n_q, n_k) and out.dtype == w.dtype == dtype
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
    if batch == (2,):  # the per-query loop takes one (n, d) problem
        torch.testing.assert_close(attention_per_query(q[0], k[0], v[0]), ref[0], atol=1e-2, rtol=1e-2)
    if d_k == 0 and n_q:
        torch.testing.assert_close(out.double(), v.double().mean(-2, keepdim=True).expand_as(out), atol=1e-2, rtol=0)


def test_no_keys_gives_zero_gradients_as_torch():
    q, k, v = (torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in ((3, 4), (0, 4), (0, 2)))
    ours = torch.autograd.grad(scaled_dot_product_attention(q, k, v)[0].sum(), q)[0]
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v).sum(), q)[0]
    assert torch.equal(ours, theirs) and torch.all(ours == 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fully_masked_row_is_zero_in_every_dtype_as_torch(dtype):
    q, k, v = (torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(9)).to(dtype) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.all(ref[:, 1] == 0) and torch.all(out[:, 1] == 0) and torch.all(w[:, 1] == 0)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)


def test_scale_zero_averages_the_values_as_torch():
    q, k, v = (torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4)) for _ in range(3))
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, scale=0)[0],
                               F.scaled_dot_product_attention(q, k, v, scale=0.0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_per_query_loop_and_entropy_in_low_precision(dtype):
    q, k, v = (torch.randn(3, 4, generator=torch.Generator().manual_seed(5)).to(dtype) for _ in range(3))
    out = attention_per_query(q, k, v)
    assert out.dtype == dtype
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=2e-2, rtol=2e-2)
    w = softmax(torch.randn(5, 9, generator=torch.Generator().manual_seed(6)).to(dtype))
    h = attention_entropy(w)
    assert h.dtype == dtype
    torch.testing.assert_close(h.float(), attention_entropy(w.float()), atol=1e-2, rtol=1e-2)


def test_entropy_of_empty_and_fully_masked_rows_is_zero():
    assert torch.equal(attention_entropy(torch.zeros(3, 0)), torch.zeros(3))
    assert torch.equal(attention_entropy(torch.zeros(2, 4)), torch.zeros(2))  # a fully masked row's weights
    assert attention_entropy(torch.zeros(0, 4)).shape == (0,)
    np.testing.assert_array_equal(attention_entropy(np.full((2, 2), 0.5), axis=0), [math.log(2)] * 2)


def test_hard_lookup_with_no_keys_is_a_key_error_as_a_dict():
    with pytest.raises(KeyError):
        hard_lookup("a", [], [])


def test_zero_dimensional_numpy_input_keeps_its_shape():
    assert softmax(np.array(3.0)).shape == () == softmax(torch.tensor(3.0)).shape


def test_per_query_sum_has_the_gradients_of_the_matrix_form():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
               for s in [(3, 4), (5, 4), (5, 2)])
    loops = torch.autograd.grad(attention_per_query(q, k, v).sum(), (q, k, v))
    matrix = torch.autograd.grad(scaled_dot_product_attention(q, k, v).output.sum(), (q, k, v))
    for a, b in zip(loops, matrix, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


# --- argmax_attention: the hard lookup on vectors, the τ → 0 limit of the soft one -------------------------

def test_argmax_attention_is_the_cold_limit_of_softmax_attention():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, d, generator=gen, dtype=torch.float64) for n, d in ((4, 5), (6, 5), (6, 3)))
    out, w = argmax_attention(q, k, v)
    picked = (q @ k.transpose(-2, -1)).argmax(-1)
    torch.testing.assert_close(w, F.one_hot(picked, 6).double(), rtol=0, atol=0)
    torch.testing.assert_close(out, torch.take_along_dim(v, picked[..., None], dim=-2), rtol=0, atol=0)
    cold, _ = scaled_dot_product_attention(q, k, v, scale=1e6)  # temperature 1e-6
    torch.testing.assert_close(cold, out, rtol=0, atol=1e-12)


def test_argmax_attention_gradient_reaches_only_the_picked_values():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(n, d, generator=gen, dtype=torch.float64, requires_grad=True)
               for n, d in ((3, 4), (5, 4), (5, 2)))
    out, _ = argmax_attention(q, k, v)
    out.sum().backward()
    assert q.grad is None and k.grad is None  # the arg-max is piecewise constant
    picked = (q @ k.T).argmax(-1)
    counts = torch.bincount(picked, minlength=5).double()
    torch.testing.assert_close(v.grad, counts[:, None].expand(5, 2), rtol=0, atol=0)


def test_argmax_attention_numpy_ties_and_no_keys():
    out, w = argmax_attention(np.ones((2, 3)), np.ones((4, 3)), np.arange(8.0).reshape(4, 2))
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(w, np.tile([1.0, 0.0, 0.0, 0.0], (2, 1)))  # a tie: the first key
    out, w = argmax_attention(torch.randn(2, 3), torch.randn(0, 3), torch.randn(0, 4))
    assert torch.equal(out, torch.zeros(2, 4)) and w.shape == (2, 0)
