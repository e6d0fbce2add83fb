"""multihead.py against PyTorch: nn.MultiheadAttention (weights loaded with from_torch) and, for grouped-query
attention, F.scaled_dot_product_attention(..., enable_gqa=True). Both computation paths of the package's module
(need_weights=True: explicit; False: fused kernel) are compared; then the helpers and the error messages."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course.multihead import (
    MultiHeadAttention,
    masks_from_torch,
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
    return ref, MultiHeadAttention.from_torch(ref).eval()


def _seq(gen: torch.Generator, batch: int, n: int, d: int, dtype: torch.dtype, batch_first: bool) -> torch.Tensor:
    x = torch.randn(batch, n, d, generator=gen, dtype=dtype)
    return x if batch_first else x.transpose(0, 1).contiguous()


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
    key_mask, _ = masks_from_torch(key_padding_mask=padding)
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
    _, allowed = masks_from_torch(attn_mask=future)
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
    key_mask, _ = masks_from_torch(key_padding_mask=padding)
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
    _, allowed = masks_from_torch(attn_mask=forbidden, num_heads=4)
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
    key_mask, _ = masks_from_torch(key_padding_mask=padding)
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
    key_mask, _ = masks_from_torch(key_padding_mask=padding)
    x_ref, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    (ref(x_ref, x_ref, x_ref, key_padding_mask=padding)[0] * g).sum().backward()
    for need in (True, False):
        ours.zero_grad()
        x_ours.grad = None
        (ours(x_ours, x_ours, x_ours, key_mask=key_mask, need_weights=need)[0] * g).sum().backward()
        torch.testing.assert_close(x_ours.grad, x_ref.grad, atol=1e-10, rtol=1e-8)
        for name, p in ours.named_parameters():
            torch.testing.assert_close(p.grad, ref.get_parameter(name).grad, atol=1e-10, rtol=1e-8)


def test_to_torch_round_trip():
    torch.manual_seed(14)
    ours = MultiHeadAttention(16, 2, batch_first=True, kdim=6, vdim=10, dtype=torch.float64)
    back = ours.to_torch()
    assert isinstance(back, nn.MultiheadAttention) and back.batch_first
    gen = torch.Generator().manual_seed(15)
    q, k, v = (torch.randn(2, 3, d, generator=gen, dtype=torch.float64) for d in (16, 6, 10))
    torch.testing.assert_close(ours(q, k, v)[0], back(q, k, v)[0], **TOL[torch.float64])


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
    hw = gqa.head_weights()
    assert hw.w_k.shape == (2, 16, 4) and hw.w_q.shape == (4, 16, 4)
    torch.testing.assert_close(gqa.qk_matrices(), full.qk_matrices())


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


def test_head_weights_are_column_slices_and_qk_matrices_give_the_scores():
    torch.manual_seed(23)
    mha = MultiHeadAttention(12, 3, bias=False, batch_first=True, dtype=torch.float64)
    hw = mha.head_weights()
    W_Q = mha.in_proj_weight[:12].T  # the paper's d_model × d_model W^Q
    for i in range(3):
        torch.testing.assert_close(hw.w_q[i], W_Q[:, 4 * i : 4 * (i + 1)])
    x = torch.randn(1, 5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(24))
    _, w = mha(x, x, x, average_attn_weights=False)
    scores = x[0] @ mha.qk_matrices() @ x[0].T / 2.0  # x W_QK xᵀ / √d_k, d_k = 4
    torch.testing.assert_close(w[0], torch.softmax(scores, dim=-1))
    ranks = torch.linalg.matrix_rank(mha.qk_matrices())
    assert ranks.tolist() == [4, 4, 4]
    out_explicit = sum(torch.softmax(scores[i], -1) @ x[0] @ mha.ov_matrices()[i] for i in range(3))
    torch.testing.assert_close(mha(x, x, x)[0][0], out_explicit)


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


def test_masks_from_torch_float_and_errors():
    additive = torch.tensor([[0.0, float("-inf")], [0.0, 0.0]])
    _, allowed = masks_from_torch(attn_mask=additive)
    assert allowed.tolist() == [[True, False], [True, True]]
    with pytest.raises(ValueError, match="only 0 and -inf"):
        masks_from_torch(attn_mask=torch.tensor([[0.0, -1.0]]))
    with pytest.raises(ValueError, match="needs num_heads"):
        masks_from_torch(attn_mask=torch.zeros(6, 2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean or floating"):
        masks_from_torch(key_padding_mask=torch.zeros(2, 3, dtype=torch.long))


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
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError, match="nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="grouped-query"):
        MultiHeadAttention(8, 2, num_kv_heads=1).to_torch()


def test_forward_errors_name_the_shapes():
    mha = MultiHeadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"8 features.*\(2, 5, 7\)"):
        mha(x, torch.randn(2, 5, 7), x)
    with pytest.raises(ValueError, match="same length n_k"):
        mha(x, x, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match="share the batch size"):
        mha(x, torch.randn(3, 5, 8), torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match="all be 3-D"):
        mha(torch.randn(1, 2, 5, 8), x, x)
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
    with pytest.raises(ValueError, match=r"key_mask must have shape \(2, 5\)"):
        mha(x, x, x, key_mask=torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="key_padding_mask"):
        mha(x, x, x, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))  # PyTorch's name: refused


def test_products_in_float64_show_the_exact_rank_of_float32_weights():
    torch.manual_seed(25)
    mha = MultiHeadAttention(32, 4, num_kv_heads=2)  # float32 parameters
    assert mha.head_weights().w_q.dtype == torch.float32
    qk, ov = mha.qk_matrices(torch.float64), mha.ov_matrices(torch.float64)
    assert qk.dtype == ov.dtype == torch.float64 and qk.shape == ov.shape == (4, 32, 32)
    assert torch.linalg.matrix_rank(qk).tolist() == [8] * 4 and torch.linalg.matrix_rank(ov).tolist() == [8] * 4
    torch.testing.assert_close(qk.float(), mha.qk_matrices(), atol=1e-5, rtol=1e-4)
