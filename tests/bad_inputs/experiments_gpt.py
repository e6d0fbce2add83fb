"""Bad inputs for experiments/gpt.py: chapter 7's baselines, scores, training runs and plan."""

from __future__ import annotations

import torch

from attention_course.data import Corpus
from attention_course.experiments.gpt import (
    GPTPlan,
    GPTRun,
    HeadScores,
    bits_per_char,
    fit_gpt,
    gpt_plan,
    head_scores,
    map_scores,
    ngram_bits_per_char,
    ngram_log_probs,
    shuffle_maps,
    shuffled_scores,
    train_gpt,
    train_seeds,
    validation_windows,
)
from attention_course.gpt import GPT, GPTConfig

from . import case

RESULTS = (GPTPlan, GPTRun, HeadScores)

IDS = torch.arange(20) % 5
W = IDS[:12].view(3, 4)
TINY = Corpus(IDS, IDS, "abcde")


def _model() -> GPT:
    return GPT(GPTConfig(5, 8, 1, 2, max_len=8))


CASES = [
    case(validation_windows, lambda: validation_windows(IDS.float(), 3), TypeError, arg="ids",
         id="gpt.validation_windows-float"),
    case(validation_windows, lambda: validation_windows(IDS, 3, 9), ValueError, arg="ids", says="windows",
         id="gpt.validation_windows-too-many"),
    case(ngram_bits_per_char, lambda: ngram_bits_per_char(IDS, W, 5, 3), ValueError, arg="order",
         id="gpt.ngram_bits_per_char-order"),
    case(ngram_bits_per_char, lambda: ngram_bits_per_char(IDS, W, 4, 1), ValueError, arg="train", says="[0, 4)",
         id="gpt.ngram_bits_per_char-range"),
    case(ngram_bits_per_char, lambda: ngram_bits_per_char(IDS, W[:, :1], 5, 1), ValueError, arg="windows",
         id="gpt.ngram_bits_per_char-short-windows"),
    case(ngram_bits_per_char, lambda: ngram_bits_per_char(IDS[:1], W, 5, 2), ValueError, arg="train",
         id="gpt.ngram_bits_per_char-one-id"),
    case(ngram_log_probs, lambda: ngram_log_probs(IDS, 5, 3), ValueError, arg="order",
         id="gpt.ngram_log_probs-order"),
    case(ngram_log_probs, lambda: ngram_log_probs(IDS[:1], 5, 1), ValueError, arg="train",
         id="gpt.ngram_log_probs-one-id"),
    case(ngram_log_probs, lambda: ngram_log_probs(IDS.float(), 5, 1), TypeError, arg="train",
         id="gpt.ngram_log_probs-float"),
    case(bits_per_char, lambda: bits_per_char(torch.nn.Linear(2, 2), W), TypeError, arg="model",
         id="gpt.bits_per_char-model"),
    case(bits_per_char, lambda: bits_per_char(_model(), W.flatten()), ValueError, arg="windows",
         id="gpt.bits_per_char-1d"),
    case(train_gpt, lambda: train_gpt(IDS, 0), TypeError, arg="corpus", says="Corpus", id="gpt.train_gpt-corpus"),
    case(train_gpt, lambda: train_gpt(TINY, -1), ValueError, arg="seed", id="gpt.train_gpt-seed"),
    case(train_gpt, lambda: train_gpt(TINY, 0, d_model=6, n_heads=4), ValueError, arg="d_model",
         id="gpt.train_gpt-heads"),
    case(fit_gpt, lambda: fit_gpt(IDS.float(), 5, 0), TypeError, arg="ids", id="gpt.fit_gpt-float"),
    case(fit_gpt, lambda: fit_gpt(IDS, 4, 0), ValueError, arg="ids", says="[0, 4)", id="gpt.fit_gpt-range"),
    case(fit_gpt, lambda: fit_gpt(IDS, 5, 0, schedule="linear"), ValueError, arg="schedule", says="cosine",
         id="gpt.fit_gpt-schedule"),
    case(fit_gpt, lambda: fit_gpt(IDS, 5, 0, steps=10, warmup=10), ValueError, arg="warmup", id="gpt.fit_gpt-warmup"),
    case(fit_gpt, lambda: fit_gpt(IDS, 5, 0, precision="fp16"), ValueError, arg="precision", says="bfloat16",
         id="gpt.fit_gpt-precision"),
    case(fit_gpt, lambda: fit_gpt(IDS, 5, 0, length=20), ValueError, arg="ids", id="gpt.fit_gpt-short"),
    case(train_seeds, lambda: train_seeds(TINY, []), TypeError, arg="seeds", id="gpt.train_seeds-empty"),
    case(train_seeds, lambda: train_seeds(TINY, [1, 1]), ValueError, arg="seeds", says="distinct",
         id="gpt.train_seeds-repeated"),
    case(map_scores, lambda: map_scores(torch.zeros(1, 1, 3, 3)), TypeError, arg="maps", id="gpt.map_scores-tensor"),
    case(map_scores, lambda: map_scores([torch.zeros(1, 1, 1, 1)]), ValueError, arg="maps[0]",
         id="gpt.map_scores-one-position"),
    case(shuffle_maps, lambda: shuffle_maps([torch.zeros(1, 1, 3, 3)], generator=5), TypeError, arg="generator",
         id="gpt.shuffle_maps-generator"),
    case(shuffle_maps, lambda: shuffle_maps([]), TypeError, arg="maps", id="gpt.shuffle_maps-empty"),
    case(head_scores, lambda: head_scores("gpt", W), TypeError, arg="model", id="gpt.head_scores-model"),
    case(shuffled_scores, lambda: shuffled_scores(_model(), W.float()), TypeError, arg="tokens",
         id="gpt.shuffled_scores-tokens"),
    case(gpt_plan, lambda: gpt_plan("cuda"), TypeError, arg="info", id="gpt.gpt_plan-str"),
]
