"""tokenizer.py (chapter 7): byte-level BPE — a lossless round trip, the exact merges of a toy corpus under the
stated tie-break, and what the merges buy on the course's corpus."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_course.tokenizer import CHUNK, BPETokenizer, merge_pair

CORPUS = Path(__file__).resolve().parents[1] / "data" / "kjv.txt"
SMALL = BPETokenizer.train("the cat sat on the mat; the hat — a café, naïve 東京 🙂\n\n" * 3, 300)


def test_the_toy_corpus_gives_the_stated_merges():
    """aaabdaaabac: aa (4) first; then (97, 98) = ab and (256, 97) = [aa]a tie at 2 and the smaller pair, ab,
    wins; then [aa][ab] (2); then every pair is seen once and the smallest, (97, 99) = ac, is merged."""
    tok = BPETokenizer.train("aaabdaaabac", 260)
    assert tok.merges == [(97, 97), (97, 98), (256, 257), (97, 99)]
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 259]
    assert tok.token_bytes(258) == b"aaab" and tok.vocab_size == 260


def test_training_stops_when_no_pair_is_left():
    tok = BPETokenizer.train("ab ab", 1000)  # chunks "ab", " ab": pairs ab (2), then " ab"
    assert tok.merges == [(97, 98), (32, 256)] and tok.encode("ab ab") == [256, 257]


def test_ties_do_not_depend_on_the_order_of_the_text():
    """The same chunks in another order give the same merges: every pair is seen once, the smallest wins."""
    a, b = BPETokenizer.train(" ab cd", 260), BPETokenizer.train(" cd ab", 260)
    assert a.merges == b.merges
    assert a.merges[0] == (32, 97)  # " a": the smallest of (32, 97), (97, 98), (32, 99), (99, 100)


def _recount_every_step(text: str, vocab_size: int) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """The definition of training, without the incremental bookkeeping: recount every pair after every merge.
    Returns the merges and the text's chunks as training left them."""
    words = [list(chunk.encode("utf-8")) for chunk in CHUNK.findall(text)]
    merges = []
    for new in range(256, vocab_size):
        pairs = Counter(p for ids in words for p in zip(ids, ids[1:], strict=False))
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        words = [merge_pair(ids, best, new) for ids in words]
    return merges, words


@given(st.text(alphabet="ab c\n", max_size=60) | st.text(max_size=30), st.integers(256, 300))
@settings(max_examples=200, deadline=None)
def test_incremental_training_equals_recounting_every_step(text, vocab_size):
    merges, words = _recount_every_step(text, vocab_size)
    tok = BPETokenizer.train(text, vocab_size)
    assert tok.merges == merges
    assert tok.encode(text) == [i for ids in words for i in ids]  # encoding replays training


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_round_trip_on_any_unicode(text):
    assert "".join(CHUNK.findall(text)) == text  # the cut is lossless
    ids = SMALL.encode(text)
    assert all(0 <= i < SMALL.vocab_size for i in ids)
    assert SMALL.decode(ids) == text
    assert SMALL.decode(torch.tensor(ids, dtype=torch.long)) == text if ids else True


def test_merges_compress_and_cut_characters_only_at_the_edges():
    ids = SMALL.encode("the cat sat on the mat")
    assert len(ids) < len("the cat sat on the mat") / 2  # learned words
    assert SMALL.decode(list(SMALL.encode("東")[:1])) == "\ufffd"  # a cut character is replaced, not raised


def test_a_merge_list_round_trips_through_the_constructor():
    again = BPETokenizer(SMALL.merges)
    text = "the naïve cat"
    assert again.encode(text) == SMALL.encode(text) and again.vocab_size == SMALL.vocab_size
    assert again.digest() == SMALL.digest() != BPETokenizer(SMALL.merges[:-1]).digest()


@pytest.mark.skipif(not CORPUS.exists(), reason="the corpus is in data/ of the checkout")
def test_on_the_corpus_merges_shorten_the_sequence():
    text = CORPUS.read_text(encoding="utf-8")[:200_000]
    tok = BPETokenizer.train(text, 512)
    assert tok.vocab_size == 512
    held = CORPUS.read_text(encoding="utf-8")[-20_000:]
    ids = tok.encode(held)
    assert tok.decode(ids) == held
    assert len(ids) / len(held.encode("utf-8")) < 0.5  # fewer than one token per two bytes
