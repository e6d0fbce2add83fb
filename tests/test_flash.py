"""flash.py: FlashAttention's tiled backward pass against autograd, PyTorch's fused kernel and gradcheck."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attention_course.flash import flash_attention, flash_attention_backward
from attention_course.masks import causal_mask
from attention_course.measure import peak_memory_bytes
from attention_course.tiled import tiled_attention


def _inputs(*shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_(True) for s in shapes]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n_q", "n_k", "block_q", "block_k"), [(5, 7, 2, 3), (7, 7, 3, 2), (6, 4, 4, 4)])
def test_gradcheck_float64(causal, n_q, n_k, block_q, block_k):
    q, k, v = _inputs((2, n_q, 3), (2, n_k, 3), (2, n_k, 4))

    def f(q, k, v):
        return flash_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k).output

    assert torch.autograd.gradcheck(f, (q, k, v))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n_q", "n_k"), [(9, 9), (5, 11), (11, 5), (1, 13)])
def test_values_and_gradients_equal_pytorchs_fused_attention(causal, n_q, n_k):
    q, k, v = _inputs((2, 3, n_q, 4), (2, 3, n_k, 4), (2, 3, n_k, 6), seed=n_q + n_k)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(2, 1, n_q, n_k, generator=g) > 0.3
    mask[0, 0, 0] = False  # a fully masked query row
    seen = mask & causal_mask(n_q, n_k, alignment="upper_left") if causal else mask
    empty = ~seen.any(-1, keepdim=True)  # (2, 1, n_q, 1)
    grad_out = torch.randn(2, 3, n_q, 6, generator=g, dtype=torch.float64)
    out, lse = flash_attention(q, k, v, mask, causal=causal, block_q=4, block_k=3)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    # PyTorch gives NaN on a fully masked row; the package gives 0 there (and the row passes no gradient)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=seen).masked_fill(empty, 0)
    ref_grads = torch.autograd.grad(ref, (q, k, v), grad_out.masked_fill(empty, 0))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for got, want in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert torch.all(grads[0].masked_select(empty.expand_as(grads[0])) == 0)
    assert torch.all(torch.isneginf(lse[empty[..., 0].expand_as(lse)]))
    assert lse.grad_fn is None and not lse.requires_grad


def test_the_backward_function_is_what_autograd_runs_and_lse_matches_tiled():
    q, k, v = _inputs((1, 2, 10, 4), (1, 2, 10, 4), (1, 2, 10, 5))
    out, lse = flash_attention(q, k, v, causal=True, block_q=3, block_k=4)
    ref_out, ref_lse = tiled_attention(q, k, v, causal=True, block_q=3, block_k=4)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse.detach())
    grad_out = torch.randn_like(out)
    auto = torch.autograd.grad(out, (q, k, v), grad_out)
    by_hand = flash_attention_backward(q, k, v, out.detach(), lse, grad_out, causal=True, block_q=3, block_k=4)
    for a, b in zip(auto, by_hand, strict=True):
        assert torch.equal(a, b)


def test_broadcast_batches_get_summed_gradients():
    q, k, v = _inputs((2, 3, 6, 4), (2, 1, 6, 4), (1, 1, 6, 4))
    flash_attention(q, k, v, block_q=4, block_k=4).output.sum().backward()
    q2, k2, v2 = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    F.scaled_dot_product_attention(q2, k2.expand(2, 3, 6, 4), v2.expand(2, 3, 6, 4)).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        assert a.grad.shape == a.shape
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_is_computed_in_float32_and_returned_in_its_dtype(dtype):
    q, k, v = _inputs((1, 2, 33, 16), (1, 2, 33, 16), (1, 2, 33, 16), dtype=dtype)
    out = flash_attention(q, k, v, causal=True, block_q=8, block_k=8).output
    out.float().sum().backward()
    q2, k2, v2 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    F.scaled_dot_product_attention(q2, k2, v2, is_causal=True).sum().backward()
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float32: 1e-5}[dtype]
    for a, b in ((q, q2), (k, k2), (v, v2)):
        assert a.grad.dtype == dtype
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=0, atol=tol)


def test_edges_no_queries_no_keys():
    q, k, v = _inputs((1, 0, 3), (1, 4, 3), (1, 4, 2))
    out = flash_attention(q, k, v).output
    out.sum().backward()
    assert out.shape == (1, 0, 2) and torch.all(k.grad == 0) and torch.all(v.grad == 0)
    q, k, v = _inputs((1, 3, 3), (1, 0, 3), (1, 0, 2))
    out, lse = flash_attention(q, k, v)
    out.sum().backward()
    assert torch.all(out == 0) and torch.all(torch.isneginf(lse)) and torch.all(q.grad == 0)


def test_training_memory_grows_linearly_not_quadratically():
    """Peak memory of forward + backward, one head, d = 64, 256 × 256 tiles: flash is linear, autograd through
    the tiled loop and the plain softmax(QKᵀ)V are quadratic."""

    def peak(kind: str, n: int) -> float:
        q, k, v = _inputs((1, 1, n, 64), (1, 1, n, 64), (1, 1, n, 64), dtype=torch.float32)

        def step() -> None:
            if kind == "plain":
                out = torch.softmax(q @ k.transpose(-2, -1) / 8, dim=-1) @ v
            elif kind == "tiled":
                out = tiled_attention(q, k, v, block_q=256, block_k=256).output
            else:
                out = flash_attention(q, k, v, block_q=256, block_k=256).output
            out.sum().backward()

        return float(peak_memory_bytes(step))

    ns = (1024, 4096)
    peaks = {kind: [peak(kind, n) for n in ns] for kind in ("plain", "tiled", "flash")}
    slope = {kind: math.log(p[1] / p[0]) / math.log(ns[1] / ns[0]) for kind, p in peaks.items()}
    assert slope["flash"] < 1.0 and slope["plain"] > 1.8 and slope["tiled"] > 1.8
    assert peaks["flash"][1] < peaks["plain"][1] / 10


@pytest.mark.parametrize(("n_q", "n_k"), [(3, 11), (11, 4), (7, 7)])
def test_lower_right_gradients_equal_autograd_through_the_mask(n_q, n_k):
    """causal="lower_right" (new queries after cached keys): output and dQ, dK, dV equal autograd through the
    materialised lower-right mask (rows with no key give zeros and no gradient), on tiles that cut the diagonal."""
    from attention_course import scaled_dot_product_attention

    gen = torch.Generator().manual_seed(n_q * 31 + n_k)
    q, k, v = (torch.randn(2, n, 5, generator=gen, dtype=torch.float64, requires_grad=True)
               for n in (n_q, n_k, n_k))
    grad = torch.randn(2, n_q, 5, generator=gen, dtype=torch.float64)
    out = flash_attention(q, k, v, causal="lower_right", block_q=2, block_k=3).output
    mine = torch.autograd.grad(out, (q, k, v), grad)
    ref_out, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(n_q, n_k, alignment="lower_right"))
    theirs = torch.autograd.grad(ref_out, (q, k, v), grad)
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=0)
    for a, b in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    if n_q != n_k:  # and it is not the upper-left pass
        upper = flash_attention(q, k, v, causal=True, block_q=2, block_k=3).output
        assert (upper - out).abs().max() > 1e-3
