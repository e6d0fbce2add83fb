"""seq2seq.py against PyTorch's nn.Transformer (weights copied by interop.from_torch), then the seq2seq model, its
decoding cache and greedy decoding, and the error messages."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch_reference import DTYPES, FF, LENGTHS_SRC, LENGTHS_TGT, TOL, D, H, randomise_vectors, sequence

from attention_course import masks
from attention_course.interop import from_torch
from attention_course.layers import TransformerEncoderLayer
from attention_course.seq2seq import (
    AttentionMaps,
    Seq2SeqTransformer,
    Transformer,
    TransformerEncoder,
    greedy_decode,
    param_count,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch's nested-tensor / mask-type notices


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_matches_torch(dtype, batch_first, norm_first):
    torch.manual_seed(4)
    ref = nn.Transformer(D, H, 2, 3, FF, dropout=0.1, batch_first=batch_first, norm_first=norm_first,
                         dtype=dtype).eval()
    randomise_vectors(ref)
    ours = from_torch(ref).eval()
    assert [k for k in ours.state_dict()] == [k for k in ref.state_dict()]  # same names, same order
    gen = torch.Generator().manual_seed(5)
    src, tgt = sequence(gen, 3, 7, dtype, batch_first), sequence(gen, 3, 5, dtype, batch_first)
    src_mask, tgt_mask = masks.padding_mask(LENGTHS_SRC), masks.padding_mask(LENGTHS_TGT)
    causal = ref.generate_square_subsequent_mask(5, dtype=dtype)
    out_ref = ref(src, tgt, tgt_mask=causal, src_key_padding_mask=~src_mask, tgt_key_padding_mask=~tgt_mask,
                  memory_key_padding_mask=~src_mask, tgt_is_causal=True)
    out = ours(src, tgt, tgt_is_causal=True, src_key_mask=src_mask, tgt_key_mask=tgt_mask, memory_key_mask=src_mask)
    torch.testing.assert_close(out, out_ref, **TOL[dtype])
    maps = AttentionMaps()
    torch.testing.assert_close(ours(src, tgt, tgt_is_causal=True, src_key_mask=src_mask, tgt_key_mask=tgt_mask,
                                    memory_key_mask=src_mask, attn_maps=maps), out_ref, **TOL[dtype])
    assert (len(maps.encoder), len(maps.decoder_self), len(maps.cross)) == (2, 3, 3)
    # the comparison can fail: without the causal mask the outputs differ
    assert not torch.allclose(ours(src, tgt, src_key_mask=src_mask, memory_key_mask=src_mask), out_ref, atol=1e-3)


def test_transformer_matches_torch_in_training_mode_without_dropout():
    torch.manual_seed(6)
    ref = nn.Transformer(D, H, 1, 1, FF, dropout=0.0, batch_first=True, dtype=torch.float64)
    ours = from_torch(ref)
    gen = torch.Generator().manual_seed(7)
    src, tgt = sequence(gen, 2, 6, torch.float64, True), sequence(gen, 2, 4, torch.float64, True)
    causal = ref.generate_square_subsequent_mask(4, dtype=torch.float64)
    a = ref(src, tgt, tgt_mask=causal, tgt_is_causal=True)
    b = ours(src, tgt, tgt_is_causal=True)
    torch.testing.assert_close(b, a, **TOL[torch.float64])
    a.square().sum().backward()
    b.square().sum().backward()
    for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, **TOL[torch.float64], msg=name)


def test_encoder_stack_copies_layers_and_checks_arguments():
    layer = TransformerEncoderLayer(D, H, FF)
    enc = TransformerEncoder(layer, 3)
    assert len(enc.layers) == 3 and enc.layers[0] is not enc.layers[1]
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        TransformerEncoder(nn.Linear(2, 2), 2)
    with pytest.raises(ValueError, match="num_layers"):
        TransformerEncoder(layer, 0)


def test_bad_inputs_raise_with_shapes():
    model = Transformer(D, H, 1, 1, FF, batch_first=True)
    src, tgt = torch.randn(2, 5, D), torch.randn(2, 4, D)
    with pytest.raises(ValueError, match=r"d_model=16.*\(2, 5, 8\)"):
        model(torch.randn(2, 5, 8), tgt)
    with pytest.raises(ValueError, match="same batch size"):
        model(src, torch.randn(3, 4, D))
    with pytest.raises(TypeError, match="floating-point"):
        model(src.long(), tgt)
    with pytest.raises(TypeError, match="boolean"):
        model(src, tgt, src_key_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"key_mask must have shape \(batch, n_k\) = \(2, 5\)"):
        model(src, tgt, src_key_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        model(src, tgt, tgt_mask=torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="activation"):
        TransformerEncoderLayer(D, H, activation="tanh")


# ------------------------------------------------------------------------------------------- seq2seq model
def _seq2seq(seed=0, **kw) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    cfg = dict(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF, dropout=0.1,
               max_len=40)
    cfg.update(kw)
    return Seq2SeqTransformer(11, **cfg).eval()


def test_seq2seq_shapes_tied_weights_and_param_count():
    model = _seq2seq()
    assert model.generator.weight is model.src_embed.weight is model.tgt_embed.weight
    untied = _seq2seq(share_embeddings=False, tie_output=False)
    assert param_count(untied) - param_count(model) == 2 * 11 * D
    assert param_count(model) == sum(p.numel() for p in model.parameters())
    src = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    tgt = torch.tensor([[1, 5, 4], [1, 7, 6]])
    logits = model(src, tgt)
    assert logits.shape == (2, 3, 11)
    # padding is masked: changing what sits in a padded source position changes nothing
    src2 = src.clone()
    src2[1, 3] = 9
    torch.testing.assert_close(model(src2, tgt, src_key_mask=src != 0), logits)
    # the base configuration of the paper, on the meta device (no memory): about 63 M parameters
    base = Seq2SeqTransformer(37000, d_model=512, nhead=8, dim_feedforward=2048, device="meta")
    assert 60e6 < param_count(base) < 66e6


def test_seq2seq_decoder_is_causal():
    model = _seq2seq(1)
    src = torch.tensor([[3, 4, 5, 6]])
    tgt = torch.tensor([[1, 5, 4, 3, 8]])
    later = tgt.clone()
    later[0, 3:] = torch.tensor([9, 10])
    a, b = model(src, tgt), model(src, later)
    torch.testing.assert_close(a[:, :3], b[:, :3])  # positions 0..2 do not see tokens 3..4
    assert not torch.allclose(a[:, 3:], b[:, 3:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_full_recompute(dtype, norm_first):
    model = _seq2seq(2, norm_first=norm_first, dtype=dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # larger weights: logits with clear arg-maxes
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0], [10, 0, 0, 0, 0]])
    fast, logits_fast = greedy_decode(model, src, 12, bos_id=1, use_cache=True, return_logits=True)
    slow, logits_slow = greedy_decode(model, src, 12, bos_id=1, use_cache=False, return_logits=True)
    assert torch.equal(fast, slow) and fast.shape == (3, 13) and torch.all(fast[:, 0] == 1)
    torch.testing.assert_close(logits_fast, logits_slow, **TOL[dtype])
    # the cached step logits are the teacher-forced logits of the decoded prefix
    full = model.decode(fast[:, :-1], model.encode(src), memory_key_mask=src != 0)
    torch.testing.assert_close(logits_fast, full, **TOL[dtype])
    # decode_step with several new tokens at once (a causal block against the cache)
    mask = src != 0
    cache = model.new_cache(model.encode(src), mask, capacity=13)
    part1 = model.decode_step(fast[:, :4], cache)
    part2 = model.decode_step(fast[:, 4:12], cache)
    assert cache.length == 12
    per_position = 2 * 2 * 3 * D * cache.layers[0][0].keys.element_size()  # layers · (k, v) · batch · d_model
    assert cache.nbytes == 12 * per_position + 5 * per_position  # 12 target positions + 5 memory positions
    torch.testing.assert_close(torch.cat([part1, part2], dim=1), full, **TOL[dtype])
    with pytest.raises(ValueError, match="it holds 13 positions and 12 are used"):
        model.decode_step(fast[:, :2], cache)


def test_greedy_decode_stops_at_eos_and_pads():
    model = _seq2seq(3)
    src = torch.tensor([[3, 4, 5], [5, 6, 0]])
    free = greedy_decode(model, src, 10, bos_id=1)  # no EOS: always 10 tokens
    assert free.shape == (2, 11)
    eos = int(free[0, 3])  # pretend the token row 0 produced third is the end token
    out = greedy_decode(model, src, 10, bos_id=1, eos_id=eos, pad_id=0)
    for row in range(2):
        hits = (free[row, 1:] == eos).nonzero()
        if len(hits):
            end = int(hits[0]) + 1  # index of the first EOS in the output
            assert torch.equal(out[row, : end + 1], free[row, : end + 1])
            assert torch.all(out[row, end + 1 :] == 0)
        else:
            assert torch.equal(out[row], free[row])
    assert out.shape[1] <= 11
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, src, 0, bos_id=1)
    with pytest.raises(TypeError, match="Seq2SeqTransformer"):
        greedy_decode(nn.Linear(2, 2), src, 3, bos_id=1)


def test_attention_maps_rows_sum_to_one_and_respect_masks():
    model = _seq2seq(4)
    src = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]])
    tgt = torch.tensor([[1, 5, 4, 3], [1, 9, 8, 7]])
    maps = model.attention_maps(src, tgt)
    assert len(maps.encoder) == len(maps.decoder_self) == len(maps.cross) == 2
    assert maps.cross[0].shape == (2, H, 4, 4)
    for w in maps.encoder + maps.cross:
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
        assert torch.all(w[0, :, :, 3] == 0)  # the padded source position
    for w in maps.decoder_self:
        assert torch.all(w.triu(1) == 0)
    assert not model.training


def test_seq2seq_bad_inputs():
    model = _seq2seq()
    with pytest.raises(TypeError, match="integer tensor"):
        model(torch.randn(2, 3), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(batch, n\)"):
        model(torch.ones(3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 11\)"):
        model(torch.full((2, 3), 11), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="same batch size"):
        model(torch.ones(2, 3, dtype=torch.long), torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="share_embeddings"):
        Seq2SeqTransformer(11, 12)
    with pytest.raises(ValueError, match="max_len=40"):
        model(torch.ones(1, 41, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


def test_no_warnings_from_our_modules():
    model = _seq2seq()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(torch.tensor([[3, 4, 0]]), torch.tensor([[1, 4]]))


# ------------------------------------------------------------------------------------------------- the edges
@pytest.mark.parametrize(("batch", "n_src", "n_tgt"), [(0, 5, 4), (2, 0, 4), (2, 5, 0), (2, 0, 0)])
def test_transformer_empty_batches_and_sequences_match_torch(batch, n_src, n_tgt):
    torch.manual_seed(60)
    ref = nn.Transformer(D, H, 1, 1, FF, dropout=0.0, batch_first=True, dtype=torch.float64).eval()
    randomise_vectors(ref)
    ours = from_torch(ref).eval()
    gen = torch.Generator().manual_seed(61)
    src, tgt = sequence(gen, batch, n_src, torch.float64, True), sequence(gen, batch, n_tgt, torch.float64, True)
    expected = ref(src, tgt)
    out = ours(src, tgt)
    assert out.shape == expected.shape == (batch, n_tgt, D) and torch.isfinite(out).all()
    torch.testing.assert_close(out, expected, **TOL[torch.float64])


def test_seq2seq_edges_empty_batch_empty_source_and_no_new_token():
    model = _seq2seq(62)
    empty = torch.zeros(0, 4, dtype=torch.long)
    assert greedy_decode(model, empty, 5, bos_id=1, eos_id=2).shape == (0, 2)  # an empty batch is done at once
    assert greedy_decode(model, empty, 5, bos_id=1).shape == (0, 6)
    # no source position: zero cross-attention outputs, finite logits, cached and uncached decoding agree
    no_src = torch.zeros(2, 0, dtype=torch.long)
    memory = model.encode(no_src)
    assert memory.shape == (2, 0, D)
    fast, logits = greedy_decode(model, no_src, 4, bos_id=1, return_logits=True)
    assert torch.isfinite(logits).all()
    assert torch.equal(fast, greedy_decode(model, no_src, 4, bos_id=1, use_cache=False))
    # a source row that is all padding: finite logits as well
    padded = torch.tensor([[3, 4, 5], [0, 0, 0]])
    _, logits = greedy_decode(model, padded, 4, bos_id=1, return_logits=True)
    assert torch.isfinite(logits).all()
    # decode_step with no new token: (batch, 0, vocab), the cache as it was
    cache = model.new_cache(model.encode(padded), padded != 0, capacity=4)
    assert model.decode_step(torch.zeros(2, 0, dtype=torch.long), cache).shape == (2, 0, 11) and cache.length == 0
    # as many steps as the positional table has positions: the cache needs exactly that capacity
    longest = _seq2seq(63, max_len=6)
    assert torch.equal(greedy_decode(longest, padded, 6, bos_id=1), greedy_decode(longest, padded, 6, bos_id=1,
                                                                                   use_cache=False))
    assert param_count(nn.ReLU()) == 0


def test_decoding_cache_refusals_leave_it_unchanged():
    model, other = _seq2seq(64), _seq2seq(65)
    src = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    memory = model.encode(src)
    with pytest.raises(TypeError, match="memory_key_mask must be a boolean"):  # the reported float padding mask
        model.new_cache(memory, (src != 0).float())
    cache = model.new_cache(memory, src != 0, capacity=3)
    step = torch.ones(2, 1, dtype=torch.long)
    first = model.decode_step(step, cache)
    with pytest.raises(ValueError, match="another model"):
        other.decode_step(step, cache)
    with pytest.raises(ValueError, match=r"tokens must hold token ids in \[0, 11\)"):
        model.decode_step(torch.full((2, 1), 11), cache)
    with pytest.raises(ValueError, match="at most 2 more; got 3"):
        model.decode_step(torch.ones(2, 3, dtype=torch.long), cache)
    assert cache.length == 1
    again = model.new_cache(memory, src != 0, capacity=3)
    torch.testing.assert_close(model.decode_step(step, again), first)


def test_attention_maps_restores_training_mode_after_an_error():
    model = _seq2seq(66).train()
    src = torch.tensor([[3, 4, 5]])
    with pytest.raises(ValueError, match="key_mask"):
        model.attention_maps(src, src, src_key_mask=torch.ones(1, 2, dtype=torch.bool))
    assert model.training


def test_a_model_on_the_meta_device_gives_shapes_and_refuses_cpu_ids():
    model = _seq2seq(67, device="meta")
    src = torch.ones(2, 3, dtype=torch.long, device="meta")  # no data: the id range cannot be (and is not) read
    assert model(src, src).shape == (2, 3, 11)
    with pytest.raises(ValueError, match="src must be on the model's device meta"):
        model.encode(torch.ones(2, 3, dtype=torch.long))


def test_any_integer_dtype_of_token_ids_gives_the_same_logits():
    """int16/uint8/int32 ids are accepted (nn.Embedding alone takes only int32/int64)."""
    import torch

    from attention_course.seq2seq import Seq2SeqTransformer

    torch.manual_seed(0)
    model = Seq2SeqTransformer(10, 12, d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                               dim_feedforward=16, dropout=0.0, max_len=6, pad_id=0,
                               share_embeddings=False).eval()
    src, tgt = torch.randint(1, 10, (2, 4)), torch.randint(1, 12, (2, 3))
    expected = model(src, tgt)
    for dtype in (torch.int16, torch.uint8, torch.int32):
        torch.testing.assert_close(model(src.to(dtype), tgt.to(dtype)), expected)
