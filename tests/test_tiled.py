"""tiled.py (chapter 6): online softmax, the exact merge of (m, ℓ, acc) states, tiled attention.

Tiled attention is compared with the package's naive attention (itself tested against PyTorch) and with PyTorch's
``F.scaled_dot_product_attention`` directly. Tolerances, against a float64 reference computed on the same
(rounded) inputs, with outputs of order 1:

* float64: 1e-10 absolute (observed ~1e-15);
* float32: 1e-5 absolute and relative (observed < 1e-6, the same as the naive float32 computation);
* bfloat16: 1.6e-2 absolute and relative, about two bf16 units in the last place at 1 (bf16 keeps 8 significant
  bits; the output's own rounding is up to 2^-8 relative); float16: 2e-3. In both, the tiled error may exceed
  the naive low-precision computation's by at most one unit in the last place.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention_course import scaled_dot_product_attention, softmax
from attention_course.masks import causal_mask
from attention_course.tiled import (
    SoftmaxState,
    TiledOutput,
    empty_state,
    merge_states,
    online_softmax,
    softmax_state,
    state_logsumexp,
    state_output,
    tiled_attention,
    tiled_attention_steps,
)

LOW_TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
}
ULP_AT_ONE = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}


def _rand_int(gen: torch.Generator, lo: int, hi: int) -> int:
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def _random_problem(gen: torch.Generator, dtype=torch.float64):
    batch = tuple(_rand_int(gen, 1, 3) for _ in range(_rand_int(gen, 0, 2)))
    n_q, n_k = _rand_int(gen, 1, 40), _rand_int(gen, 1, 40)
    d_k, d_v = _rand_int(gen, 1, 9), _rand_int(gen, 1, 9)
    q = torch.randn(*batch, n_q, d_k, generator=gen, dtype=dtype)
    k = torch.randn(*batch, n_k, d_k, generator=gen, dtype=dtype)
    v = torch.randn(*batch, n_k, d_v, generator=gen, dtype=dtype)
    return q, k, v


def _causal(n_q: int, n_k: int) -> torch.Tensor:
    """PyTorch's is_causal convention (upper-left aligned): query i may attend to keys j <= i."""
    return causal_mask(n_q, n_k, alignment="upper_left")


# --- tiled attention against naive attention -------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(24))
def test_tiled_equals_naive_float64_random_shapes_blocks_masks(seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = _random_problem(gen)
    n_q, n_k = q.shape[-2], k.shape[-2]
    block_q, block_k = _rand_int(gen, 1, 17), _rand_int(gen, 1, 17)  # mostly not dividing n_q, n_k
    causal = seed % 2 == 1
    mask = None
    if seed % 3 != 0:
        mask = torch.rand(n_q, n_k, generator=gen) > 0.4
        mask[_rand_int(gen, 0, n_q - 1)] = False  # at least one fully masked row
    out, lse = tiled_attention(q, k, v, mask=mask, causal=causal, block_q=block_q, block_k=block_k)

    full = torch.ones(n_q, n_k, dtype=torch.bool) if mask is None else mask.clone()
    if causal:
        full &= _causal(n_q, n_k)
    ref, weights = scaled_dot_product_attention(q, k, v, mask=full)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    assert torch.isfinite(out).all()
    # the log-sum-exp of each row's visible scores, and the weights recovered from it
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    ref_lse = torch.logsumexp(scores.masked_fill(~full, -math.inf), dim=-1)
    torch.testing.assert_close(lse, ref_lse, atol=1e-10, rtol=0)
    recovered = torch.exp(scores - lse.unsqueeze(-1)).masked_fill(~full, 0.0)
    torch.testing.assert_close(recovered, weights, atol=1e-10, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_equals_torch_sdpa(causal):
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(2, 3, 53, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 3, 53, 16, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 3, 53, 8, generator=gen, dtype=torch.float64)
    out, _ = tiled_attention(q, k, v, causal=causal, block_q=10, block_k=7, scale=0.4)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.4)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)


def test_fully_masked_rows_are_zero_not_nan():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 9, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 11, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 11, 5, generator=gen, dtype=torch.float64)
    mask = torch.ones(2, 9, 11, dtype=torch.bool)
    mask[0, 2] = False
    mask[1, 5:] = False
    mask[:, :, 4:8] = False  # some whole key blocks invisible to everyone
    out, lse = tiled_attention(q, k, v, mask=mask, block_q=4, block_k=4)
    ref, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.all(out[0, 2] == 0) and torch.all(out[1, 5:] == 0)
    assert torch.isneginf(lse[0, 2]) and torch.isneginf(lse[1, 5:]).all()
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    # everything masked, and no keys at all
    out_none, _ = tiled_attention(q, k, v, mask=torch.zeros(9, 11, dtype=torch.bool), block_q=3, block_k=5)
    assert torch.all(out_none == 0)
    out_empty, lse_empty = tiled_attention(q, k[:, :0], v[:, :0])
    assert out_empty.shape == (2, 9, 5) and torch.all(out_empty == 0) and torch.isneginf(lse_empty).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_low_precision_documented_tolerance(dtype, causal):
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(2, 130, 64, generator=gen).to(dtype)
    k = torch.randn(2, 190, 64, generator=gen).to(dtype)
    v = torch.randn(2, 190, 48, generator=gen).to(dtype)
    mask = _causal(130, 190) if causal else None
    out, _ = tiled_attention(q, k, v, causal=causal, block_q=33, block_k=47)
    assert out.dtype == dtype
    ref64, _ = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask=mask)
    torch.testing.assert_close(out.double(), ref64, **LOW_TOL[dtype])
    naive, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    err_tiled = (out.double() - ref64).abs().max().item()
    err_naive = (naive.double() - ref64).abs().max().item()
    assert err_tiled <= err_naive + ULP_AT_ONE[dtype]


def test_tiled_numpy_in_numpy_out_and_broadcast_batch():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 1, 6, 4)), rng.normal(size=(1, 2, 9, 4)), rng.normal(size=(1, 2, 9, 3))
    out, lse = tiled_attention(q, k, v, block_q=4, block_k=4)
    ref, _ = scaled_dot_product_attention(q, k, v)
    assert isinstance(out, np.ndarray) and isinstance(lse, np.ndarray)
    assert out.shape == (3, 2, 6, 3) and lse.shape == (3, 2, 6)
    np.testing.assert_allclose(out, ref, atol=1e-12)


def test_tiled_rejects_bad_inputs():
    q, k, v = torch.randn(4, 3), torch.randn(5, 3), torch.randn(5, 2)
    with pytest.raises(ValueError, match="block_q"):
        tiled_attention(q, k, v, block_q=0)
    with pytest.raises(TypeError, match="block_k"):
        tiled_attention(q, k, v, block_k=2.5)
    with pytest.raises(ValueError, match="d_k"):
        tiled_attention(q, torch.randn(5, 4), v)
    with pytest.raises(ValueError, match="n_k"):
        tiled_attention(q, k, torch.randn(6, 2))
    with pytest.raises(TypeError, match="floating"):
        tiled_attention(q.long(), k, v)
    with pytest.raises(TypeError, match="boolean"):
        tiled_attention(q, k, v, mask=torch.ones(4, 5))
    with pytest.raises(ValueError, match="broadcastable"):
        tiled_attention(q, k, v, mask=torch.ones(4, 6, dtype=torch.bool))
    with pytest.raises(TypeError, match="causal"):
        tiled_attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="mix"):
        tiled_attention(q.numpy(), k, v)


def test_steps_walk_the_tiles_and_end_in_the_output():
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(23, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    out, _ = tiled_attention(q, k, v, causal=True, block_q=5, block_k=6)
    steps = list(tiled_attention_steps(q, k, v, causal=True, block_q=5, block_k=6))
    # causal: query block [i0, i1) visits key blocks starting below i1 only
    expected = [(i0, j0) for i0 in range(0, 23, 5) for j0 in range(0, min(23, i0 + 5), 6)]
    assert [(s.q_start, s.k_start) for s in steps] == expected
    last = {}
    for s in steps:
        last[s.q_start] = s
    for s in last.values():
        torch.testing.assert_close(state_output(s.state), out[s.q_start : s.q_stop], atol=1e-12, rtol=0)
    # the running max never decreases along a row of tiles
    for a, b in zip(steps, steps[1:], strict=False):
        if a.q_start == b.q_start:
            assert torch.all(b.state.m >= a.state.m)


# --- online softmax and the (m, ℓ, acc) states -----------------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 3, 8, 100])
def test_online_softmax_equals_softmax(block_size):
    gen = torch.Generator().manual_seed(block_size)
    x = 10 * torch.randn(4, 5, 37, generator=gen, dtype=torch.float64)
    for axis in (-1, 0, 1):
        torch.testing.assert_close(online_softmax(x, axis=axis, block_size=block_size), softmax(x, axis=axis),
                                   atol=1e-12, rtol=0)
    mask = torch.rand(4, 5, 37, generator=gen) > 0.5
    mask[0, 0] = False
    got = online_softmax(x, mask=mask, block_size=block_size)
    torch.testing.assert_close(got, softmax(x, mask=mask), atol=1e-12, rtol=0)
    assert torch.all(got[0, 0] == 0)


def test_online_softmax_stable_numpy_and_errors():
    big = np.array([1000.0, 999.0, -1000.0])
    got = online_softmax(big)
    assert isinstance(got, np.ndarray) and np.isfinite(got).all()
    np.testing.assert_allclose(got, softmax(big), atol=1e-15)
    with pytest.raises(ValueError, match="block_size"):
        online_softmax(big, block_size=0)
    assert online_softmax(torch.tensor(-3.0)) == 1.0  # a scalar is one entry, as torch.softmax takes it


def _random_state(gen, rows=(3,), n=5, d_v=4):
    s = 3 * torch.randn(*rows, n, generator=gen, dtype=torch.float64)
    v = torch.randn(*rows[:-1], n, d_v, generator=gen, dtype=torch.float64)
    return s, v


def _close(a: SoftmaxState, b: SoftmaxState, atol=1e-12):
    torch.testing.assert_close(a.m, b.m, atol=atol, rtol=0)
    torch.testing.assert_close(a.l, b.l, atol=atol, rtol=0)
    torch.testing.assert_close(a.acc, b.acc, atol=atol, rtol=0)


def test_merge_is_exact_associative_commutative_with_identity():
    gen = torch.Generator().manual_seed(0)
    s = 4 * torch.randn(6, 30, generator=gen, dtype=torch.float64)
    v = torch.randn(30, 5, generator=gen, dtype=torch.float64)
    whole = softmax_state(s, v)
    a, b, c = (softmax_state(s[:, i:j], v[i:j]) for i, j in ((0, 7), (7, 19), (19, 30)))
    _close(merge_states(merge_states(a, b), c), whole)
    _close(merge_states(a, merge_states(b, c)), whole)
    _close(merge_states(b, a), merge_states(a, b))
    _close(merge_states(empty_state((6,), 5), a), a)
    weights = softmax(s)
    torch.testing.assert_close(state_output(whole), weights @ v, atol=1e-12, rtol=0)
    torch.testing.assert_close(state_logsumexp(whole), torch.logsumexp(s, -1), atol=1e-12, rtol=0)


def test_state_of_masked_blocks_and_errors():
    s = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    v = torch.eye(3, dtype=torch.float64)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    st = softmax_state(s, v, mask=mask)
    assert torch.isneginf(st.m[1]) and st.l[1] == 0 and torch.all(st.acc[1] == 0)
    merged = merge_states(st, softmax_state(s[:, :0], v[:0]))  # merging two empty rows stays empty, no NaN
    assert not torch.isnan(merged.l).any() and not torch.isnan(merged.acc).any()
    out = state_output(merged)
    torch.testing.assert_close(out[0], softmax(s[0], mask=mask[0]), atol=1e-15, rtol=0)
    assert torch.all(out[1] == 0)
    with pytest.raises(ValueError, match="acc"):
        merge_states(st, softmax_state(s))
    with pytest.raises(ValueError, match="values"):
        state_output(softmax_state(s))
    with pytest.raises(ValueError, match=r"\(\.\.\., n, d_v\)"):
        softmax_state(s, torch.ones(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="different rows"):
        merge_states(softmax_state(s), softmax_state(torch.zeros(3, 2, dtype=torch.float64)))


def test_tiled_returns_a_named_tuple():
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 7, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    res = tiled_attention(q, k, v, block_q=3, block_k=2)
    assert isinstance(res, TiledOutput) and res._fields == ("output", "lse")
    out, lse = res  # still unpacks as a pair
    assert out is res.output and lse is res.lse
    torch.testing.assert_close(res.output, scaled_dot_product_attention(q, k, v)[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(res.lse, torch.logsumexp(q @ k.transpose(-2, -1) / 2.0, dim=-1), atol=1e-12, rtol=0)


@pytest.mark.parametrize(("n_q", "n_k"), [(5, 13), (13, 5), (9, 9)])
def test_causal_is_upper_left_as_torch_is_causal(n_q, n_k):
    """causal=True is PyTorch's is_causal (upper-left) also when n_q != n_k; the alignment can be named, and
    "lower_right" equals the lower-right mask, materialised or not."""
    gen = torch.Generator().manual_seed(n_q * 100 + n_k)
    q = torch.randn(2, n_q, 6, generator=gen, dtype=torch.float64)
    k = torch.randn(2, n_k, 6, generator=gen, dtype=torch.float64)
    v = torch.randn(2, n_k, 3, generator=gen, dtype=torch.float64)
    out, _ = tiled_attention(q, k, v, causal=True, block_q=4, block_k=3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-12, rtol=0)
    upper, _ = tiled_attention(q, k, v, mask=causal_mask(n_q, n_k, alignment="upper_left"), block_q=4, block_k=3)
    torch.testing.assert_close(out, upper, atol=1e-12, rtol=0)
    # lower-right (queries are the last n_q positions, as with a KV cache): key j visible iff j <= i + n_k - n_q
    lower_ref = torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)
    lower, _ = tiled_attention(q, k, v, mask=causal_mask(n_q, n_k, alignment="lower_right"), block_q=4, block_k=3)
    ref, _ = scaled_dot_product_attention(q, k, v, mask=lower_ref)
    torch.testing.assert_close(lower, ref, atol=1e-12, rtol=0)
    if n_q != n_k:  # the two alignments really differ here, so the test above can tell them apart
        assert (out - lower).abs().max() > 1e-3
    # the alignment named: "upper_left" is causal=True; "lower_right" is the lower-right mask, without materialising
    # it (tiles past the shifted diagonal skipped; with n_q > n_k the first queries see no key: zeros, lse -inf)
    named_upper = tiled_attention(q, k, v, causal="upper_left", block_q=4, block_k=3)
    torch.testing.assert_close(named_upper.output, out, atol=0, rtol=0)
    named_lower = tiled_attention(q, k, v, causal="lower_right", block_q=4, block_k=3)
    ref_lse = torch.logsumexp((q @ k.transpose(-2, -1) / math.sqrt(6)).masked_fill(~lower_ref, -math.inf), -1)
    torch.testing.assert_close(named_lower.output, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(named_lower.lse, ref_lse, atol=1e-12, rtol=0)
    both = tiled_attention(q, k, v, mask=causal_mask(n_q, n_k, alignment="upper_left"), causal="lower_right",
                           block_q=4, block_k=3)  # combined by logical and: the stricter of the two, row by row
    ref_both, _ = scaled_dot_product_attention(q, k, v, mask=lower_ref & causal_mask(n_q, n_k, alignment="upper_left"))
    torch.testing.assert_close(both.output, ref_both, atol=1e-12, rtol=0)


# --- edges: PyTorch's answers (torch 2.13, CPU) -----------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("n_q", "n_k", "d_k", "d_v", "batch"),
    [(5, 0, 4, 2, (2,)), (0, 5, 4, 2, (2,)), (5, 7, 0, 2, (2,)), (5, 7, 4, 0, (2,)), (5, 7, 4, 2, (0,))],
)
def test_tiled_at_zero_lengths_equals_torch_sdpa(causal, n_q, n_k, d_k, d_v, batch):
    gen = torch.Generator().manual_seed(n_q + 10 * n_k + 100 * d_k)
    q = torch.randn(*batch, n_q, d_k, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(*batch, n_k, d_k, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(*batch, n_k, d_v, generator=gen, dtype=torch.float64, requires_grad=True)
    out, lse = tiled_attention(q, k, v, causal=causal, block_q=2, block_k=3)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert out.shape == ref.shape and lse.shape == (*batch, n_q)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    visible = torch.ones(n_q, n_k, dtype=torch.bool)
    visible = visible.tril() if causal else visible
    scores = (q @ k.transpose(-2, -1) / (math.sqrt(d_k) if d_k else 1.0)).masked_fill(~visible, -math.inf)
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), atol=1e-12, rtol=0)
    # on the autograd graph, as PyTorch's output, even when there is no tile at all
    ours = torch.autograd.grad(out.sum(), (q, k, v), allow_unused=True)
    theirs = torch.autograd.grad(ref.sum(), (q, k, v), allow_unused=True)
    for a, b, t in zip(ours, theirs, (q, k, v), strict=True):
        torch.testing.assert_close(torch.zeros_like(t) if a is None else a, torch.zeros_like(t) if b is None else b)


def test_tiled_d_k_zero_averages_the_values():
    v = torch.randn(2, 6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out, lse = tiled_attention(torch.zeros(2, 4, 0, dtype=torch.float64), torch.zeros(2, 6, 0, dtype=torch.float64), v,
                               block_q=3, block_k=4)
    torch.testing.assert_close(out, v.mean(-2, keepdim=True).expand(2, 4, 3), atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, torch.full((2, 4), math.log(6), dtype=torch.float64))


def test_steps_check_their_inputs_at_the_call_and_make_none_without_queries():
    q, k, v = torch.randn(0, 3), torch.randn(4, 3), torch.randn(4, 2)
    assert list(tiled_attention_steps(q, k, v)) == []
    with pytest.raises(ValueError, match="block_q"):
        tiled_attention_steps(k, k, v, block_q=0)  # not only when the first step is asked for


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), ()])
def test_online_softmax_of_empty_and_scalar_equals_torch(shape):
    x = torch.randn(shape, dtype=torch.float64)
    torch.testing.assert_close(online_softmax(x, block_size=2), torch.softmax(x, -1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_states_of_low_precision_scores_are_float32(dtype):
    gen = torch.Generator().manual_seed(2)
    s, v = (4 * torch.randn(3, 7, generator=gen)).to(dtype), torch.randn(7, 2, generator=gen).to(dtype)
    st = softmax_state(s, v)
    assert st.m.dtype == st.l.dtype == st.acc.dtype == torch.float32
    ref = torch.softmax(s.double(), -1) @ v.double()
    torch.testing.assert_close(state_output(st).double(), ref, atol=1e-5, rtol=1e-5)  # float32 accuracy
    assert online_softmax(s, block_size=3).dtype == dtype


def test_empty_blocks_and_states_are_the_identity():
    s = torch.randn(3, 0, dtype=torch.float64)
    st = softmax_state(s, torch.zeros(0, 2, dtype=torch.float64))
    assert torch.isneginf(st.m).all() and torch.all(st.l == 0) and st.acc.shape == (3, 2) and torch.all(st.acc == 0)
    assert torch.isneginf(state_logsumexp(st)).all()  # as torch.logsumexp of an empty row
    assert torch.isneginf(torch.logsumexp(s, -1)).all()
    assert torch.all(state_output(st) == 0)
    one = empty_state((), 0)  # one row, values of width 0
    assert one.m.shape == () and one.acc.shape == (0,)
    no_rows = empty_state((0,), 2, dtype=torch.float32)
    assert no_rows.m.shape == (0,) and no_rows.acc.shape == (0, 2) and no_rows.m.dtype == torch.float32
