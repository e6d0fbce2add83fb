"""The decoder-only model (chapter 7): causal, tied, cached generation equal to uncached (with grouped-query
attention too, and the cache's memory per token), and GPT-2's weights giving transformers' logits."""

import os

import pytest
import torch

from attention_course.gpt import GPT, GPTConfig, generate
from attention_course.interop import from_gpt2_state_dict, gpt2_config
from attention_course.measure import cpu_threads
from attention_course.multihead import MultiHeadAttention
from attention_course.positional import apply_rope

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny: on a busy 2-core machine, two threads waiting on each other made a 0.1 s test take
    8 s."""
    with cpu_threads(1):
        yield


def _model(dtype=torch.float32, seed=0, **options) -> GPT:
    settings = dict(vocab_size=31, d_model=32, n_layers=2, n_heads=4, max_len=48)
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**settings, **options}), dtype=dtype).eval()


def test_shapes_tying_and_parameters():
    m = _model()
    x = torch.randint(0, 31, (3, 7))
    assert m(x).shape == (3, 7, 31)
    assert m.head.weight is m.tok_embed.weight  # one matrix reads tokens in and scores them out
    assert m.pos_embed is None and _model(positions="learned").pos_embed.weight.shape == (48, 32)
    names = {n for n, _ in m.named_parameters()}
    assert "head.weight" not in names  # tied: counted once
    assert m(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 31)
    layer = m.layers[0]
    assert layer.norm_first and layer.self_attn.rotary is not None and layer.self_attn.batch_first


@pytest.mark.parametrize("positions", ["rotary", "learned"])
def test_causal_every_position_predicts_from_its_prefix(positions):
    m = _model(positions=positions)
    x = torch.randint(0, 31, (2, 12))
    y = x.clone()
    y[:, 8:] = torch.randint(0, 31, (2, 4))
    torch.testing.assert_close(m(x)[:, :8], m(y)[:, :8], rtol=0, atol=1e-6)
    assert not torch.allclose(m(x)[:, 8:], m(y)[:, 8:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("positions", ["rotary", "learned"])
@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
def test_cached_generation_equals_uncached(dtype, positions, num_kv_heads):
    m = _model(dtype, positions=positions, num_kv_heads=num_kv_heads)
    prompt = torch.randint(0, 31, (3, 6))
    runs = {}
    for use_cache in (True, False):
        g = torch.Generator().manual_seed(3)
        runs[use_cache] = generate(m, prompt, 25, top_k=10, generator=g, use_cache=use_cache, return_logits=True)
    (tok_c, log_c), (tok_u, log_u) = runs[True], runs[False]
    assert torch.equal(tok_c, tok_u) and torch.equal(tok_c[:, :6], prompt)
    torch.testing.assert_close(log_c, log_u, rtol=0, atol=TOL[dtype])
    # and each step's logits are those of one uncached pass over the whole sequence
    torch.testing.assert_close(log_c, m(tok_c)[:, 5:-1], rtol=0, atol=TOL[dtype])


def test_cached_generation_under_autocast():
    """Mixed precision, as a GPU trains and decodes: under ``torch.autocast`` the projections give bfloat16 keys and
    values, and the cache made inside the region holds bfloat16 (it was float32, and decoding raised TypeError);
    each step's logits are still those of one uncached pass under the same autocast."""
    m = _model()
    prompt = torch.randint(0, 31, (2, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m.new_cache(2, 8).layers[0].keys.dtype == torch.bfloat16
        tokens, logits = generate(m, prompt, 6, temperature=0.0, return_logits=True)
        full = m(tokens)[:, 4:-1]
    assert m.new_cache(2, 8).layers[0].keys.dtype == torch.float32  # outside the region: the parameters' dtype
    assert torch.equal(tokens[:, :5], prompt) and tokens.shape == (2, 11)
    torch.testing.assert_close(logits.float(), full.float(), rtol=0, atol=0.1)  # bfloat16 has 8 bits of precision


def test_prefill_then_chunks_equals_one_pass():
    """The cache in pieces of any size: prefill 5 positions, then 1, 3 and 2 (decoding aligned lower-right)."""
    m = _model(torch.float64, num_kv_heads=2)
    x = torch.randint(0, 31, (2, 11))
    cache = m.new_cache(2, 16)
    pieces = [m(x[:, a:b], cache) for a, b in ((0, 5), (5, 6), (6, 9), (9, 11))]
    assert cache.length == 11
    torch.testing.assert_close(torch.cat(pieces, dim=1), m(x), rtol=0, atol=1e-10)
    assert m(x[:, :0], cache).shape == (2, 0, 31) and cache.length == 11


def test_cache_memory_per_token_grouped_query_vs_multi_head():
    """Keys and values cost 2·n_layers·num_kv_heads·d_k numbers per token: 4 heads sharing 1 key/value head (MQA)
    or 2 (GQA) cache 4× or 2× less than multi-head attention."""
    per_token = {}
    for kv in (None, 2, 1):
        m = _model(num_kv_heads=kv)
        cache = m.new_cache(1, 40)
        m(torch.randint(0, 31, (1, 20)), cache)
        per_token[kv] = cache.nbytes / cache.length
    d_k, layers = 32 // 4, 2
    assert per_token[None] == 2 * layers * 4 * d_k * 4  # float32: 4 bytes
    assert per_token[None] / per_token[2] == 2 and per_token[None] / per_token[1] == 4


def test_rotary_scores_depend_on_offsets_only():
    """The model's own attention layer: the same tokens at positions 0.. or s.. (after a masked prefix in the
    cache) get the same attention weights — rotary positions make the scores relative."""
    m = _model(torch.float64)
    mha: MultiHeadAttention = m.layers[0].self_attn
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    _, w0 = mha(x, x, x, is_causal=True, average_attn_weights=False)
    s = 9
    cache = mha.new_cache(1, s + 6)
    mha(torch.randn(1, s, 32, dtype=torch.float64), *(torch.randn(1, s, 32, dtype=torch.float64),) * 2, cache=cache)
    key_mask = torch.arange(s + 6)[None] >= s
    _, ws = mha(x, x, x, is_causal=True, key_mask=key_mask, cache=cache, average_attn_weights=False)
    torch.testing.assert_close(ws[..., s:], w0, rtol=0, atol=1e-12)
    assert mha.rotary.func is apply_rope


def test_generate_is_seeded_and_greedy_at_zero_temperature():
    m = _model()
    prompt = torch.randint(0, 31, (2, 3))
    a = generate(m, prompt, 10, generator=torch.Generator().manual_seed(1))
    b = generate(m, prompt, 10, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (2, 13)
    greedy = generate(m, prompt, 10, temperature=0.0)
    step = prompt
    for _ in range(10):
        step = torch.cat([step, m(step)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(greedy, step)
    assert torch.equal(generate(m, prompt, 0), prompt)
    tokens, logits = generate(m, prompt, 0, return_logits=True)
    assert logits.shape == (2, 0, 31)


def test_training_mode_is_restored_and_maps_are_causal():
    m = _model().train()
    generate(m, torch.zeros(1, 2, dtype=torch.long), 3)
    assert m.training
    maps = m.attention_maps(torch.randint(0, 31, (2, 9)))
    assert len(maps) == 2 and maps[0].shape == (2, 4, 9, 9)
    assert (maps[0].triu(1) == 0).all()
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(2, 4, 9))


# ----------------------------------------------------------------------------------------- GPT-2's weights
@pytest.fixture(scope="module")
def transformers():
    os.environ["HF_HUB_OFFLINE"] = "1"  # never the network: the model is built from a config, not downloaded
    return pytest.importorskip("transformers")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gpt2_state_dict_gives_transformers_logits(transformers, dtype):
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=101, n_positions=40,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(config).to(dtype).eval()
    with torch.no_grad():  # random LayerNorm parameters and biases too, so that a swapped or missing one shows
        for name, p in hf.named_parameters():
            if "ln" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
    ours = from_gpt2_state_dict(hf.state_dict(), gpt2_config(config))
    assert ours.config.activation == "gelu_tanh" and ours.config.positions == "learned"
    x = torch.randint(0, 101, (3, 40))
    with torch.no_grad():
        want = hf(x).logits
    torch.testing.assert_close(ours(x), want, rtol=0, atol=TOL[dtype])
    # the transformer part alone (GPT2Model's keys, without the prefix) loads too
    bare = from_gpt2_state_dict(hf.transformer.state_dict(), gpt2_config(config))
    torch.testing.assert_close(bare(x), want, rtol=0, atol=TOL[dtype])
    # and greedy generation with the cache gives transformers' greedy generate (with its cache)
    prompt = x[:, :5]
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0,
                             attention_mask=torch.ones_like(prompt))
    assert torch.equal(generate(ours, prompt, 12, temperature=0.0), theirs)
