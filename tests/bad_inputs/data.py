"""Bad inputs for data.py: sizes and seeds are integers in range; generators are torch.Generators."""

import numpy as np
import torch

from attention_course.data import (
    RecallBatch,
    Seq2SeqBatch,
    associative_recall,
    previous_token,
    previous_token_sampler,
    recall_sampler,
    reverse_digits,
)
from bad_inputs import case

RESULTS = (RecallBatch, Seq2SeqBatch)  # batches the generators return

CASES = [
    case(associative_recall, lambda: associative_recall(2, 11, 10, 5), ValueError, arg="n_pairs", says="[1, 10]",
         id="data.associative_recall-too-many-pairs"),
    case(associative_recall, lambda: associative_recall(2, 3, 10, 1), ValueError, arg="value_vocab",
         id="data.associative_recall-one-value"),
    case(associative_recall, lambda: associative_recall(-1, 3, 10, 5), ValueError, arg="batch",
         id="data.associative_recall-negative-batch"),
    case(associative_recall, lambda: associative_recall(2, 3.0, 10, 5), TypeError, arg="n_pairs",
         id="data.associative_recall-float"),
    case(associative_recall, lambda: associative_recall(2, 3, 10, 5, generator=0), TypeError, arg="generator",
         says="Generator", id="data.associative_recall-seed-as-generator"),
    case(recall_sampler, lambda: recall_sampler(0, 3, 10, 5, seed=0), ValueError, arg="batch",
         id="data.recall_sampler-empty"),
    case(recall_sampler, lambda: recall_sampler(4, 3, 10, 5, seed=-1), ValueError, arg="seed",
         id="data.recall_sampler-negative-seed"),
    case(recall_sampler, lambda: recall_sampler(4, 3, 10, 5, seed=1.5), TypeError, arg="seed",
         id="data.recall_sampler-float-seed"),
    case(previous_token, lambda: previous_token(2, 1, 7), ValueError, arg="length",
         id="data.previous_token-short"),
    case(previous_token, lambda: previous_token(2, 4, 0), ValueError, arg="vocab", id="data.previous_token-vocab"),
    case(previous_token, lambda: previous_token(2, np.float64(4), 7), TypeError, arg="length",
         id="data.previous_token-numpy-float"),
    case(previous_token_sampler, lambda: previous_token_sampler(4, 4, 7, seed="0"), TypeError, arg="seed",
         id="data.previous_token_sampler-string-seed"),
    case(previous_token_sampler, lambda: previous_token_sampler(4, 0, 7, seed=0), ValueError, arg="length",
         id="data.previous_token_sampler-length"),
    case(reverse_digits, lambda: reverse_digits(2, 5, 3), ValueError, arg="min_len", says="[1, 3]",
         id="data.reverse_digits-min-above-max"),
    case(reverse_digits, lambda: reverse_digits(2, 0, 3), ValueError, arg="min_len", id="data.reverse_digits-zero"),
    case(reverse_digits, lambda: reverse_digits(2, 1, 3, n_symbols=1), ValueError, arg="n_symbols",
         id="data.reverse_digits-symbols"),
    case(reverse_digits, lambda: reverse_digits(2, 1, 3, split="valid"), ValueError, arg="split", says="'test'",
         id="data.reverse_digits-split"),
    case(reverse_digits, lambda: reverse_digits(2, 1, 3, torch.manual_seed(0).get_state()), TypeError,
         arg="generator", id="data.reverse_digits-state-as-generator"),
]

CASES += [
    case(reverse_digits, lambda: reverse_digits(4, 1, 1, split="test"), ValueError, arg="split",
         says="none found", id="data.reverse_digits-empty-split"),
    case(recall_sampler, lambda: recall_sampler(4, 3, 10, 5, seed=2**70), ValueError, arg="seed",
         id="data.recall_sampler-huge-seed"),
]

# ----------------------------------------------------------------------------------------- the corpus (chapter 7)
from attention_course.data import Corpus, find_data_file, load_corpus, split_lines, text_sampler  # noqa: E402

_TINY = Corpus(torch.tensor([0, 1]), torch.tensor([1]), "ab")

CASES += [
    case(Corpus, lambda: _TINY.encode("abc"), ValueError, arg="text", says="'c'", id="data.Corpus.encode-unknown"),
    case(Corpus, lambda: _TINY.encode(b"ab"), TypeError, arg="text", id="data.Corpus.encode-bytes"),
    case(Corpus, lambda: _TINY.decode(torch.tensor([0, 5])), ValueError, arg="ids", id="data.Corpus.decode-range"),
    case(find_data_file, lambda: find_data_file("../etc/passwd"), ValueError, arg="name",
         id="data.find_data_file-folder"),
    case(find_data_file, lambda: find_data_file("no-such-corpus.txt"), ValueError, arg="name", says="not found",
         id="data.find_data_file-missing"),
    case(find_data_file, lambda: find_data_file(3), TypeError, arg="name", id="data.find_data_file-int"),
    case(split_lines, lambda: split_lines(["a\n"]), TypeError, arg="text", id="data.split_lines-list"),
    case(split_lines, lambda: split_lines("a\n", every=1), ValueError, arg="every", id="data.split_lines-every"),
    case(load_corpus, lambda: load_corpus(3), TypeError, arg="path", id="data.load_corpus-int"),
    case(load_corpus, lambda: load_corpus("/no/such/file.txt"), ValueError, arg="path", id="data.load_corpus-missing"),
    case(text_sampler, lambda: text_sampler(torch.arange(5.0), 2, 3, 0), TypeError, arg="ids",
         id="data.text_sampler-float"),
    case(text_sampler, lambda: text_sampler(torch.arange(4), 2, 4, 0), ValueError, arg="ids", says="longer",
         id="data.text_sampler-short"),
    case(text_sampler, lambda: text_sampler(torch.arange(9), 0, 4, 0), ValueError, arg="batch",
         id="data.text_sampler-batch"),
]
