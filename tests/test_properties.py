"""Property tests (Hypothesis): the package's softmax and attention against PyTorch's own on random problems.

Shapes include zero lengths (no queries, no keys, ``d_k = 0``, ``d_v = 0``, a batch of 0), masks include fully
masked rows, blocks need not divide the lengths, dtypes are float32, float64, float16 and bfloat16. PyTorch's
answers at the edges (torch 2.13, CPU), which the package matches:

* a fully masked row of ``F.scaled_dot_product_attention`` is zero (output and gradient), in every dtype;
* no keys (``n_k = 0``) gives a zero output; no queries or a batch of 0 gives an empty one;
* ``d_k = 0`` makes every score 0, so each output row is the mean of the values;
* ``torch.softmax`` of an empty axis is empty, of a scalar 1 (of a row of ``-inf`` NaN: the package's masked
  softmax gives zeros there instead, as attention does).

Low-precision results are compared with PyTorch's float64 answer on the same (rounded) inputs, within a few units
in the last place of the output's dtype. Examples are derandomised (tests/conftest.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel

from attention_course import scaled_dot_product_attention, softmax
from attention_course.tiled import merge_states, online_softmax, softmax_state, state_output, tiled_attention

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
#: Against a float64 reference on the same inputs; outputs are of order 1 (at most a few units).
TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=4e-3, rtol=4e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}


@st.composite
def problems(draw, dtypes=DTYPES):
    """Queries, keys and values of random (possibly empty, possibly broadcast) shapes, a boolean mask or None,
    and a scale or None."""
    batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    kv_batch = tuple(1 if draw(st.booleans()) else b for b in batch)  # keys and values shared across a dimension
    n_q, n_k, d_k, d_v = (draw(st.integers(0, hi)) for hi in (9, 9, 5, 4))
    dtype = draw(st.sampled_from(dtypes))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = torch.randn(*batch, n_q, d_k, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(*kv_batch, n_k, d_k, generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(*kv_batch, n_k, d_v, generator=gen, dtype=torch.float64).to(dtype)
    mask = None
    layout = draw(st.sampled_from(["none", "square", "batched", "keys"]))
    if layout != "none":
        shape = {"square": (n_q, n_k), "batched": (*batch, n_q, n_k), "keys": (1, n_k)}[layout]
        mask = torch.rand(shape, generator=gen) < draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
        if layout != "keys" and n_q and draw(st.booleans()):
            mask[..., draw(st.integers(0, n_q - 1)), :] = False  # a fully masked row
    scale = draw(st.one_of(st.none(), st.floats(-2.0, 2.0)))
    return q, k, v, mask, scale


def _visible(mask: torch.Tensor | None, causal: bool, n_q: int, n_k: int) -> torch.Tensor | None:
    """The mask PyTorch is given: ``mask`` and, for ``causal``, its upper-left triangle (``is_causal``)."""
    if not causal:
        return mask
    tri = torch.ones(n_q, n_k, dtype=torch.bool).tril()
    return tri if mask is None else mask & tri


def _reference(q, k, v, mask, scale, causal=False):
    """PyTorch's attention output in float64, the weights and the row log-sum-exp."""
    q, k, v = q.double(), k.double(), v.double()
    n_q, n_k = q.shape[-2], k.shape[-2]
    if causal and mask is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=_visible(mask, causal, n_q, n_k), scale=scale)
    factor = scale if scale is not None else (1 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0)
    scores = (q @ k.transpose(-2, -1)) * factor
    visible = _visible(mask, causal, n_q, n_k)
    if visible is not None:
        scores = scores.masked_fill(~visible, -math.inf)
    weights = torch.softmax(scores, -1).nan_to_num(0.0)  # a fully masked row: NaN in torch.softmax, 0 in attention
    return out, weights, torch.logsumexp(scores, -1)


def _close(ours: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert ours.dtype == dtype, f"{ours.dtype} back for {dtype} in"
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours.double(), ref, **TOL[dtype])


@given(problems())
def test_attention_equals_torch_sdpa(problem):
    q, k, v, mask, scale = problem
    out, weights = scaled_dot_product_attention(q, k, v, mask, scale)
    ref, ref_weights, _ = _reference(q, k, v, mask, scale)
    _close(out, ref, q.dtype)
    _close(weights, ref_weights, q.dtype)


@given(problems(), st.booleans(), st.integers(1, 5), st.integers(1, 5))
def test_tiled_attention_equals_torch_sdpa(problem, causal, block_q, block_k):
    q, k, v, mask, scale = problem
    out, lse = tiled_attention(q, k, v, mask, scale, causal=causal, block_q=block_q, block_k=block_k)
    ref, _, ref_lse = _reference(q, k, v, mask, scale, causal)
    _close(out, ref, q.dtype)
    _close(lse, ref_lse, q.dtype)


@given(problems(dtypes=[torch.float64]), st.booleans(), st.integers(1, 4))
def test_gradients_equal_torch_sdpa_float64(problem, causal, block):
    """Gradients of both attention functions equal PyTorch's, also through fully masked rows and empty shapes."""
    q, k, v, mask, scale = problem
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    up = torch.randn(torch.broadcast_shapes(q.shape[:-1], k.shape[:-2] + (1,)) + v.shape[-1:], dtype=torch.float64,
                     generator=torch.Generator().manual_seed(q.numel()))
    # PyTorch's math backend: torch 2.11's fused CPU backward dies of SIGFPE on some empty shapes (seen on a GPU
    # machine's CPU), and a crash takes the whole test run with it; 2.13's agrees with the math backend here
    with sdpa_kernel(SDPBackend.MATH):
        ref = torch.autograd.grad((_reference(q, k, v, mask, scale, causal)[0] * up).sum(), (q, k, v),
                                  allow_unused=True)
    visible = _visible(mask, causal, q.shape[-2], k.shape[-2])
    ours = scaled_dot_product_attention(q, k, v, visible, scale).output
    tiled = tiled_attention(q, k, v, mask, scale, causal=causal, block_q=block, block_k=block + 1).output
    for out in (ours, tiled):
        grads = torch.autograd.grad((out * up).sum(), (q, k, v), allow_unused=True)
        for g, r, t in zip(grads, ref, (q, k, v), strict=True):
            g = torch.zeros_like(t) if g is None else g
            r = torch.zeros_like(t) if r is None else r
            assert torch.isfinite(g).all()
            torch.testing.assert_close(g, r, atol=1e-10, rtol=1e-10)


@st.composite
def logits(draw):
    """Logits of 0 to 3 dimensions (lengths from 0), an axis, a mask or None."""
    shape = tuple(draw(st.lists(st.integers(0, 6), max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    x = (5 * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
    axis = draw(st.integers(-max(len(shape), 1), max(len(shape), 1) - 1))
    mask = None
    if draw(st.booleans()):
        mask = torch.rand(shape, generator=gen) < draw(st.sampled_from([0.0, 0.5, 1.0]))
    return x, axis, mask


def _softmax_reference(x, axis, mask):
    x = x.double()
    if mask is not None:
        return torch.softmax(x.masked_fill(~mask, -math.inf), axis).nan_to_num(0.0)
    return torch.softmax(x, axis)


@given(logits(), st.integers(1, 4))
def test_softmax_and_online_softmax_equal_torch_softmax(case, block_size):
    x, axis, mask = case
    ref = _softmax_reference(x, axis, mask)
    _close(softmax(x, axis, mask), ref, x.dtype)
    _close(online_softmax(x, axis, mask, block_size=block_size), ref, x.dtype)


@given(logits(), st.data())
def test_merged_states_of_any_split_equal_the_whole(case, data):
    """The state of a row is the merge of the states of any split of it into blocks, in any order."""
    x, _, mask = case
    if x.ndim == 0:
        x, mask = x.reshape(1), None if mask is None else mask.reshape(1)
    n = x.shape[-1]
    values = torch.randn(*x.shape[:-2], n, 3, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    values = values.to(x.dtype)  # one value per key, shared by the rows
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    pieces = [
        softmax_state(x[..., i:j], values[..., i:j, :], None if mask is None else mask[..., i:j])
        for i, j in zip([0, *cuts], [*cuts, n], strict=True)
    ]
    merged = pieces[0]
    for piece in data.draw(st.permutations(pieces[1:])):
        merged = merge_states(merged, piece)
    ref = _softmax_reference(x, -1, mask) @ values.double()
    torch.testing.assert_close(state_output(merged).double(), ref, **TOL[x.dtype])
