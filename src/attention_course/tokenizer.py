"""A byte-level byte-pair-encoding (BPE) tokenizer, small enough to read in one sitting (chapter 7).

Text is UTF-8 bytes, so every string has a tokenization and nothing is ever "unknown": the first 256 ids are the
bytes themselves. Training (:meth:`BPETokenizer.train`) then repeats one step until the vocabulary is full: count
every pair of adjacent ids in the training text, and make the most frequent pair a new id. Encoding replays the
merges in the order they were learned; decoding joins the bytes back.

Two conventions, stated because they decide the merge list:

* **Chunks.** The text is first cut into chunks — a run of non-space characters with at most one space before it,
  or a run of whitespace (:data:`CHUNK`) — and no merge crosses a chunk's edge, so a token never spans two words
  (GPT-2 cuts finer, with a regular expression that also separates letters, digits and punctuation, and that
  leaves the last space of a run of whitespace to the word after it, where :data:`CHUNK` keeps the run whole). The
  cut is lossless: the chunks joined are the text.
* **Ties.** When several pairs are equally frequent, the smallest pair ``(a, b)`` (compared as a tuple of ids)
  is merged first, so the merge list is a function of the text alone.

Training counts pairs over the distinct chunks weighted by how often each occurs, and after each merge recounts
only the chunks that held the merged pair: that is what makes it fast enough for a few megabytes of text in pure
Python (seconds for the chapter's corpus).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from ._checks import check_int, describe

__all__ = ["CHUNK", "BPETokenizer"]

#: How text is cut before merging: a run of non-space characters with at most one space before it, or a run of
#: whitespace. Every character of a string falls in exactly one chunk.
CHUNK = re.compile(r" ?\S+|\s+")


def merge_pair(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    """``ids`` with every non-overlapping occurrence of ``pair`` (left to right) replaced by ``new``: one merge of
    training and of encoding (and the reference of chapter 7's exercise 7.3)."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _check_text(name: str, text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a string, got {describe(text)}")
    return text


class BPETokenizer:
    """A byte-level BPE tokenizer: ids 0-255 are bytes, id ``256 + k`` is the ``k``-th merge.

    Build one with :meth:`train`, or from a merge list (``merges[k] = (a, b)``: id ``256 + k`` stands for id ``a``
    followed by id ``b``, each a byte or an earlier merge).

    Raises:
        TypeError: ``merges`` not a sequence of pairs of integers. ValueError: a pair naming an id that does not
            exist yet when it is made.
    """

    def __init__(self, merges: Sequence[tuple[int, int]] = ()) -> None:
        if isinstance(merges, (str, bytes)) or not isinstance(merges, Sequence):
            raise TypeError(f"merges must be a sequence of (id, id) pairs, got {describe(merges)}")
        self.merges: list[tuple[int, int]] = []
        self._bytes: list[bytes] = [bytes([b]) for b in range(256)]
        for k, pair in enumerate(merges):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"merges[{k}] must be a pair of ids, got {describe(pair)}")
            a, b = (check_int(f"merges[{k}]", x, low=0, high=255 + k) for x in pair)
            self.merges.append((a, b))
            self._bytes.append(self._bytes[a] + self._bytes[b])
        self._rank = {pair: k for k, pair in enumerate(self.merges)}
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """256 byte ids plus one per merge."""
        return 256 + len(self.merges)

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text`` (fewer if no pair is left to merge).

        Each step merges the most frequent pair of adjacent ids within chunks (:data:`CHUNK`), ties broken by the
        smallest pair.

        Raises:
            TypeError: ``text`` not a string, ``vocab_size`` not an integer. ValueError: ``vocab_size < 256``.
        """
        text = _check_text("text", text)
        vocab_size = check_int("vocab_size", vocab_size, low=256)
        words = [(list(chunk.encode("utf-8")), n) for chunk, n in Counter(CHUNK.findall(text)).items()]
        pairs: Counter[tuple[int, int]] = Counter()  # every adjacent pair, weighted by its chunk's count
        holders: defaultdict[tuple[int, int], set[int]] = defaultdict(set)  # the chunks each pair occurs in
        for w, (ids, n) in enumerate(words):
            for pair in zip(ids, ids[1:], strict=False):
                pairs[pair] += n
                holders[pair].add(w)
        merges: list[tuple[int, int]] = []
        for new in range(256, vocab_size):
            if not pairs:
                break
            best = min(pairs, key=lambda p: (-pairs[p], p))  # most frequent, then the smallest pair
            merges.append(best)
            for w in holders.pop(best):  # only the chunks holding the pair change: recount their pairs
                ids, n = words[w]
                merged = merge_pair(ids, best, new)
                for pair in zip(ids, ids[1:], strict=False):
                    pairs[pair] -= n
                    if not pairs[pair]:
                        del pairs[pair]
                for pair in zip(merged, merged[1:], strict=False):
                    pairs[pair] += n
                    holders[pair].add(w)
                words[w] = (merged, n)
        return cls(merges)

    def _encode_chunk(self, chunk: str) -> list[int]:
        if chunk not in self._cache:
            ids = list(chunk.encode("utf-8"))
            while len(ids) > 1:  # apply the earliest-learned merge present, as training did
                pair = min(zip(ids, ids[1:], strict=False), key=lambda p: self._rank.get(p, len(self._rank)))
                if pair not in self._rank:
                    break
                ids = merge_pair(ids, pair, 256 + self._rank[pair])
            self._cache[chunk] = ids
        return self._cache[chunk]

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: its UTF-8 bytes, chunk by chunk, with the merges applied in the order learned."""
        text = _check_text("text", text)
        return [i for chunk in CHUNK.findall(text) for i in self._encode_chunk(chunk)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``. A sequence that cuts a multi-byte character (any ids can be asked for, e.g. a
        model's samples) decodes the broken bytes as U+FFFD, as ``bytes.decode(errors="replace")``.

        Raises:
            TypeError: ``ids`` not a sequence (or 1-D tensor) of integers. ValueError: an id outside
            ``[0, vocab_size)``.
        """
        if hasattr(ids, "tolist") and getattr(ids, "ndim", None) == 1:  # a 1-D tensor or array
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise TypeError(f"ids must be a sequence of token ids, got {describe(ids)}")
        top = self.vocab_size - 1
        return b"".join(self._bytes[check_int(f"ids[{k}]", i, low=0, high=top)]
                        for k, i in enumerate(ids)).decode("utf-8", errors="replace")

    def digest(self) -> str:
        """SHA-256 of the merge list (as JSON): the same on every machine, since training is integer counting with
        a stated tie-break — two tokenizers with equal digests encode every text alike."""
        return hashlib.sha256(json.dumps(self.merges).encode()).hexdigest()

    def token_bytes(self, token: int) -> bytes:
        """The bytes one id stands for."""
        return self._bytes[check_int("token", token, low=0, high=self.vocab_size - 1)]
