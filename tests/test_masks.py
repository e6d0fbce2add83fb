"""masks.py: the package convention (True = may attend), PyTorch's opposite one, and zeros (not NaN) for a query
that may attend to nothing, in outputs and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course import masks
from attention_course.attention import scaled_dot_product_attention
from attention_course.interop import from_torch
from attention_course.masks import causal_mask, from_torch_masks


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
    with pytest.raises(ValueError, match="at most max_len=2"):
        masks.padding_mask([3], max_len=2)
    with pytest.raises(ValueError, match="non-negative"):
        masks.padding_mask([-1, 2])
    with pytest.raises(ValueError, match="1-D"):
        masks.padding_mask(torch.ones(2, 2, dtype=torch.long))


def test_causal_mask_alignments():
    assert torch.equal(masks.causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())
    # lower-right: the 2 queries are the last 2 of 5 positions
    assert masks.causal_mask(2, 5, alignment="lower_right").tolist() == [[True, True, True, True, False], [True] * 5]
    # upper-left: what F.scaled_dot_product_attention(is_causal=True) does
    upper_left = masks.causal_mask(2, 5, alignment="upper_left")
    assert upper_left.tolist() == [[True, False, False, False, False], [True, True, False, False, False]]
    q, k, v = torch.randn(3, 7, 4), torch.randn(3, 7, 4), torch.randn(3, 7, 4)
    torch.testing.assert_close(F.scaled_dot_product_attention(q[:, :2], k[:, :5], v[:, :5], attn_mask=upper_left),
                               F.scaled_dot_product_attention(q[:, :2], k[:, :5], v[:, :5], is_causal=True))
    assert masks.causal_mask(1, 6, alignment="lower_right").all()  # one new token sees every cached one
    # PyTorch's own names mean the same
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    for n_q, n_k in [(2, 5), (5, 5), (4, 7), (1, 3)]:
        for ours, theirs in (("upper_left", causal_upper_left), ("lower_right", causal_lower_right)):
            mask = masks.causal_mask(n_q, n_k, alignment=ours)
            torch.testing.assert_close(
                F.scaled_dot_product_attention(q[:, :n_q], k[:, :n_k], v[:, :n_k], attn_mask=mask),
                F.scaled_dot_product_attention(q[:, :n_q], k[:, :n_k], v[:, :n_k], attn_mask=theirs(n_q, n_k)))
    with pytest.raises(ValueError, match="n_q must be a non-negative integer"):
        masks.causal_mask(-1)
    with pytest.raises(ValueError, match="alignment must be 'upper_left'"):
        masks.causal_mask(2, 5)
    with pytest.raises(ValueError, match="alignment must be one of"):
        masks.causal_mask(2, 5, alignment="top_left")
    with pytest.raises(TypeError, match="integer tensor of positions"):
        masks.causal_block(torch.tensor([0.5]), torch.arange(3))


def test_combine_masks():
    causal = masks.causal_mask(3)
    keys = masks.key_mask_to_attn_mask(masks.padding_mask([3, 2]))
    both = masks.combine_masks(causal, None, keys)
    assert both.shape == (2, 1, 3, 3)
    assert torch.equal(both[0, 0], causal) and torch.equal(both[1, 0], causal & torch.tensor([True, True, False]))
    assert masks.combine_masks(None, None) is None
    with pytest.raises(TypeError, match="boolean"):
        masks.combine_masks(causal, causal.float())
    with pytest.raises(ValueError, match="must broadcast"):
        masks.combine_masks(causal, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"\(batch, n_k\)"):
        masks.key_mask_to_attn_mask(causal[None])


def test_torch_conversions_round_trip():
    key_mask = masks.padding_mask([3, 1], 4)
    attn = masks.causal_mask(4)
    kpm, am = masks.to_torch_masks(key_mask, attn)
    assert torch.equal(kpm, ~key_mask) and torch.equal(am, attn.triu(1) == 0) is False
    assert torch.equal(am, ~attn)
    back_k, back_a = masks.from_torch_masks(kpm, am)
    assert torch.equal(back_k, key_mask) and torch.equal(back_a, attn)
    # PyTorch's float causal mask converts to the same boolean mask
    _, from_float = masks.from_torch_masks(attn_mask=nn.Transformer.generate_square_subsequent_mask(4))
    assert torch.equal(from_float, attn)
    four_d = torch.ones(2, 3, 4, 4, dtype=torch.bool)
    assert masks.to_torch_masks(attn_mask=four_d)[1].shape == (6, 4, 4)
    with pytest.raises(TypeError, match="boolean"):
        masks.to_torch_masks(key_mask=key_mask.float())
    with pytest.raises(ValueError, match=r"\(n_q, n_k\)"):
        masks.to_torch_masks(attn_mask=torch.ones(4, dtype=torch.bool))


def test_converted_masks_give_pytorchs_result():
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    ours = from_torch(ref).eval()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    key_mask, attn = masks.padding_mask([4, 2]), masks.causal_mask(4)
    kpm, am = masks.to_torch_masks(key_mask, attn)
    out_ref, _ = ref(x, x, x, key_padding_mask=kpm, attn_mask=am)
    out, _ = ours(x, x, x, key_mask=key_mask, attn_mask=attn)
    torch.testing.assert_close(out, out_ref, atol=1e-12, rtol=0)


def test_fully_masked_row_gives_zeros_in_output_and_gradients():
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    mask = masks.combine_masks(masks.causal_mask(3, 5, alignment="lower_right"),
                                masks.key_mask_to_attn_mask(masks.padding_mask([5, 0]))[:, 0])
    assert not mask[1].any()  # row 1: every key is padding
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all() and torch.all(out[1] == 0) and torch.all(w[1] == 0)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[1] == 0) and torch.all(v.grad[1] == 0)


def test_masks_from_torch_float_and_errors():
    additive = torch.tensor([[0.0, float("-inf")], [0.0, 0.0]])
    _, allowed = from_torch_masks(attn_mask=additive)
    assert allowed.tolist() == [[True, False], [True, True]]
    with pytest.raises(ValueError, match="only 0 and -inf"):
        from_torch_masks(attn_mask=torch.tensor([[0.0, -1.0]]))
    with pytest.raises(ValueError, match="num_heads must be given"):
        from_torch_masks(attn_mask=torch.zeros(6, 2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean or floating"):
        from_torch_masks(key_padding_mask=torch.zeros(2, 3, dtype=torch.long))


def test_attention_mask_combines_and_checks_what_a_layer_is_given():
    key_mask = masks.padding_mask([3, 2], 3)
    attn = masks.causal_mask(3)
    both = masks.attention_mask(2, 4, 3, 3, key_mask=key_mask, attn_mask=attn)
    assert both.shape == (2, 1, 3, 3)
    assert torch.equal(both, masks.combine_masks(attn, masks.key_mask_to_attn_mask(key_mask)))
    assert torch.equal(masks.attention_mask(2, 4, 3, 3, causal="upper_left")[0, 0], attn)
    assert masks.attention_mask(2, 4, 3, 3) is None
    with pytest.raises(TypeError, match="from_torch_masks"):
        masks.attention_mask(2, 4, 3, 3, attn_mask=attn.float())
    with pytest.raises(ValueError, match=r"attn_mask must have shape"):
        masks.attention_mask(2, 4, 3, 3, attn_mask=torch.ones(2, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_mask must have shape \(batch, n_k\) = \(2, 3\)"):
        masks.attention_mask(2, 4, 3, 3, key_mask=torch.ones(3, dtype=torch.bool))


@pytest.mark.filterwarnings("ignore:Lower right causal bias")
@pytest.mark.parametrize(("n_q", "n_k"), [(0, 3), (3, 0), (0, 0), (5, 2)])
def test_causal_mask_edges_match_pytorch(n_q, n_k):
    """Zero queries or keys give an empty mask; lower-right with more queries than keys leaves the first
    queries without keys: both as PyTorch's own causal biases."""
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    for ours, theirs in (("upper_left", causal_upper_left), ("lower_right", causal_lower_right)):
        mask = masks.causal_mask(n_q, n_k, alignment=ours)
        assert mask.shape == (n_q, n_k)
        assert torch.equal(mask, theirs(n_q, n_k)._materialize())


def test_padding_mask_edges():
    assert masks.padding_mask([]).shape == (0, 0)
    assert masks.padding_mask([], 4).shape == (0, 4)
    assert masks.padding_mask([0, 2], 3).tolist() == [[False, False, False], [True, True, False]]
    assert torch.equal(masks.padding_mask(torch.tensor([1, 2])), masks.padding_mask([1, 2]))
    assert masks.attention_mask(2, 1, 0, 3, causal="upper_left").shape == (1, 1, 0, 3)


def test_tile_mask_is_a_slice_of_the_whole_mask():
    from attention_course.masks import causal_mask, tile_mask

    g = torch.Generator().manual_seed(0)
    mask = torch.rand(2, 9, 11, generator=g) > 0.3
    whole = mask & causal_mask(9, 11, alignment="upper_left")
    for rows, cols in ((range(0, 4), range(0, 5)), (range(4, 9), range(5, 11)), (range(4, 9), range(0, 3))):
        tile = tile_mask(mask, rows, cols, causal=True)
        assert torch.equal(tile, whole[..., rows.start : rows.stop, cols.start : cols.stop])
    assert tile_mask(None, range(4, 9), range(0, 3), causal=True) is None  # below the diagonal: all visible
    assert torch.equal(tile_mask(None, range(0, 3), range(0, 3), causal=True), causal_mask(3))


@pytest.mark.parametrize(("n_q", "n_k", "alignment", "window"),
                         [(6, 6, None, 1), (6, 6, None, 3), (6, 6, None, 99), (3, 7, "lower_right", 2),
                          (5, 3, "upper_left", 2)])
def test_sliding_window_mask(n_q, n_k, alignment, window):
    """causal_mask(window=w): key position j visible from query position p iff p − w < j ≤ p; a window at least as
    wide as the keys is the causal mask."""
    mask = causal_mask(n_q, n_k, alignment=alignment, window=window)
    first = n_k - n_q if alignment == "lower_right" else 0
    expected = torch.tensor([[first + i - window < j <= first + i for j in range(n_k)] for i in range(n_q)])
    assert torch.equal(mask, expected)
    if window >= n_k:
        assert torch.equal(mask, causal_mask(n_q, n_k, alignment=alignment))
