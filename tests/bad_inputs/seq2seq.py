"""Bad inputs for seq2seq.py: the Transformer core, Seq2SeqTransformer (constructor, encoding, decoding, the
decoding cache), greedy_decode and param_count."""

from __future__ import annotations

import torch
from torch import nn

from attention_course.seq2seq import AttentionMaps, DecoderCache, Seq2SeqTransformer, Transformer, greedy_decode
from attention_course.seq2seq import param_count as count
from bad_inputs import case

S2S = Seq2SeqTransformer
IDS = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])


def _model(**kw) -> Seq2SeqTransformer:
    options = dict(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16, max_len=8)
    return Seq2SeqTransformer(11, **{**options, **kw}).eval()


def _core() -> Transformer:
    return Transformer(8, 2, 1, 1, 16, batch_first=True)


def _seq(*shape, **kw) -> torch.Tensor:
    return torch.zeros(*(shape or (2, 3, 8)), **kw)


def _step(tokens=None, cache=None, model=None, **kw):
    """decode_step of ``model`` (default: a new one) with a cache made by it (or ``cache(model, memory)``)."""
    model = model or _model()
    memory = model.encode(IDS)
    cache = model.new_cache(memory, IDS != 0, **kw) if cache is None else cache(model, memory)
    return model.decode_step(torch.ones(2, 1, dtype=torch.long) if tokens is None else tokens, cache)


def _full_cache_step():
    model = _model()
    cache = model.new_cache(model.encode(IDS), capacity=2)
    model.decode_step(torch.ones(2, 2, dtype=torch.long), cache)
    return model.decode_step(torch.ones(2, 1, dtype=torch.long), cache)


def _cache_with_mask(model, memory, mask):
    cache = model.new_cache(memory)
    cache.memory_key_mask = mask
    return cache


CASES = [
    # Transformer
    case(Transformer, lambda: Transformer(num_encoder_layers=0), ValueError, arg="num_encoder_layers",
         id="seq2seq.Transformer-no-encoder-layers"),
    case(Transformer, lambda: Transformer(num_decoder_layers=-1), ValueError, arg="num_decoder_layers",
         id="seq2seq.Transformer-negative-decoder-layers"),
    case(Transformer, lambda: Transformer(0, 2), ValueError, arg="d_model", id="seq2seq.Transformer-d-model"),
    case(Transformer, lambda: Transformer(16, 3), ValueError, arg="nhead", says="divisible",
         id="seq2seq.Transformer-divisible"),
    case(Transformer, lambda: Transformer(8, 2, dim_feedforward=0), ValueError, arg="dim_feedforward",
         id="seq2seq.Transformer-ff"),
    case(Transformer, lambda: _core()([[0.0] * 8], _seq()), TypeError, arg="src",
         id="seq2seq.Transformer.forward-list"),
    case(Transformer, lambda: _core()(_seq(), _seq(3, 2, 8)), ValueError, arg="tgt", says="batch size",
         id="seq2seq.Transformer.forward-batch"),
    case(Transformer, lambda: _core()(_seq(), _seq(dtype=torch.float64)), TypeError, arg="tgt", says="float32",
         id="seq2seq.Transformer.forward-dtype"),
    case(Transformer, lambda: _core()(_seq(device="meta"), _seq(device="meta")), ValueError, arg="src",
         says="meta", id="seq2seq.Transformer.forward-device"),
    case(Transformer, lambda: _core()(_seq(), _seq(), src_is_causal=1), TypeError, arg="src_is_causal",
         id="seq2seq.Transformer.forward-causal"),
    case(Transformer, lambda: _core()(_seq(), _seq(), attn_maps=[]), TypeError, arg="attn_maps",
         says="AttentionMaps", id="seq2seq.Transformer.forward-maps"),
    case(Transformer, lambda: _core()(_seq(), _seq(), memory_key_mask=torch.ones(2, 3)), TypeError,
         arg="memory_key_mask", says="boolean", id="seq2seq.Transformer.forward-float-mask"),
    case(AttentionMaps, lambda: AttentionMaps(encoder=None), TypeError, arg="encoder",
         id="seq2seq.AttentionMaps-none"),
    case(AttentionMaps, lambda: AttentionMaps(cross=(torch.zeros(1),)), TypeError, arg="cross",
         id="seq2seq.AttentionMaps-tuple"),
    # Seq2SeqTransformer: the constructor
    case(S2S, lambda: S2S(0), ValueError, arg="src_vocab", says="positive", id="seq2seq.S2S-vocab-zero"),
    case(S2S, lambda: S2S(11.0), TypeError, arg="src_vocab", id="seq2seq.S2S-vocab-float"),
    case(S2S, lambda: S2S(11, -3, share_embeddings=False), ValueError, arg="tgt_vocab",
         id="seq2seq.S2S-tgt-vocab-negative"),
    case(S2S, lambda: S2S(11, 12), ValueError, arg="tgt_vocab", says="share_embeddings",
         id="seq2seq.S2S-shared-vocabs"),
    case(S2S, lambda: _model(pad_id=11), ValueError, arg="pad_id", says="[0, 10]", id="seq2seq.S2S-pad-id"),
    case(S2S, lambda: _model(max_len=0), ValueError, arg="max_len", id="seq2seq.S2S-max-len"),
    case(S2S, lambda: _model(d_model=-8), ValueError, arg="d_model", id="seq2seq.S2S-d-model"),
    case(S2S, lambda: _model(dropout=1.5), ValueError, arg="dropout", id="seq2seq.S2S-dropout"),
    case(S2S, lambda: _model(dtype=torch.long), TypeError, arg="dtype", id="seq2seq.S2S-dtype"),
    case(S2S, lambda: _model(tie_output="yes"), TypeError, arg="tie_output", id="seq2seq.S2S-tie"),
    # encoding and teacher-forced decoding
    case(S2S, lambda: _model().encode(IDS.float()), TypeError, arg="src", says="integer",
         id="seq2seq.S2S.encode-float-ids"),
    case(S2S, lambda: _model().encode(IDS + 8), ValueError, arg="src", says="[0, 11)",
         id="seq2seq.S2S.encode-ids-too-large"),
    case(S2S, lambda: _model().encode(IDS - 1), ValueError, arg="src", says="[-1, 6]",
         id="seq2seq.S2S.encode-negative-ids"),
    case(S2S, lambda: _model().encode(IDS[0]), ValueError, arg="src", says="(batch, n)",
         id="seq2seq.S2S.encode-1d"),
    case(S2S, lambda: _model().encode(IDS.tolist()), TypeError, arg="src", id="seq2seq.S2S.encode-list"),
    case(S2S, lambda: _model().encode(IDS.to("meta")), ValueError, arg="src", says="meta",
         id="seq2seq.S2S.encode-device"),
    case(S2S, lambda: _model().encode(torch.ones(2, 9, dtype=torch.long)), ValueError, arg="src",
         says="max_len=8", id="seq2seq.S2S.encode-too-long"),
    case(S2S, lambda: _model().encode(IDS, (IDS != 0).float()), TypeError, arg="src_key_mask", says="boolean",
         id="seq2seq.S2S.encode-float-mask"),
    case(S2S, lambda: _model().decode(IDS, [[0.0] * 8]), TypeError, arg="memory", id="seq2seq.S2S.decode-list"),
    case(S2S, lambda: _model().decode(IDS, _seq(3, 4, 8)), ValueError, arg="memory", says="batch",
         id="seq2seq.S2S.decode-memory-batch"),
    case(S2S, lambda: _model().decode(IDS + 20, _seq()), ValueError, arg="tgt", id="seq2seq.S2S.decode-ids"),
    case(S2S, lambda: _model()(IDS, IDS[:1]), ValueError, arg="tgt", says="batch size",
         id="seq2seq.S2S.forward-batch"),
    case(S2S, lambda: _model().attention_maps(IDS, IDS.bool()), TypeError, arg="tgt", says="integer",
         id="seq2seq.S2S.attention_maps-bool-ids"),
    case(S2S, lambda: _model().embed_tgt(IDS, offset=-1), ValueError, arg="offset",
         id="seq2seq.S2S.embed_tgt-offset"),
    case(S2S, lambda: _model().embed_tgt(IDS, offset=5), ValueError, arg="tgt", says="at most 3",
         id="seq2seq.S2S.embed_tgt-past-max-len"),
    case(S2S, lambda: _model().embed_src(IDS.numpy()), TypeError, arg="src", id="seq2seq.S2S.embed_src-numpy"),
    case(S2S, lambda: _model().src_key_mask_for(IDS.float()), TypeError, arg="src",
         id="seq2seq.S2S.src_key_mask_for-float"),
    case(S2S, lambda: _model().attention_maps(IDS, IDS[:1]), ValueError, arg="src and tgt",
         says="same batch size", id="seq2seq.S2S.attention_maps-batch-mismatch"),
    case(S2S, lambda: _model()(IDS, IDS[:1]), ValueError, arg="src and tgt", says="same batch size",
         id="seq2seq.S2S.forward-batch-mismatch"),
    # the decoding cache
    case(S2S, lambda: _model().new_cache(_seq(3, 8)), ValueError, arg="memory", says="3-D",
         id="seq2seq.S2S.new_cache-2d-memory"),
    case(S2S, lambda: _model().new_cache(_seq(2, 4, 8, dtype=torch.float64)), TypeError, arg="memory",
         says="float32", id="seq2seq.S2S.new_cache-dtype"),
    case(S2S, lambda: _step(cache=lambda m, mem: m.new_cache(mem, (IDS != 0).float())), TypeError,
         arg="memory_key_mask", says="boolean", id="seq2seq.S2S.new_cache-float-mask"),
    case(S2S, lambda: _step(cache=lambda m, mem: m.new_cache(mem, (IDS != 0)[:, :3])), ValueError,
         arg="memory_key_mask", says="(2, 4)", id="seq2seq.S2S.new_cache-mask-shape"),
    case(S2S, lambda: _step(capacity=0), ValueError, arg="capacity", id="seq2seq.S2S.new_cache-capacity-zero"),
    case(S2S, lambda: _step(capacity=9), ValueError, arg="capacity", says="[1, 8]",
         id="seq2seq.S2S.new_cache-capacity-over-max-len"),
    case(S2S, lambda: _step(cache=lambda m, mem: None), TypeError, arg="cache", says="DecoderCache",
         id="seq2seq.S2S.decode_step-no-cache"),
    case(S2S, lambda: _step(cache=lambda m, mem: _model().new_cache(mem)), ValueError, arg="cache",
         says="another model", id="seq2seq.S2S.decode_step-other-model"),
    case(S2S, lambda: _step(cache=lambda m, mem: DecoderCache([])), ValueError, arg="cache",
         says="per decoder layer", id="seq2seq.S2S.decode_step-layers"),
    case(S2S, lambda: _step(cache=lambda m, mem: _cache_with_mask(m, mem, IDS[:1] != 0)), ValueError,
         arg="cache.memory_key_mask", says="(2, 4)", id="seq2seq.S2S.decode_step-cache-mask-shape"),
    case(S2S, lambda: _step(cache=lambda m, mem: _cache_with_mask(m, mem, (IDS != 0).float())), TypeError,
         arg="memory_key_mask", says="boolean", id="seq2seq.S2S.decode_step-cache-float-mask"),
    case(S2S, lambda: _step(tokens=torch.ones(3, 1, dtype=torch.long)), ValueError, arg="tokens",
         says="batch size 2", id="seq2seq.S2S.decode_step-batch"),
    case(S2S, lambda: _step(tokens=torch.full((2, 1), 11)), ValueError, arg="tokens", says="[0, 11)",
         id="seq2seq.S2S.decode_step-ids"),
    case(S2S, lambda: _step(tokens=torch.ones(2, 1)), TypeError, arg="tokens", says="integer",
         id="seq2seq.S2S.decode_step-float"),
    case(S2S, _full_cache_step, ValueError, arg="tokens", says="at most 0 more", id="seq2seq.S2S.decode_step-full"),
    # greedy_decode
    case(greedy_decode, lambda: greedy_decode(nn.Linear(2, 2), IDS, 3, 1), TypeError, arg="model",
         says="Seq2SeqTransformer", id="seq2seq.greedy_decode-model"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 0, 1), ValueError, arg="max_len",
         id="seq2seq.greedy_decode-max-len-zero"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 2.5, 1), TypeError, arg="max_len",
         id="seq2seq.greedy_decode-max-len-float"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 9, 1), ValueError, arg="max_len", says="max_len=8",
         id="seq2seq.greedy_decode-max-len-too-long"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 3, 11), ValueError, arg="bos_id", says="[0, 10]",
         id="seq2seq.greedy_decode-bos"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 3, None), TypeError, arg="bos_id",
         id="seq2seq.greedy_decode-no-bos"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 3, 1, -1), ValueError, arg="eos_id",
         id="seq2seq.greedy_decode-eos"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 3, 1, 2, pad_id="0"), TypeError, arg="pad_id",
         id="seq2seq.greedy_decode-pad"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 3, 1, use_cache="yes"), TypeError, arg="use_cache",
         id="seq2seq.greedy_decode-use-cache"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS.float(), 3, 1), TypeError, arg="src",
         id="seq2seq.greedy_decode-float-src"),
    case(greedy_decode, lambda: greedy_decode(_model(), IDS, 3, 1, src_key_mask=(IDS != 0)[:, :2]), ValueError,
         arg="key_mask", says="(2, 4)", id="seq2seq.greedy_decode-mask-shape"),
    # param_count
    case(count, lambda: count("model"), TypeError, arg="model", says="Module", id="seq2seq.param_count-str"),
    case(count, lambda: count(_model().state_dict()), TypeError, arg="model", id="seq2seq.param_count-dict"),
]
