"""Bad inputs for experiments/tokens.py: chapter 7's token corpora, code lengths and runs."""

from __future__ import annotations

import torch

from attention_course.experiments.tokens import (
    TokenCorpus,
    TokenRun,
    bpe_corpus,
    char_corpus,
    model_bits,
    ngram_bits,
    train_tokens,
)
from attention_course.gpt import GPT, GPTConfig
from attention_course.tokenizer import BPETokenizer

from . import case

RESULTS = (TokenRun,)

IDS = torch.arange(20) % 5
TINY = TokenCorpus("five ids", IDS, IDS, 5, 20)


def _model() -> GPT:
    return GPT(GPTConfig(5, 8, 1, 2, max_len=8))


CASES = [
    case(char_corpus, lambda: char_corpus(TINY), TypeError, arg="corpus", says="Corpus", id="tokens.char_corpus"),
    case(bpe_corpus, lambda: bpe_corpus("gpt2", "a b", "a"), TypeError, arg="tokenizer", id="tokens.bpe_corpus"),
    case(bpe_corpus, lambda: bpe_corpus(BPETokenizer(), b"a b", "a"), TypeError, arg="text",
         id="tokens.bpe_corpus-bytes"),
    case(ngram_bits, lambda: ngram_bits(IDS, IDS, 5, 3), ValueError, arg="order", id="tokens.ngram_bits-order"),
    case(ngram_bits, lambda: ngram_bits(IDS, IDS + 1, 5, 1), ValueError, arg="ids", says="[0, 5)",
         id="tokens.ngram_bits-range"),
    case(ngram_bits, lambda: ngram_bits(IDS, IDS[:0], 5, 1), ValueError, arg="ids", id="tokens.ngram_bits-empty"),
    case(ngram_bits, lambda: ngram_bits(IDS.view(4, 5), IDS, 5, 1), ValueError, arg="train",
         id="tokens.ngram_bits-2d"),
    case(model_bits, lambda: model_bits("gpt", IDS, IDS, length=4), TypeError, arg="model",
         id="tokens.model_bits-model"),
    case(model_bits, lambda: model_bits(_model(), IDS, IDS, length=9), ValueError, arg="length",
         id="tokens.model_bits-length"),
    case(model_bits, lambda: model_bits(_model(), IDS, IDS.float(), length=4), TypeError, arg="ids",
         id="tokens.model_bits-float"),
    case(train_tokens, lambda: train_tokens(IDS, 0), TypeError, arg="corpus", says="TokenCorpus",
         id="tokens.train_tokens-corpus"),
    case((train_tokens, TokenCorpus), lambda: train_tokens(TokenCorpus("ids", IDS, IDS, 4, 20), 0), ValueError,
         arg="corpus.train", says="[0, 4)", id="tokens.train_tokens-vocab"),
    case(train_tokens, lambda: train_tokens(TINY, -1), ValueError, arg="seed", id="tokens.train_tokens-seed"),
]
