"""layers.py against PyTorch: nn.TransformerEncoderLayer and nn.TransformerDecoderLayer with weights copied by
interop.from_torch, in eval mode, with padding and causal masks, both layouts and both LayerNorm placements; the
decoder-only block with its cache, grouped-query attention and rotary positions."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_reference import DTYPES, FF, LENGTHS_SRC, LENGTHS_TGT, TOL, D, H, randomise_vectors, real_positions, sequence

from attention_course import masks
from attention_course.interop import from_torch
from attention_course.layers import DecoderOnlyLayer, TransformerDecoderLayer, TransformerEncoderLayer
from attention_course.multihead import MultiHeadAttention
from attention_course.positional import apply_rope

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch's nested-tensor / mask-type notices


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(dtype, batch_first, norm_first):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=batch_first, norm_first=norm_first,
                                     dtype=dtype).eval()
    randomise_vectors(ref)
    ours = from_torch(ref).eval()
    assert ours.norm_first == norm_first and ours.batch_first == batch_first
    x = sequence(torch.Generator().manual_seed(1), 3, 7, dtype, batch_first)
    key_mask = masks.padding_mask(LENGTHS_SRC)
    out_ref = ref(x, src_key_padding_mask=~key_mask)
    out = ours(x, src_key_mask=key_mask)
    torch.testing.assert_close(real_positions(out, key_mask, batch_first),
                               real_positions(out_ref, key_mask, batch_first),
                               **TOL[dtype])
    # causal self-attention, PyTorch's float mask converted once
    causal_float = nn.Transformer.generate_square_subsequent_mask(7, dtype=dtype)
    out_ref = ref(x, src_mask=causal_float, is_causal=True)
    torch.testing.assert_close(ours(x, is_causal=True), out_ref, **TOL[dtype])
    torch.testing.assert_close(ours(x, src_mask=masks.causal_mask(7)), out_ref, **TOL[dtype])
    # the explicit path (weights returned) gives the same output
    weights: list[torch.Tensor] = []
    torch.testing.assert_close(ours(x, is_causal=True, attn_weights=weights), out_ref, **TOL[dtype])
    assert len(weights) == 1 and weights[0].shape == (3, H, 7, 7)
    assert torch.all(weights[0].triu(1) == 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(dtype, batch_first, norm_first):
    torch.manual_seed(2)
    ref = nn.TransformerDecoderLayer(D, H, FF, dropout=0.1, batch_first=batch_first, norm_first=norm_first,
                                     dtype=dtype).eval()
    randomise_vectors(ref)
    ours = from_torch(ref).eval()
    gen = torch.Generator().manual_seed(3)
    tgt, mem = sequence(gen, 3, 5, dtype, batch_first), sequence(gen, 3, 7, dtype, batch_first)
    src_mask, tgt_mask = masks.padding_mask(LENGTHS_SRC), masks.padding_mask(LENGTHS_TGT)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=dtype)
    out_ref = ref(tgt, mem, tgt_mask=causal, tgt_key_padding_mask=~tgt_mask, memory_key_padding_mask=~src_mask,
                  tgt_is_causal=True)
    out = ours(tgt, mem, tgt_is_causal=True, tgt_key_mask=tgt_mask, memory_key_mask=src_mask)
    torch.testing.assert_close(out, out_ref, **TOL[dtype])
    self_w, cross_w = [], []
    out_w = ours(tgt, mem, tgt_mask=masks.causal_mask(5), tgt_key_mask=tgt_mask, memory_key_mask=src_mask,
                 self_weights=self_w, cross_weights=cross_w)
    torch.testing.assert_close(out_w, out_ref, **TOL[dtype])
    assert self_w[0].shape == (3, H, 5, 5) and cross_w[0].shape == (3, H, 5, 7)
    assert torch.all(cross_w[0][~src_mask[:, None, None, :].expand_as(cross_w[0])] == 0)  # padding: no weight
    # a memory mask (n_tgt, n_src) in PyTorch's sense, converted
    forbid = torch.zeros(5, 7, dtype=torch.bool)
    forbid[:, 3] = True
    out_ref = ref(tgt, mem, memory_mask=forbid)
    _, allowed = masks.from_torch_masks(attn_mask=forbid)
    torch.testing.assert_close(ours(tgt, mem, memory_mask=allowed), out_ref, **TOL[dtype])


def test_post_ln_and_pre_ln_differ_and_post_ln_output_is_normalised():
    torch.manual_seed(9)
    post = TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True).eval()
    pre = TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=True).eval()
    pre.load_state_dict(post.state_dict())
    x = 5 * torch.randn(2, 6, D)
    a, b = post(x), pre(x)
    torch.testing.assert_close(a.mean(-1), torch.zeros(2, 6), atol=1e-5, rtol=0)  # LayerNorm last (identity affine)
    assert not torch.allclose(a, b, atol=1e-2)
    assert b.std(-1).mean() > 2  # pre-LN: the residual stream keeps the input's scale


def test_fully_masked_rows_give_zeros_not_nan_in_outputs_and_gradients():
    torch.manual_seed(8)
    layer = TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, dtype=torch.float64)
    tgt = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    mem = torch.randn(2, 4, D, dtype=torch.float64, requires_grad=True)
    no_memory = torch.zeros(2, 4, dtype=torch.bool)
    no_memory[0] = True  # row 1 may attend to no memory position at all
    for need in (False, True):
        weights = [] if need else None
        out = layer(tgt, mem, tgt_is_causal=True, memory_key_mask=no_memory, cross_weights=weights)
        assert torch.isfinite(out).all()
        out.sum().backward()
        assert torch.isfinite(tgt.grad).all() and torch.isfinite(mem.grad).all()
        assert torch.all(mem.grad[1] == 0)  # nothing flows to a memory nobody may read
        if need:
            assert torch.all(weights[0][1] == 0)
        tgt.grad = mem.grad = None


@pytest.mark.parametrize("num_kv_heads", [None, 2])
@pytest.mark.parametrize("rotary", [None, apply_rope])
def test_decoder_only_layer_is_causal_and_decodes_with_its_cache(num_kv_heads, rotary):
    torch.manual_seed(40)
    layer = DecoderOnlyLayer(D, H, num_kv_heads=num_kv_heads, rotary=rotary, dtype=torch.float64).eval()
    assert layer.norm_first and layer.batch_first and layer.linear1.out_features == 4 * D
    x = torch.randn(2, 7, D, dtype=torch.float64, generator=torch.Generator().manual_seed(41))
    full = layer(x)
    # causal: changing the last token changes only the last position
    changed = x.clone()
    changed[:, -1] += 1.0
    torch.testing.assert_close(layer(changed)[:, :-1], full[:, :-1], **TOL[torch.float64])
    # it is an encoder layer with a causal mask
    torch.testing.assert_close(TransformerEncoderLayer.forward(layer, x, is_causal=True), full, **TOL[torch.float64])
    # prefill 3 positions, then one at a time: the same outputs
    cache = layer.self_attn.new_cache(2, 7)
    parts = [layer(x[:, :3], cache=cache)] + [layer(x[:, i : i + 1], cache=cache) for i in range(3, 7)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, **TOL[torch.float64])


def test_layers_share_one_sublayer_pattern_and_torch_parameter_order():
    enc = TransformerEncoderLayer(D, H, FF)
    dec = TransformerDecoderLayer(D, H, FF)
    for ours, theirs in ((enc, nn.TransformerEncoderLayer(D, H, FF)), (dec, nn.TransformerDecoderLayer(D, H, FF))):
        # the same names in the same order: the same random draws at construction, and load_state_dict works
        assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert isinstance(enc.self_attn, MultiHeadAttention) and isinstance(dec.multihead_attn, MultiHeadAttention)
    with pytest.raises(TypeError, match="activation"):
        TransformerEncoderLayer(D, H, activation=3)


# ------------------------------------------------------------------------------------------------- the edges
@pytest.mark.parametrize(("batch", "n_tgt", "n_src"), [(0, 3, 4), (2, 0, 4), (2, 3, 0)])
def test_layers_on_empty_batches_and_sequences_match_torch(batch, n_tgt, n_src):
    torch.manual_seed(70)
    ref_enc = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, dtype=torch.float64).eval()
    ref_dec = nn.TransformerDecoderLayer(D, H, FF, batch_first=True, dtype=torch.float64).eval()
    for ref in (ref_enc, ref_dec):
        randomise_vectors(ref)
    enc, dec = from_torch(ref_enc).eval(), from_torch(ref_dec).eval()
    gen = torch.Generator().manual_seed(71)
    tgt, mem = sequence(gen, batch, n_tgt, torch.float64, True), sequence(gen, batch, n_src, torch.float64, True)
    torch.testing.assert_close(enc(tgt), ref_enc(tgt), **TOL[torch.float64])
    out = dec(tgt, mem)  # with n_src = 0 the cross-attention output is zero: PyTorch's answer too
    assert out.shape == (batch, n_tgt, D) and torch.isfinite(out).all()
    torch.testing.assert_close(out, ref_dec(tgt, mem), **TOL[torch.float64])


def test_fully_padded_sequence_gives_torchs_fused_answer_not_nan():
    """PyTorch's encoder layer gives NaN for a sequence whose every key is padding in eval mode (explicit path)
    and zero attention outputs in training mode (fused path); the package gives the latter in both modes."""
    torch.manual_seed(72)
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, dtype=torch.float64)
    randomise_vectors(ref)
    ours = from_torch(ref)
    x = torch.randn(2, 4, D, dtype=torch.float64, generator=torch.Generator().manual_seed(73))
    key_mask = torch.tensor([[True] * 4, [False] * 4])
    with torch.no_grad():
        assert torch.isnan(ref.eval()(x, src_key_padding_mask=~key_mask)[1]).all()
    fused = ref.train()(x, src_key_padding_mask=~key_mask)
    for mode in (True, False):
        torch.testing.assert_close(ours.train(mode)(x, src_key_mask=key_mask), fused, **TOL[torch.float64])
    gpt = DecoderOnlyLayer(D, H, dtype=torch.float64).eval()
    assert torch.isfinite(gpt(x, key_mask=key_mask)).all()


def test_layer_checks_name_the_layers_arguments():
    dec = TransformerDecoderLayer(D, H, FF, batch_first=True)
    tgt, mem = torch.zeros(2, 3, D), torch.zeros(2, 5, D)
    with pytest.raises(ValueError, match="memory must have tgt's batch size"):
        dec(tgt, mem[:1])
    with pytest.raises(TypeError, match="memory_key_mask must be a boolean"):
        dec(tgt, mem, memory_key_mask=torch.ones(2, 5))
    cross = dec.multihead_attn.static_cache(mem)
    with pytest.raises(ValueError, match="memory must be None with a cross-attention cache"):
        dec(tgt, mem, cache=(None, cross))
    torch.testing.assert_close(dec.eval()(tgt, None, cache=(None, cross)), dec(tgt, mem))
    with pytest.raises(ValueError, match="d_model must be divisible by nhead"):
        TransformerEncoderLayer(10, 4)
