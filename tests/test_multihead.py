"""multihead.py against PyTorch: nn.MultiheadAttention (weights loaded with from_torch) and, for grouped-query
attention, F.scaled_dot_product_attention(..., enable_gqa=True). Both computation paths of the package's module
(need_weights=True: explicit; False: fused kernel) are compared; then the helpers and the error messages."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course.circuits import head_weights, qk_circuit
from attention_course.interop import from_torch, to_torch
from attention_course.masks import from_torch_masks
from attention_course.multihead import (
    MultiHeadAttention,
        merge_heads,
    split_heads,
)

TOL = {torch.float64: dict(atol=1e-10, rtol=1e-8), torch.float32: dict(atol=2e-6, rtol=2e-5)}
DTYPES = [torch.float64, torch.float32]


def _pair(seed: int, dtype: torch.dtype, batch_first: bool, embed_dim: int = 24, num_heads: int = 4, **kw):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(embed_dim, num_heads, batch_first=batch_first, dtype=dtype, **kw).eval()
    with torch.no_grad():  # PyTorch zero-initialises the biases; make them non-zero so they are tested too
        for p in ref.parameters():
            if p.ndim == 1:
                p.normal_()
    return ref, from_torch(ref).eval()


def _seq(gen: torch.Generator, batch: int, n: int, d: int, dtype: torch.dtype, batch_first: bool) -> torch.Tensor:
    x = torch.randn(batch, n, d, generator=gen, dtype=dtype)
    return x if batch_first else x.transpose(0, 1).contiguous()


def _gqa_reference(mha: MultiHeadAttention, x: torch.Tensor, mask=None, is_causal=False):
    """Project with the module's weights, then PyTorch's fused kernel with enable_gqa=True; (batch, n, d) input."""
    w_q, w_k, w_v = mha.in_proj_weight.split([mha.embed_dim, mha.kv_dim, mha.kv_dim])
    b_q, b_k, b_v = mha.in_proj_bias.split([mha.embed_dim, mha.kv_dim, mha.kv_dim])
    q = split_heads(F.linear(x, w_q, b_q), mha.num_heads)
    k = split_heads(F.linear(x, w_k, b_k), mha.num_kv_heads)
    v = split_heads(F.linear(x, w_v, b_v), mha.num_kv_heads)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True)
    return mha.out_proj(merge_heads(out))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("average", [True, False])
def test_self_attention_matches_torch(dtype, batch_first, average):
    ref, ours = _pair(0, dtype, batch_first)
    x = _seq(torch.Generator().manual_seed(1), 3, 7, 24, dtype, batch_first)
    out_ref, w_ref = ref(x, x, x, need_weights=True, average_attn_weights=average)
    out, w = ours(x, x, x, need_weights=True, average_attn_weights=average)
    fast, none = ours(x, x, x, need_weights=False)
    assert none is None and w.shape == w_ref.shape == ((3, 7, 7) if average else (3, 4, 7, 7))
    torch.testing.assert_close(out, out_ref, **TOL[dtype])
    torch.testing.assert_close(w, w_ref, **TOL[dtype])
    torch.testing.assert_close(fast, out_ref, **TOL[dtype])
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
def test_key_padding_mask_matches_torch(dtype, batch_first):
    ref, ours = _pair(2, dtype, batch_first)
    x = _seq(torch.Generator().manual_seed(3), 4, 6, 24, dtype, batch_first)
    padding = torch.zeros(4, 6, dtype=torch.bool)  # PyTorch's sense: True = padding, ignore
    padding[1, 4:] = True
    padding[2, 1:] = True
    padding[3, ::2] = True
    key_mask, _ = from_torch_masks(key_padding_mask=padding)
    assert torch.equal(key_mask, ~padding)
    out_ref, w_ref = ref(x, x, x, key_padding_mask=padding)
    for need in (True, False):
        out, w = ours(x, x, x, key_mask=key_mask, need_weights=need)
        torch.testing.assert_close(out, out_ref, **TOL[dtype])
    _, w = ours(x, x, x, key_mask=key_mask)
    torch.testing.assert_close(w, w_ref, **TOL[dtype])
    assert torch.all(w[padding[:, None, :].expand_as(w)] == 0)  # padded keys get exactly zero weight


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
def test_causal_masks_match_torch(dtype, batch_first):
    ref, ours = _pair(4, dtype, batch_first)
    x = _seq(torch.Generator().manual_seed(5), 2, 8, 24, dtype, batch_first)
    future = torch.ones(8, 8, dtype=torch.bool).triu(1)  # PyTorch: True = not allowed
    out_ref, w_ref = ref(x, x, x, attn_mask=future)
    out_ref_fast, _ = ref(x, x, x, attn_mask=future, is_causal=True, need_weights=False)
    torch.testing.assert_close(out_ref_fast, out_ref, **TOL[dtype])
    _, allowed = from_torch_masks(attn_mask=future)
    for kwargs in (dict(is_causal=True), dict(attn_mask=allowed), dict(attn_mask=allowed, is_causal=True)):
        for need in (True, False):
            out, w = ours(x, x, x, need_weights=need, **kwargs)
            torch.testing.assert_close(out, out_ref, **TOL[dtype])
            if need:
                torch.testing.assert_close(w, w_ref, **TOL[dtype])
                assert torch.all(w.triu(1) == 0)
    # A causal mask together with key padding, against PyTorch's combination of the two.
    padding = torch.zeros(2, 8, dtype=torch.bool)
    padding[1, 5:] = True
    out_ref, w_ref = ref(x, x, x, attn_mask=future, key_padding_mask=padding)
    key_mask, _ = from_torch_masks(key_padding_mask=padding)
    out, w = ours(x, x, x, key_mask=key_mask, is_causal=True)
    torch.testing.assert_close(out, out_ref, **TOL[dtype])
    torch.testing.assert_close(w, w_ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_per_head_3d_attn_mask_matches_torch(dtype):
    ref, ours = _pair(6, dtype, True)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(2, 5, 24, generator=gen, dtype=dtype)
    forbidden = torch.rand(2 * 4, 5, 5, generator=gen) > 0.6
    forbidden[..., 0] = False  # every query keeps a key, so PyTorch's result is defined
    out_ref, w_ref = ref(x, x, x, attn_mask=forbidden, average_attn_weights=False)
    _, allowed = from_torch_masks(attn_mask=forbidden, num_heads=4)
    assert allowed.shape == (2, 4, 5, 5)
    for need in (True, False):
        out, w = ours(x, x, x, attn_mask=allowed, need_weights=need, average_attn_weights=False)
        torch.testing.assert_close(out, out_ref, **TOL[dtype])
    torch.testing.assert_close(ours(x, x, x, attn_mask=allowed, average_attn_weights=False)[1], w_ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("dims", [(None, None), (10, 14)])
def test_cross_attention_different_lengths_matches_torch(dtype, batch_first, dims):
    kdim, vdim = dims
    ref, ours = _pair(8, dtype, batch_first, kdim=kdim, vdim=vdim)
    assert (ours.in_proj_weight is None) == (kdim is not None)  # separate projections when kdim/vdim differ
    gen = torch.Generator().manual_seed(9)
    y = _seq(gen, 3, 4, 24, dtype, batch_first)  # 4 decoder queries
    mem_k = _seq(gen, 3, 9, kdim or 24, dtype, batch_first)  # 9 encoder keys
    mem_v = _seq(gen, 3, 9, vdim or 24, dtype, batch_first) if kdim else mem_k  # key is value: shared K/V input
    padding = torch.zeros(3, 9, dtype=torch.bool)
    padding[0, 6:] = True
    key_mask, _ = from_torch_masks(key_padding_mask=padding)
    for average in (True, False):
        out_ref, w_ref = ref(y, mem_k, mem_v, key_padding_mask=padding, average_attn_weights=average)
        out, w = ours(y, mem_k, mem_v, key_mask=key_mask, average_attn_weights=average)
        torch.testing.assert_close(out, out_ref, **TOL[dtype])
        torch.testing.assert_close(w, w_ref, **TOL[dtype])
    fast, _ = ours(y, mem_k, mem_v, key_mask=key_mask, need_weights=False)
    torch.testing.assert_close(fast, out_ref, **TOL[dtype])
    assert w.shape == (3, 4, 4, 9)
    if kdim is None:  # key and value distinct tensors of the same width (not the shared-K/V shortcut)
        other = mem_k + 1.0
        torch.testing.assert_close(ours(y, mem_k, other)[0], ref(y, mem_k, other)[0], **TOL[dtype])


@pytest.mark.parametrize("bias", [True, False])
def test_unbatched_and_bias_free_match_torch(bias):
    ref, ours = _pair(10, torch.float64, False, bias=bias)
    assert (ours.in_proj_bias is None) == (not bias)
    x = torch.randn(5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    out_ref, w_ref = ref(x, x, x)
    out, w = ours(x, x, x)
    assert out.shape == (5, 24) and w.shape == (5, 5)
    torch.testing.assert_close(out, out_ref, **TOL[torch.float64])
    torch.testing.assert_close(w, w_ref, **TOL[torch.float64])


def test_gradients_match_torch():
    ref, ours = _pair(12, torch.float64, True)
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(2, 6, 24, generator=gen, dtype=torch.float64)
    g = torch.randn(2, 6, 24, generator=gen, dtype=torch.float64)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    key_mask, _ = from_torch_masks(key_padding_mask=padding)
    x_ref, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    (ref(x_ref, x_ref, x_ref, key_padding_mask=padding)[0] * g).sum().backward()
    for need in (True, False):
        ours.zero_grad()
        x_ours.grad = None
        (ours(x_ours, x_ours, x_ours, key_mask=key_mask, need_weights=need)[0] * g).sum().backward()
        torch.testing.assert_close(x_ours.grad, x_ref.grad, atol=1e-10, rtol=1e-8)
        for name, p in ours.named_parameters():
            torch.testing.assert_close(p.grad, ref.get_parameter(name).grad, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_kv_heads", [1, 2, 3])
def test_grouped_query_attention_matches_sdpa_enable_gqa(dtype, num_kv_heads):
    torch.manual_seed(16)
    mha = MultiHeadAttention(24, 6, num_kv_heads=num_kv_heads, batch_first=True, dtype=dtype).eval()
    with torch.no_grad():
        mha.in_proj_bias.normal_()
    assert mha.in_proj_weight.shape == (24 + 2 * num_kv_heads * 4, 24)
    gen = torch.Generator().manual_seed(17)
    x = torch.randn(2, 7, 24, generator=gen, dtype=dtype)
    mask = torch.rand(2, 1, 7, 7, generator=gen) > 0.4
    mask[..., 0] = True
    for kwargs, ref_kwargs in ((dict(), dict()), (dict(attn_mask=mask), dict(mask=mask)),
                               (dict(is_causal=True), dict(is_causal=True))):
        ref = _gqa_reference(mha, x, **ref_kwargs)
        for need in (True, False):
            out, _ = mha(x, x, x, need_weights=need, **kwargs)
            torch.testing.assert_close(out, ref, **TOL[dtype])


def test_grouped_query_attention_is_multi_head_with_shared_kv_weights():
    """GQA equals standard MHA whose key/value heads are repeated within each group (query head i uses kv head
    i // group), and its per-head weights reflect that sharing."""
    torch.manual_seed(18)
    gqa = MultiHeadAttention(16, 4, num_kv_heads=2, dtype=torch.float64).eval()
    full = MultiHeadAttention(16, 4, dtype=torch.float64).eval()
    d = 4
    w_q, w_k, w_v = gqa.in_proj_weight.split([16, 8, 8])
    b_q, b_k, b_v = gqa.in_proj_bias.split([16, 8, 8])

    def rep(t):
        return t.unflatten(0, (2, d)).repeat_interleave(2, dim=0).flatten(0, 1)

    with torch.no_grad():
        full.in_proj_weight.copy_(torch.cat([w_q, rep(w_k), rep(w_v)]))
        full.in_proj_bias.copy_(torch.cat([b_q, rep(b_k), rep(b_v)]))
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = torch.randn(6, 3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(19))
    out_g, w_g = gqa(x, x, x, average_attn_weights=False)
    out_f, w_f = full(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(out_g, out_f, **TOL[torch.float64])
    torch.testing.assert_close(w_g, w_f, **TOL[torch.float64])
    hw = head_weights(gqa)
    assert hw.w_k.shape == (4, 16, 4) and hw.w_q.shape == (4, 16, 4)
    torch.testing.assert_close(qk_circuit(hw.w_q, hw.w_k), qk_circuit(*head_weights(full)[:2]))


def test_fast_and_explicit_paths_agree_and_fully_masked_rows_are_zero():
    torch.manual_seed(20)
    mha = MultiHeadAttention(12, 3, batch_first=True, dtype=torch.float64).eval()
    gen = torch.Generator().manual_seed(21)
    x = torch.randn(2, 5, 12, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 3, 5, 5, generator=gen) > 0.5
    mask[0, 1, 2] = False  # query 2 of head 1 in sequence 0 may attend to nothing
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[1] = False  # sequence 1 has no real key at all
    results = []
    for need in (True, False):
        out, w = mha(x, x, x, attn_mask=mask, key_mask=key_mask, need_weights=need, average_attn_weights=False)
        (grad,) = torch.autograd.grad(out.sum(), x)
        assert torch.isfinite(out).all() and torch.isfinite(grad).all()
        results.append((out, grad))
    torch.testing.assert_close(results[0][0], results[1][0], **TOL[torch.float64])
    torch.testing.assert_close(results[0][1], results[1][1], **TOL[torch.float64])
    _, w = mha(x, x, x, attn_mask=mask, key_mask=key_mask, average_attn_weights=False)
    assert torch.all(w[0, 1, 2] == 0) and torch.all(w[1] == 0)
    # The whole sequence 1 is masked: each query's attention output is zero, so the module returns out_proj's bias.
    out, _ = mha(x, x, x, key_mask=key_mask, need_weights=False)
    torch.testing.assert_close(out[1], mha.out_proj.bias.expand(5, 12), **TOL[torch.float64])


def test_dropout_only_in_training():
    torch.manual_seed(22)
    mha = MultiHeadAttention(8, 2, dropout=0.5, batch_first=True)
    x = torch.randn(1, 6, 8)
    mha.eval()
    a, _ = mha(x, x, x)
    b, _ = mha(x, x, x, need_weights=False)
    torch.testing.assert_close(a, b)
    mha.train()
    c, w = mha(x, x, x)
    assert not torch.allclose(a, c)  # half the weights dropped, the rest doubled
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 6))  # the returned weights are the distribution


def test_split_and_merge_heads():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    for i in range(3):
        torch.testing.assert_close(heads[:, i], x[..., 4 * i : 4 * (i + 1)])
    torch.testing.assert_close(merge_heads(heads), x)
    with pytest.raises(ValueError, match=r"divisible by num_heads=5"):
        split_heads(x, 5)
    with pytest.raises(ValueError, match=r"\(batch, num_heads, n, d_k\)"):
        merge_heads(x)


def test_constructor_errors():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="divisible by num_kv_heads"):
        MultiHeadAttention(12, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="positive integer"):
        MultiHeadAttention(0, 1)
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 2, dropout=1.5)
    with pytest.raises(ValueError, match="add_bias_kv"):
        from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError, match="nn.MultiheadAttention"):
        from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="grouped-query"):
        to_torch(MultiHeadAttention(8, 2, num_kv_heads=1))


def test_forward_errors_name_the_shapes():
    mha = MultiHeadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"8 features.*\(2, 5, 7\)"):
        mha(x, torch.randn(2, 5, 7), x)
    with pytest.raises(ValueError, match="same length n_k"):
        mha(x, x, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match="share the batch size"):
        mha(x, torch.randn(3, 5, 8), torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match=r"query must be a 2-D or 3-D tensor"):
        mha(torch.randn(1, 2, 5, 8), x, x)
    with pytest.raises(ValueError, match=r"key must be a 3-D tensor"):
        mha(x, x[0], x)
    with pytest.raises(TypeError, match="floating-point"):
        mha(x.long(), x, x)
    with pytest.raises(TypeError, match="parameters' dtype"):
        mha(x.double(), x.double(), x.double())
    with pytest.raises(TypeError, match="must be a torch tensor"):
        mha(x.numpy(), x, x)
    with pytest.raises(TypeError, match="boolean tensor"):
        mha(x, x, x, attn_mask=torch.zeros(5, 5))
    with pytest.raises(TypeError, match="key_mask must be a boolean"):
        mha(x, x, x, key_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"attn_mask must have shape.*\(4, 5\)"):
        mha(x, x, x, attn_mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask must have shape"):
        mha(x, x, x, attn_mask=torch.ones(2, 5, 5, dtype=torch.bool))  # 3-D is ambiguous: use masks_from_torch
    with pytest.raises(ValueError, match=r"key_mask must have shape \(batch, n_k\) = \(2, 5\)"):
        mha(x, x, x, key_mask=torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="key_padding_mask"):
        mha(x, x, x, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))  # PyTorch's name: refused


# --------------------------------------------------------------------------------------------- the KV cache
def _causal_module(seed: int, **kw) -> MultiHeadAttention:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(24, 4, batch_first=True, dtype=torch.float64, **kw).eval()
    with torch.no_grad():
        mha.in_proj_bias.normal_()
    return mha


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 3], [9]])
def test_cache_appends_and_gives_the_full_causal_result(num_kv_heads, chunks):
    """Prefill, chunked prefill and one-token decoding with the cache equal one causal pass over everything."""
    mha = _causal_module(30, num_kv_heads=num_kv_heads)
    x = torch.randn(2, 9, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(31))
    full, w_full = mha(x, x, x, is_causal=True, average_attn_weights=False)
    cache = mha.new_cache(batch=2, capacity=12)
    assert cache.keys.shape == (2, num_kv_heads, 12, 6)  # grouped-query attention caches fewer heads
    parts, start = [], 0
    for n in chunks:
        piece = x[:, start : start + n]
        out, w = mha(piece, piece, piece, is_causal=True, cache=cache, average_attn_weights=False)
        # the new queries see every cached key and the new keys up to themselves: lower-right aligned
        torch.testing.assert_close(w, w_full[:, :, start : start + n, : start + n], **TOL[torch.float64])
        parts.append(out)
        start += n
    assert cache.length == 9 and cache.nbytes == 2 * 2 * num_kv_heads * 9 * 6 * 8
    torch.testing.assert_close(torch.cat(parts, dim=1), full, **TOL[torch.float64])


def test_cache_alignment_is_lower_right_and_upper_left_would_be_wrong():
    mha = _causal_module(32)
    x = torch.randn(1, 5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(33))
    cache = mha.new_cache(1, 5)
    mha(x[:, :3], x[:, :3], x[:, :3], is_causal=True, cache=cache)
    _, w = mha(x[:, 3:], x[:, 3:], x[:, 3:], is_causal=True, cache=cache, average_attn_weights=False)
    allowed = (w[0, 0] > 0).tolist()
    from attention_course import masks

    assert allowed == masks.causal_mask(2, 5, alignment="lower_right").tolist()
    assert allowed != masks.causal_mask(2, 5, alignment="upper_left").tolist()


def test_static_cache_is_cross_attention_projected_once():
    torch.manual_seed(34)
    mha = MultiHeadAttention(24, 4, batch_first=True, kdim=10, vdim=10, dtype=torch.float64).eval()
    gen = torch.Generator().manual_seed(35)
    y, memory = (torch.randn(2, n, d, dtype=torch.float64, generator=gen) for n, d in ((3, 24), (7, 10)))
    key_mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    expected, _ = mha(y, memory, memory, key_mask=key_mask)
    cache = mha.static_cache(memory)
    assert cache.static and cache.length == 7
    for need in (True, False):
        got, _ = mha(y, None, None, key_mask=key_mask, cache=cache, need_weights=need)
        torch.testing.assert_close(got, expected, **TOL[torch.float64])
    with pytest.raises(ValueError, match="key and value must be None with a static cache"):
        mha(y, memory, memory, cache=cache)
    with pytest.raises(ValueError, match="must have static=False"):
        cache.append(cache.keys, cache.values)


def test_cache_errors_name_the_problem():
    mha = _causal_module(36)
    x = torch.randn(2, 3, 24, dtype=torch.float64)
    cache = mha.new_cache(2, 4)
    mha(x, x, x, is_causal=True, cache=cache)
    with pytest.raises(ValueError, match="holds 4 positions and 3 are used, so at most 1 more; got 3"):
        mha(x, x, x, is_causal=True, cache=cache)
    with pytest.raises(ValueError, match=r"= \(1, 4, capacity, 6\).*got keys of shape \(2, 4, 4, 6\)"):
        mha(x[:1], x[:1], x[:1], cache=mha.new_cache(2, 4))
    with pytest.raises(ValueError, match=r"another module"):  # a cache made by a layer with 2 key/value heads
        mha(x, x, x, cache=_causal_module(36, num_kv_heads=2).new_cache(2, 4))
    with pytest.raises(ValueError, match="capacity must be a positive integer"):
        mha.new_cache(2, 0)


def test_rotary_hook_rotates_queries_and_keys_by_absolute_position():
    """With RoPE the scores depend on positions only through their difference, with or without a cache."""
    from attention_course.positional import apply_rope

    plain = _causal_module(37)
    rope = _causal_module(37, rotary=apply_rope)
    x = torch.randn(1, 6, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(38))
    out_rope, w_rope = rope(x, x, x, is_causal=True, average_attn_weights=False)
    assert not torch.allclose(out_rope, plain(x, x, x, is_causal=True)[0])  # the hook changes something
    # by hand: rotate each head's q and k, then attention
    q, k, v = rope._project(x, x, x)
    pos = torch.arange(6)
    scores = apply_rope(q, positions=pos) @ apply_rope(k, positions=pos).transpose(-2, -1) / math.sqrt(6)
    scores = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(w_rope, torch.softmax(scores, -1), **TOL[torch.float64])
    cache = rope.new_cache(1, 6)
    steps = [rope(x[:, i : i + 1], x[:, i : i + 1], x[:, i : i + 1], is_causal=True, cache=cache)[0] for i in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), out_rope, **TOL[torch.float64])
    with pytest.raises(TypeError, match="rotary must be a callable"):
        MultiHeadAttention(8, 2, rotary="rope")


@pytest.mark.parametrize("num_kv_heads", [4, 2])
def test_explicit_path_is_chapter_ones_attention(num_kv_heads):
    """need_weights=True runs PyTorch's fused softmax; it equals the package's from-scratch attention."""
    from attention_course.attention import scaled_dot_product_attention

    mha = _causal_module(39, num_kv_heads=num_kv_heads)
    x = torch.randn(2, 5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(40))
    mask = torch.rand(2, 1, 5, 5, generator=torch.Generator().manual_seed(41)) > 0.4
    mask[1, 0, 2] = False
    out, w = mha(x, x, x, attn_mask=mask, average_attn_weights=False)
    q, k, v = mha._project(x, x, x)
    group = 4 // num_kv_heads
    ref_out, ref_w = scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                                  mask=mask)
    torch.testing.assert_close(w, ref_w, **TOL[torch.float64])
    torch.testing.assert_close(out, mha.out_proj(merge_heads(ref_out)), **TOL[torch.float64])


def test_a_refused_call_leaves_the_cache_as_it_was():
    mha = _causal_module(42)
    x = torch.randn(2, 5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(43))
    full, _ = mha(x, x, x, is_causal=True)
    cache = mha.new_cache(2, 5)
    mha(x[:, :3], x[:, :3], x[:, :3], is_causal=True, cache=cache)
    piece = x[:, 3:]
    wrong = torch.ones(2, 2, dtype=torch.bool)  # (batch, n_new): but n_k counts the cached keys too
    with pytest.raises(ValueError, match=r"key_mask must have shape \(batch, n_k\) = \(2, 5\)"):
        mha(piece, piece, piece, is_causal=True, cache=cache, key_mask=wrong)
    assert cache.length == 3
    out, _ = mha(piece, piece, piece, is_causal=True, cache=cache, key_mask=torch.ones(2, 5, dtype=torch.bool))
    torch.testing.assert_close(out, full[:, 3:], **TOL[torch.float64])


def test_static_cache_refuses_positions_and_another_batch():
    from attention_course.positional import apply_rope

    mha = _causal_module(44)
    memory = torch.randn(2, 7, 24, dtype=torch.float64)
    y = torch.randn(2, 3, 24, dtype=torch.float64)
    cache = mha.static_cache(memory)
    with pytest.raises(ValueError, match="static cache"):
        mha(y, None, None, cache=cache, is_causal=True)
    with pytest.raises(ValueError, match=r"another batch"):
        mha(y[:1], None, None, cache=cache)
    rope = _causal_module(44, rotary=apply_rope)
    with pytest.raises(ValueError, match="static cache"):
        rope(y, None, None, cache=rope.static_cache(memory))


# ------------------------------------------------------------------------------------------------- the edges
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize(("batch", "n_q", "n_k"), [(0, 3, 3), (2, 0, 3), (2, 3, 0), (2, 0, 0), (0, 0, 0)])
def test_empty_batches_and_sequences_give_torchs_answer(batch_first, batch, n_q, n_k):
    ref, ours = _pair(50, torch.float64, batch_first)
    gen = torch.Generator().manual_seed(51)
    q, kv = _seq(gen, batch, n_q, 24, torch.float64, batch_first), _seq(gen, batch, n_k, 24, torch.float64, batch_first)
    for need in (True, False):
        out_ref, w_ref = ref(q, kv, kv, need_weights=need, average_attn_weights=False)
        out, w = ours(q, kv, kv, need_weights=need, average_attn_weights=False)
        assert out.shape == out_ref.shape and (w is None) == (w_ref is None)
        torch.testing.assert_close(out, out_ref, **TOL[torch.float64])
        if need:
            assert w.shape == w_ref.shape == (batch, 4, n_q, n_k)
        # is_causal with nothing to mask: the same answer (masks.causal_mask is never asked for a 0-sized mask)
        torch.testing.assert_close(ours(q, kv, kv, need_weights=need, is_causal=True)[0], out_ref,
                                   **TOL[torch.float64])
    if n_k == 0 and batch * n_q:  # no key at all: a zero attention output, so the output is out_proj's bias
        torch.testing.assert_close(out, ours.out_proj.bias.expand_as(out), **TOL[torch.float64])


@pytest.mark.parametrize("dtype", DTYPES)
def test_fully_masked_rows_zeros_like_torchs_fused_path_where_its_explicit_path_gives_nan(dtype):
    """The documented choice: PyTorch answers a query with no allowed key by zeros with need_weights=False and by
    NaN with need_weights=True; the package gives the zeros on both paths (and zero weights)."""
    ref, ours = _pair(52, dtype, True)
    x = torch.randn(2, 4, 24, generator=torch.Generator().manual_seed(53), dtype=dtype)
    padding = torch.zeros(2, 4, dtype=torch.bool)
    padding[1] = True  # sequence 1: every key is padding
    forbid = torch.zeros(4, 4, dtype=torch.bool)
    forbid[2] = True  # query 2 of every sequence may attend to nothing
    fused, _ = ref(x, x, x, key_padding_mask=padding, attn_mask=forbid, need_weights=False)
    explicit, w_ref = ref(x, x, x, key_padding_mask=padding, attn_mask=forbid)
    assert torch.isnan(explicit[1]).all() and torch.isnan(explicit[0, 2]).all() and torch.isnan(w_ref[1]).all()
    torch.testing.assert_close(fused[1], ref.out_proj.bias.expand(4, 24), **TOL[dtype])  # zeros, then out_proj
    key_mask, allowed = from_torch_masks(key_padding_mask=padding, attn_mask=forbid)
    for need in (True, False):
        out, w = ours(x, x, x, key_mask=key_mask, attn_mask=allowed, need_weights=need)
        torch.testing.assert_close(out, fused, **TOL[dtype])
    torch.testing.assert_close(out[0, [0, 1, 3]], explicit[0, [0, 1, 3]], **TOL[dtype])
    _, w = ours(x, x, x, key_mask=key_mask, attn_mask=allowed)
    assert torch.all(w[1] == 0) and torch.all(w[0, 2] == 0)
    # unbatched, every key padding
    out, _ = ours(x[0], x[0], x[0], key_mask=torch.zeros(4, dtype=torch.bool))
    torch.testing.assert_close(out, ours.out_proj.bias.expand(4, 24), **TOL[dtype])


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16])
def test_low_precision_runs_in_its_dtype_close_to_float32(low):
    torch.manual_seed(54)
    full = MultiHeadAttention(16, 4, batch_first=True).eval()
    half = MultiHeadAttention(16, 4, batch_first=True, dtype=low).eval()
    half.load_state_dict({k: v.to(low) for k, v in full.state_dict().items()})
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(55)).to(low)
    key_mask = torch.tensor([[True] * 5, [False] * 5])  # sequence 1 fully masked
    expected, _ = full(x.float(), x.float(), x.float(), key_mask=key_mask)
    for need in (True, False):
        out, w = half(x, x, x, key_mask=key_mask, need_weights=need)
        assert out.dtype == low and (w is None or w.dtype == low) and torch.isfinite(out).all()
        torch.testing.assert_close(out.float(), expected, atol=3e-2, rtol=3e-2)


def test_split_and_merge_heads_of_empty_tensors():
    for shape, heads in (((0, 5, 12), 3), ((2, 0, 12), 3), ((2, 5, 0), 3)):
        x = torch.zeros(shape)
        split = split_heads(x, heads)
        assert split.shape == (shape[0], heads, shape[1], shape[2] // heads)
        assert merge_heads(split).shape == shape


def test_cache_edges_empty_batch_no_new_token_and_empty_memory():
    mha = _causal_module(56)
    empty = mha.new_cache(batch=0, capacity=4)
    x0 = torch.zeros(0, 2, 24, dtype=torch.float64)
    out, _ = mha(x0, x0, x0, is_causal=True, cache=empty)
    assert out.shape == (0, 2, 24) and empty.length == 2
    cache = mha.new_cache(2, 4)
    none = torch.zeros(2, 0, 24, dtype=torch.float64)
    out, w = mha(none, none, none, is_causal=True, cache=cache, average_attn_weights=False)
    assert out.shape == (2, 0, 24) and w.shape == (2, 4, 0, 0) and cache.length == 0
    # cross-attention to an empty memory: PyTorch's answer for n_k = 0, out_proj's bias
    ref = to_torch(mha).eval()
    y, memory = torch.randn(2, 3, 24, dtype=torch.float64), torch.zeros(2, 0, 24, dtype=torch.float64)
    static = mha.static_cache(memory)
    assert static.length == static.capacity == 0
    for need in (True, False):
        torch.testing.assert_close(mha(y, None, None, cache=static, need_weights=need)[0],
                                   ref(y, memory, memory, need_weights=need)[0], **TOL[torch.float64])


def test_dropout_one_drops_everything_as_nn_dropout():
    mha = MultiHeadAttention(8, 2, dropout=1.0, batch_first=True).train()
    x = torch.randn(1, 3, 8)
    for need in (True, False):
        out, _ = mha(x, x, x, need_weights=need)
        torch.testing.assert_close(out, mha.out_proj.bias.expand(1, 3, 8))


def test_tensors_on_another_device_are_refused_before_any_computation():
    mha = MultiHeadAttention(8, 2, batch_first=True)
    meta = torch.zeros(2, 3, 8, device="meta")
    with pytest.raises(ValueError, match="parameters' device cpu, got .* on meta"):
        mha(meta, meta, meta)
    x = torch.zeros(2, 3, 8)
    with pytest.raises(ValueError, match="attn_mask must be on the parameters' device"):
        mha(x, x, x, attn_mask=torch.ones(3, 3, dtype=torch.bool, device="meta"))
    on_meta = MultiHeadAttention(8, 2, batch_first=True, device="meta")
    with pytest.raises(ValueError, match="parameters' device meta"):
        on_meta(x, x, x)
    with pytest.raises(ValueError, match="cache must be on the parameters' device"):
        mha(x, x, x, cache=on_meta.new_cache(2, 4))
