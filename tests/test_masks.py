"""masks.py: the package convention (True = may attend), PyTorch's opposite one, and zeros (not NaN) for a query
that may attend to nothing, in outputs and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course import masks
from attention_course.attention import scaled_dot_product_attention
from attention_course.multihead import MultiHeadAttention, masks_from_torch


def test_padding_mask_from_lengths_and_from_tokens():
    m = masks.padding_mask([3, 1, 0], max_len=4)
    assert m.dtype == torch.bool and m.tolist() == [[True, True, True, False], [True, False, False, False],
                                                      [False] * 4]
    assert masks.padding_mask(torch.tensor([2, 3])).shape == (2, 3)  # max_len defaults to the longest
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]])
    assert torch.equal(masks.padding_mask(tokens=tokens, pad_id=0), tokens != 0)
    assert torch.equal(masks.padding_mask(tokens=tokens, pad_id=0), masks.padding_mask([2, 1], 4))


def test_padding_mask_errors():
    with pytest.raises(TypeError, match="either lengths"):
        masks.padding_mask()
    with pytest.raises(TypeError, match="pad_id"):
        masks.padding_mask(tokens=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="integer tensor"):
        masks.padding_mask(tokens=torch.zeros(2, 3), pad_id=0)
    with pytest.raises(ValueError, match=r"\(batch, n\)"):
        masks.padding_mask(tokens=torch.zeros(3, dtype=torch.long), pad_id=0)
    with pytest.raises(ValueError, match="exceeds max_len=2"):
        masks.padding_mask([3], max_len=2)
    with pytest.raises(ValueError, match="non-negative"):
        masks.padding_mask([-1, 2])
    with pytest.raises(ValueError, match="1-D"):
        masks.padding_mask(torch.ones(2, 2, dtype=torch.long))


def test_causal_mask_alignments():
    assert torch.equal(masks.causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())
    # bottom-right (default): the 2 queries are the last 2 of 5 positions
    assert masks.causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True] * 5]
    # top-left: what F.scaled_dot_product_attention(is_causal=True) does
    q, k, v = torch.randn(3, 2, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 4)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=masks.causal_mask(2, 5, offset=0)),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert masks.causal_mask(1, 6).all()  # one new token sees every cached one
    with pytest.raises(ValueError, match="n_q must be a positive integer"):
        masks.causal_mask(0)


def test_combine_masks():
    causal = masks.causal_mask(3)
    keys = masks.key_mask_to_attn_mask(masks.padding_mask([3, 2]))
    both = masks.combine_masks(causal, None, keys)
    assert both.shape == (2, 1, 3, 3)
    assert torch.equal(both[0, 0], causal) and torch.equal(both[1, 0], causal & torch.tensor([True, True, False]))
    assert masks.combine_masks(None, None) is None
    with pytest.raises(TypeError, match="boolean"):
        masks.combine_masks(causal, causal.float())
    with pytest.raises(ValueError, match="do not broadcast"):
        masks.combine_masks(causal, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"boolean \(batch, n_k\)"):
        masks.key_mask_to_attn_mask(causal[None])


def test_torch_conversions_round_trip_and_reuse_multihead():
    assert masks.from_torch is masks_from_torch  # one conversion in the package, not two
    key_mask = masks.padding_mask([3, 1], 4)
    attn = masks.causal_mask(4)
    kpm, am = masks.to_torch(key_mask, attn)
    assert torch.equal(kpm, ~key_mask) and torch.equal(am, attn.triu(1) == 0) is False
    assert torch.equal(am, ~attn)
    back_k, back_a = masks.from_torch(kpm, am)
    assert torch.equal(back_k, key_mask) and torch.equal(back_a, attn)
    # PyTorch's float causal mask converts to the same boolean mask
    _, from_float = masks.from_torch(attn_mask=nn.Transformer.generate_square_subsequent_mask(4))
    assert torch.equal(from_float, attn)
    four_d = torch.ones(2, 3, 4, 4, dtype=torch.bool)
    assert masks.to_torch(attn_mask=four_d)[1].shape == (6, 4, 4)
    with pytest.raises(TypeError, match="boolean"):
        masks.to_torch(key_mask=key_mask.float())
    with pytest.raises(ValueError, match=r"\(n_q, n_k\)"):
        masks.to_torch(attn_mask=torch.ones(4, dtype=torch.bool))


def test_converted_masks_give_pytorchs_result():
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    ours = MultiHeadAttention.from_torch(ref).eval()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    key_mask, attn = masks.padding_mask([4, 2]), masks.causal_mask(4)
    kpm, am = masks.to_torch(key_mask, attn)
    out_ref, _ = ref(x, x, x, key_padding_mask=kpm, attn_mask=am)
    out, _ = ours(x, x, x, key_mask=key_mask, attn_mask=attn)
    torch.testing.assert_close(out, out_ref, atol=1e-12, rtol=0)


def test_fully_masked_row_gives_zeros_in_output_and_gradients():
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    mask = masks.combine_masks(masks.causal_mask(3, 5), masks.key_mask_to_attn_mask(masks.padding_mask([5, 0]))[:, 0])
    assert not mask[1].any()  # row 1: every key is padding
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all() and torch.all(out[1] == 0) and torch.all(w[1] == 0)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[1] == 0) and torch.all(v.grad[1] == 0)
