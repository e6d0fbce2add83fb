"""experiments/gpt.py (chapter 7): the counting baselines, bits per character, a short seeded training run on the
corpus, the head statistics and their shuffled control, and the device plan."""

from __future__ import annotations

import math

import pytest
import torch
from fake_devices import CPU, H100, MPS, T4

from attention_course.data import load_corpus
from attention_course.device import DeviceInfo
from attention_course.experiments.gpt import (
    CPU_CONFIG,
    GPU_CONFIG,
    bits_per_char,
    fit_gpt,
    gpt_plan,
    head_scores,
    map_scores,
    ngram_bits_per_char,
    shuffle_maps,
    shuffled_scores,
    train_gpt,
    train_seeds,
    validation_windows,
)
from attention_course.gpt import GPT, GPTConfig


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def test_validation_windows_span_the_split():
    ids = torch.arange(100)
    w = validation_windows(ids, 9, 4)
    assert w.shape == (4, 10) and w[0, 0] == 0 and w[-1, 0] == 90  # the first and the last of ten windows
    assert torch.equal(validation_windows(ids, 9).flatten(), ids)


def test_ngram_baselines_by_hand():
    train = torch.tensor([0, 1, 0, 1, 0, 1, 0, 0])  # counts: 0 five times, 1 three; pairs 01 ×3, 10 ×3, 00 ×1
    windows = torch.tensor([[0, 1, 1]])  # scored: 1 after 0, 1 after 1
    uni = -(math.log2(4 / 10) * 2) / 2
    assert ngram_bits_per_char(train, windows, 2, 1) == pytest.approx(uni, abs=1e-12)
    p01, p11 = (3 + 1) / (4 + 2), (0 + 1) / (3 + 2)  # add-one: (N_bc + 1) / (N_b + V); N_b counts b before a char
    assert ngram_bits_per_char(train, windows, 2, 2) == pytest.approx(-(math.log2(p01) + math.log2(p11)) / 2,
                                                                       abs=1e-12)


def test_an_untrained_model_is_near_uniform(corpus):
    torch.manual_seed(0)
    model = GPT(GPTConfig(corpus.vocab_size, 32, 1, 2, max_len=32))
    bpc = bits_per_char(model, validation_windows(corpus.validation, 32, 16))
    assert abs(bpc - math.log2(corpus.vocab_size)) < 0.1  # GPT-2's small initialisation: logits near 0


def test_a_short_run_beats_the_unigram_baseline_and_is_seeded(corpus):
    settings = dict(d_model=32, n_layers=1, n_heads=2, length=32, batch=16, steps=60, lr=1e-2, eval_windows=64)
    a, b = train_seeds(corpus, [0, 1], **settings)
    again = train_gpt(corpus, 0, **settings)
    assert a.history.loss == again.history.loss and a.validation_bpc == again.validation_bpc
    assert a.history.loss != b.history.loss
    windows = validation_windows(corpus.validation, 32, 64)
    unigram = ngram_bits_per_char(corpus.train, windows, corpus.vocab_size, 1)
    assert a.validation_bpc == pytest.approx(bits_per_char(a.model, windows), abs=1e-9)
    assert max(a.validation_bpc, b.validation_bpc) < unigram < math.log2(corpus.vocab_size)
    assert not a.model.training


def _previous_token_maps(batch=8, heads=2, n=10):
    w = torch.zeros(batch, heads, n, n)
    w[..., 0, 0] = 1.0
    t = torch.arange(1, n)
    w[..., t, t - 1] = 1.0
    return [w]


def test_map_scores_and_their_shuffled_control():
    n = 10
    scores = map_scores(_previous_token_maps(n=n))
    assert torch.equal(scores.previous, torch.ones(1, 2, dtype=torch.float64))
    assert scores.first.tolist() == [[1 / (n - 1)] * 2]  # query 1's previous token is the first token
    control = map_scores(shuffle_maps(_previous_token_maps(batch=4000, n=n), torch.Generator().manual_seed(0)))
    chance = sum(1 / (t + 1) for t in range(1, n)) / (n - 1)  # query t: one key of t + 1 holds the weight
    torch.testing.assert_close(control.previous, torch.full((1, 2), chance, dtype=torch.float64), rtol=0, atol=0.01)
    torch.testing.assert_close(control.first, control.previous, rtol=0, atol=0.01)
    shuffled = shuffle_maps(_previous_token_maps(), torch.Generator().manual_seed(1))[0]
    assert (shuffled.triu(1) == 0).all()  # still causal
    torch.testing.assert_close(shuffled.sum(-1), torch.ones(8, 2, 10))


def test_head_scores_of_a_model(corpus):
    torch.manual_seed(0)
    model = GPT(GPTConfig(corpus.vocab_size, 32, 2, 4, max_len=32))
    tokens = validation_windows(corpus.validation, 31, 8)
    scores, control = head_scores(model, tokens), shuffled_scores(model, tokens, torch.Generator().manual_seed(0))
    assert scores.previous.shape == scores.first.shape == control.previous.shape == (2, 4)
    # untrained, every head is near uniform: its scores are the control's, within a few hundredths
    torch.testing.assert_close(scores.previous, control.previous, rtol=0, atol=0.03)


@pytest.mark.parametrize("info", [CPU, MPS], ids=lambda i: i.name)
def test_the_plan_trains_the_cpu_configuration_off_cuda(info):
    plan = gpt_plan(info)
    assert plan.device == "cpu" and plan.threads == 1 and plan.config == CPU_CONFIG


def test_the_plan_on_a_gpu():
    plan = gpt_plan(T4)  # no bfloat16 tensor cores: float32
    assert plan.device == "cuda" and plan.config == {**GPU_CONFIG, "precision": "float32"} and plan.note is None
    assert gpt_plan(H100).config == {**GPU_CONFIG, "precision": "bfloat16"}
    full = DeviceInfo("cuda", "Tesla T4", T4.total_bytes, 100 * 2**20, (7, 5))
    assert gpt_plan(full).device == "cpu" and "Tesla T4" in gpt_plan(full).note


def test_fit_gpt_schedules_and_mixed_precision():
    """The default is the constant rate (no schedule at all, so the chapter's stored runs are unchanged); a warm-up
    or the cosine changes the run from its second step; bfloat16 autocast trains (here on the CPU)."""
    ids = torch.arange(400) % 7
    small = dict(d_model=8, n_layers=1, n_heads=2, length=8, batch=4, steps=12, lr=1e-2)
    base = fit_gpt(ids, 7, 0, **small)[1].loss
    assert fit_gpt(ids, 7, 0, **small, schedule="constant", warmup=0)[1].loss == base
    for options in (dict(warmup=3), dict(schedule="cosine"), dict(schedule="cosine", warmup=3)):
        loss = fit_gpt(ids, 7, 0, **small, **options)[1].loss
        assert loss[0] == base[0] and loss[1:] != base[1:], options  # the first batch's loss precedes any step
    model, history = fit_gpt(ids, 7, 0, **small, precision="bfloat16")
    assert model.tok_embed.weight.dtype == torch.float32 and history.loss[-1] < history.loss[0]
