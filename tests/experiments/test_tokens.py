"""experiments/tokens.py (chapter 7): code lengths that every tokenization pays in full, n-gram code lengths
against a direct count, and a short run on BPE tokens."""

from __future__ import annotations

import math

import pytest
import torch

from attention_course.data import Corpus
from attention_course.experiments.tokens import (
    TokenCorpus,
    bpe_corpus,
    char_corpus,
    model_bits,
    ngram_bits,
    train_tokens,
)
from attention_course.gpt import GPT, GPTConfig
from attention_course.tokenizer import BPETokenizer

TEXT = "the cat sat on the mat. the hat sat on the cat.\n" * 40
HELD = "the hat sat on the cat.\nthe cat sat on the mat. " * 3  # the same sentences, cut elsewhere


def test_ngram_bits_are_the_direct_sum_of_log_probabilities():
    train, ids = torch.tensor([0, 1, 1, 2, 0, 1]), torch.tensor([1, 0, 2])
    p1 = [(2 + 1) / 9, (3 + 1) / 9, (1 + 1) / 9]  # (count + 1) / (6 + 3)
    assert ngram_bits(train, ids, 3, 1) == pytest.approx(-sum(math.log2(p1[i]) for i in (1, 0, 2)), rel=1e-12)
    # bigram: pairs 01, 11, 12, 20, 01: two start with 1, none is 10 -> p(0|1) = (0 + 1)/(2 + 3); two start
    # with 0, none is 02 -> p(2|0) = (0 + 1)/(2 + 3); the first id costs its unigram bits
    expected = -math.log2(p1[1]) - 2 * math.log2(1 / 5)
    assert ngram_bits(train, ids, 3, 2) == pytest.approx(expected, rel=1e-12)


def test_model_bits_pays_for_every_id_once():
    """A model whose logits are all equal codes each windowed id with log2(V) bits, and each window's first id with
    the unigram's: the total is exactly that, whatever the window length (a partial last window included)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(5, 8, 1, 2, max_len=7))
    with torch.no_grad():
        model.tok_embed.weight.zero_()  # tied to the output layer: every logit is 0
    train, ids = torch.arange(20) % 5, torch.arange(23) % 5
    uniform_first = math.log2(5)  # train holds every id 4 times: its add-one unigram is uniform too
    for length in (1, 4, 7):
        bits = model_bits(model, train, ids, length=length)
        assert bits == pytest.approx(23 * uniform_first, rel=1e-6), length
    assert model.training  # the mode is restored


def test_token_corpora_count_the_characters_their_validation_ids_spell():
    corpus = Corpus(torch.tensor([0, 1, 2, 1]), torch.tensor([2, 1, 0]), "abc")
    chars = char_corpus(corpus)
    assert chars.characters == 3 and chars.vocab_size == 3 and chars.name == "characters"
    tok = BPETokenizer.train(TEXT, 260)
    bpe = bpe_corpus(tok, TEXT, HELD)
    assert isinstance(bpe, TokenCorpus) and bpe.characters == len(HELD)
    assert bpe.vocab_size == 260 and bpe.name == "BPE, 260 ids"
    assert tok.decode(bpe.validation.tolist()) == HELD
    assert bpe.validation.numel() < 0.7 * len(HELD)  # four merges already shorten the text


def test_a_short_run_on_tokens_learns_the_text():
    tok = BPETokenizer.train(TEXT, 300)
    bpe = bpe_corpus(tok, TEXT, HELD)
    run = train_tokens(bpe, 0, d_model=16, n_layers=1, n_heads=2, length=8, batch=8, steps=60, lr=1e-2)
    bigram = ngram_bits(bpe.train, bpe.validation, bpe.vocab_size, 2) / bpe.characters
    assert run.bits_per_char < 0.7 * bigram  # the sentences are learned beyond which token follows which
    again = train_tokens(bpe, 0, d_model=16, n_layers=1, n_heads=2, length=8, batch=8, steps=60, lr=1e-2)
    assert again.bits_per_char == run.bits_per_char  # one seed, one machine, one thread: the same run
    assert not run.model.training
