"""Synthetic tasks generated on the fly, no downloads (chapters 2–5), and chapter 7's text corpus (committed in data/).

A function that draws one batch takes a ``torch.Generator``; a sampler, which owns a stream of batches for
:func:`attention_course.train.fit`, takes a ``seed: int`` and makes its own generator. Both return plain integer
tensors, so a notebook's experiment is reproducible. Keys and values are ids in separate vocabularies (a model
embeds them with separate tables), so a model cannot confuse them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import torch

from ._checks import check_choice, check_generator, check_int, check_tensor, check_token_ids, describe
from ._files import course_folders, download_course_file, find_course_file

if TYPE_CHECKING:
    from .train import Sampler

__all__ = ["RecallBatch", "associative_recall", "recall_sampler", "previous_token", "previous_token_sampler"]


class RecallBatch(NamedTuple):
    """One batch of the associative-recall task.

    Attributes:
        keys: ``(batch, n_pairs)`` key ids in ``[0, key_vocab)``, distinct within a row.
        values: ``(batch, n_pairs)`` value ids in ``[0, value_vocab)``.
        query: ``(batch,)`` one of the row's keys.
        target: ``(batch,)`` the value stored under ``query``.
        position: ``(batch,)`` where ``query`` sits among the row's keys.
    """

    keys: torch.Tensor
    values: torch.Tensor
    query: torch.Tensor
    target: torch.Tensor
    position: torch.Tensor

    @property
    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(keys, values, query)``: what a recall model reads, so ``(batch.inputs, batch.target)`` is the
        ``(inputs, targets)`` pair that :func:`attention_course.train.fit` and ``evaluate`` take."""
        return self.keys, self.values, self.query


def associative_recall(
    batch: int, n_pairs: int, key_vocab: int, value_vocab: int, generator: torch.Generator | None = None
) -> RecallBatch:
    """A soft-dictionary task: ``n_pairs`` (key, value) pairs and a query key; the answer is the query's value.

    This is chapter 1's lookup as a learning problem. A model sees each pair at one position and the query
    separately, so one attention layer can solve it: the query must *address* the right key (Q·K) and *copy*
    its value (V).

    Args:
        batch: number of sequences.
        n_pairs: pairs per sequence (``≤ key_vocab``: keys are distinct within a sequence).
        key_vocab: how many different keys there are.
        value_vocab: how many different values there are.
        generator: the random source.

    Returns:
        A :class:`RecallBatch`. At the edges: ``batch = 0`` gives empty tensors.

    Raises:
        TypeError: sizes not integers, ``generator`` not a ``torch.Generator``.
        ValueError: ``batch < 0``, ``n_pairs`` outside ``[1, key_vocab]``, ``value_vocab < 2``.
    """
    _check_recall(batch, n_pairs, key_vocab, value_vocab)
    check_generator("generator", generator)
    keys = torch.rand(batch, key_vocab, generator=generator).argsort(dim=1)[:, :n_pairs]
    values = torch.randint(0, value_vocab, (batch, n_pairs), generator=generator)
    position = torch.randint(0, n_pairs, (batch,), generator=generator)
    rows = torch.arange(batch)
    return RecallBatch(keys, values, keys[rows, position], values[rows, position], position)


def _check_recall(batch: object, n_pairs: object, key_vocab: object, value_vocab: object, min_batch: int = 0) -> None:
    check_int("batch", batch, low=min_batch)
    key_vocab = check_int("key_vocab", key_vocab)
    check_int("n_pairs", n_pairs, low=1, high=key_vocab)  # keys are distinct within a sequence
    check_int("value_vocab", value_vocab, low=2)


def _new_generator(seed: object) -> torch.Generator:
    return torch.Generator().manual_seed(check_int("seed", seed, low=0, high=2**64 - 1))


def recall_sampler(batch: int, n_pairs: int, key_vocab: int, value_vocab: int, seed: int) -> Sampler:
    """A seeded stream of :func:`associative_recall` batches for :func:`attention_course.train.fit` (chapters 2–3):
    ``step -> ((keys, values, query), target)``.

    The batches are drawn in order from one generator seeded with ``seed`` (``step`` is not used), so two samplers
    with the same arguments give the same stream. The arguments are checked here, once (``batch ≥ 1``).
    """
    _check_recall(batch, n_pairs, key_vocab, value_vocab, min_batch=1)
    g = _new_generator(seed)

    def sample(step: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        b = associative_recall(batch, n_pairs, key_vocab, value_vocab, g)
        return b.inputs, b.target

    return sample


def previous_token(
    batch: int, length: int, vocab: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy the previous token: the target at position ``t`` is the token at ``t - 1``.

    A task that needs a *directed* look-up (position ``t`` must find ``t - 1``, not ``t + 1`` and not itself),
    used in chapter 3 to test tied query/key weights.

    Returns:
        ``(tokens, targets)``, both ``(batch, length)``; ``targets[:, 0] = -100`` (no previous token; ignored by
        ``torch.nn.functional.cross_entropy``). At the edges: ``batch = 0`` gives empty tensors.

    Raises:
        TypeError: sizes not integers, ``generator`` not a ``torch.Generator``.
        ValueError: ``batch < 0``, ``length < 2``, ``vocab < 1``.
    """
    _check_previous(batch, length, vocab)
    check_generator("generator", generator)
    tokens = torch.randint(0, vocab, (batch, length), generator=generator)
    targets = torch.full_like(tokens, -100)
    targets[:, 1:] = tokens[:, :-1]
    return tokens, targets


def _check_previous(batch: object, length: object, vocab: object, min_batch: int = 0) -> None:
    check_int("batch", batch, low=min_batch)
    check_int("length", length, low=2)
    check_int("vocab", vocab)


def previous_token_sampler(batch: int, length: int, vocab: int, seed: int) -> Sampler:
    """A seeded stream of :func:`previous_token` batches for :func:`attention_course.train.fit` (chapter 3):
    ``step -> ((tokens,), targets)``, drawn in order from one generator seeded with ``seed`` (``batch ≥ 1``)."""
    _check_previous(batch, length, vocab, min_batch=1)
    g = _new_generator(seed)

    def sample(step: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        tokens, targets = previous_token(batch, length, vocab, g)
        return (tokens,), targets

    return sample


# --------------------------------------------------------------------------------------------- chapter 5
#: Special token ids of the sequence-to-sequence tasks; symbols (digits) start at ``FIRST_SYMBOL``.
PAD_ID, BOS_ID, EOS_ID, FIRST_SYMBOL = 0, 1, 2, 3


class Seq2SeqBatch(NamedTuple):
    """One batch of a sequence-to-sequence task (chapter 5).

    Attributes:
        src: ``(batch, n_src)`` source ids, padded on the right with ``PAD_ID``.
        tgt: ``(batch, n_tgt)`` target ids ``BOS y_1 … y_m EOS``, padded with ``PAD_ID``: a model reads
            ``tgt[:, :-1]`` and is trained to predict ``tgt[:, 1:]`` (ignoring ``PAD_ID``).
        lengths: ``(batch,)`` source lengths ``m``.
    """

    src: torch.Tensor
    tgt: torch.Tensor
    lengths: torch.Tensor


def _is_held_out(digits: torch.Tensor, lengths: torch.Tensor, n_symbols: int) -> torch.Tensor:
    """A fixed rule splitting every possible string into train (9/10) and held-out (1/10): a hash of the string
    (its digits in base ``n_symbols`` plus its length, mod 10) equal to 0 marks it held out."""
    pos = torch.arange(digits.shape[1])
    real = pos[None, :] < lengths[:, None]
    weights = torch.tensor([pow(n_symbols + 3, int(i), 1_000_003) for i in pos], dtype=torch.long)
    code = ((digits * real) * weights).sum(dim=1) + 7 * lengths
    return (code * 2_654_435_761 % 1_000_003) % 10 == 0


def reverse_digits(
    batch: int,
    min_len: int,
    max_len: int,
    generator: torch.Generator | None = None,
    *,
    n_symbols: int = 10,
    split: str = "train",
) -> Seq2SeqBatch:
    """Reverse a string of digits: source ``d_1 … d_m``, target ``BOS d_m … d_1 EOS`` (chapter 5).

    Lengths ``m`` are uniform in ``[min_len, max_len]``. Every string belongs to exactly one ``split`` by a
    fixed hash (about 1 in 10 is ``"test"``), so a model trained on ``"train"`` batches is evaluated on strings
    it has never seen. Ids: ``PAD_ID = 0``, ``BOS_ID = 1``, ``EOS_ID = 2``, symbols ``3 … 3 + n_symbols − 1``
    (vocabulary size ``n_symbols + 3``). To solve it the decoder's output position ``t`` must read source
    position ``m + 1 − t``: in cross-attention, an anti-diagonal.

    Returns:
        A :class:`Seq2SeqBatch` with ``src`` ``(batch, max_len)`` and ``tgt`` ``(batch, max_len + 2)``.
        At the edges: ``batch = 0`` gives empty tensors.

    Raises:
        TypeError: sizes not integers, ``generator`` not a ``torch.Generator``.
        ValueError: ``batch < 0``, ``1 <= min_len <= max_len`` violated, ``n_symbols < 2`` or an unknown split.
    """
    check_int("batch", batch, low=0)
    max_len = check_int("max_len", max_len)
    check_int("min_len", min_len, low=1, high=max_len)
    check_int("n_symbols", n_symbols, low=2)
    check_choice("split", split, ("train", "test"))
    check_generator("generator", generator)
    want_test = split == "test"
    digits = torch.empty(batch, max_len, dtype=torch.long)
    lengths = torch.empty(batch, dtype=torch.long)
    todo = torch.ones(batch, dtype=torch.bool)
    barren = 0  # consecutive rounds that found no string of the split
    while bool(todo.any()):  # draw, keep the rows of the requested split, redraw the rest
        if barren == 1000:  # about 1 string in 10 is held out: 1000 empty rounds mean the split is (nearly) empty
            raise ValueError(f"split must hold strings for these lengths, got split={split!r} with none found in 1000 "
                             f"draws for min_len={min_len}, max_len={max_len}, n_symbols={n_symbols}; widen them")
        k = int(todo.sum())
        d = torch.randint(0, n_symbols, (k, max_len), generator=generator)
        n = torch.randint(min_len, max_len + 1, (k,), generator=generator)
        ok = _is_held_out(d, n, n_symbols) == want_test
        barren = 0 if bool(ok.any()) else barren + 1
        idx = todo.nonzero().squeeze(1)[ok]
        digits[idx], lengths[idx] = d[ok], n[ok]
        todo[idx] = False
    pos = torch.arange(max_len)
    real = pos[None, :] < lengths[:, None]
    src = torch.where(real, digits + FIRST_SYMBOL, PAD_ID)
    rev_idx = (lengths[:, None] - 1 - pos[None, :]).clamp_min(0)
    rev = torch.where(real, src.gather(1, rev_idx), PAD_ID)
    tgt = torch.full((batch, max_len + 2), PAD_ID, dtype=torch.long)
    tgt[:, 0] = BOS_ID
    tgt[:, 1:-1] = rev
    tgt[torch.arange(batch), lengths + 1] = EOS_ID
    return Seq2SeqBatch(src, tgt, lengths)


__all__ += ["BOS_ID", "EOS_ID", "FIRST_SYMBOL", "PAD_ID", "Seq2SeqBatch", "reverse_digits"]


# --------------------------------------------------------------------------------------------- chapter 7
#: The corpus chapter 7 trains on (``data/kjv.txt``; provenance and licence in ``data/README.md``).
CORPUS_FILE = "kjv.txt"


@dataclass(frozen=True)
class Corpus:
    """A text as character-level token ids, split into training and validation text (chapter 7).

    Attributes:
        train, validation: int64 ids ``(n_train,)``, ``(n_validation,)``: the verses of each split joined in order,
            each ending with its newline.
        chars: the vocabulary, token id ``i`` is ``chars[i]`` (the text's distinct characters, sorted).
    """

    train: torch.Tensor
    validation: torch.Tensor
    chars: str

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """``text`` → int64 ids ``(len(text),)``. ValueError for a character outside the vocabulary."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {describe(text)}")
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - index.keys())
        if unknown:
            raise ValueError(f"text must use only the corpus's {len(self.chars)} characters, got {unknown[:5]!r}")
        return torch.tensor([index[c] for c in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor) -> str:
        """Ids ``(n,)`` → the text they spell."""
        t = check_token_ids("ids", ids, len(self.chars), ndim=1, layout="(n,)")
        return "".join(self.chars[i] for i in t.tolist())


def find_data_file(name: str = CORPUS_FILE, repository: str | None = None) -> Path:
    """The path of ``data/<name>`` in the checkout the package runs from, else under the current folder or its
    parent (a notebook in ``book/``). A reader with only the installed package (Colab) passes ``repository`` (the
    course's URL, a setup cell's ``REPO``): the file is then downloaded once from
    ``<repository>/raw/main/data/<name>`` into ``~/.cache/attention_course/``.

    Raises:
        TypeError: ``name`` or ``repository`` not a string.
        ValueError: ``name`` not a plain file name, or no such file and no ``repository`` to fetch it from.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a file name such as {CORPUS_FILE!r}, got {describe(name)}")
    if not name or Path(name).name != name:
        raise ValueError(f"name must be a plain file name in data/, such as {CORPUS_FILE!r}, got {name!r}")
    if repository is not None and not isinstance(repository, str):
        raise TypeError(f"repository must be the course's URL (a string), got {describe(repository)}")
    relative = f"data/{name}"
    cached = Path.home() / ".cache" / "attention_course" / name
    path = find_course_file(relative) or (cached if cached.is_file() else None)
    if path is not None:
        return path
    if repository is None:
        looked = ", ".join(str(f / "data") for f in course_folders())
        raise ValueError(f"name must name a file in the course's data/ folder, got {name!r}, not found in {looked}; "
                         "pass repository= to download it")
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(download_course_file(repository, relative, timeout=120))
    return cached


def split_lines(text: str, block: int = 50, every: int = 10) -> tuple[str, str]:
    """``(train, validation)``: ``text``'s lines cut into blocks of ``block`` consecutive lines; block ``j`` is
    validation when ``j % every == every − 1`` (every ``every``-th block), so both splits span the whole text.
    Deterministic; each line keeps its newline."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {describe(text)}")
    block, every = check_int("block", block), check_int("every", every, low=2)
    lines = text.splitlines(keepends=True)
    parts: tuple[list[str], list[str]] = ([], [])
    for j in range(0, len(lines), block):
        parts[(j // block) % every == every - 1].extend(lines[j : j + block])
    return "".join(parts[0]), "".join(parts[1])


def load_corpus(path: str | os.PathLike | None = None, *, block: int = 50, every: int = 10,
                repository: str | None = None) -> Corpus:
    """The text at ``path`` (default: ``data/kjv.txt``, the King James Bible, public domain; found, or downloaded
    from ``repository``, by :func:`find_data_file`) as a :class:`Corpus`: characters as tokens, split by
    :func:`split_lines` (``block``, ``every``).

    Raises:
        TypeError: ``path`` not a path. ValueError: no such file; a text with no validation block.
    """
    if path is None:
        path = find_data_file(repository=repository)
    elif not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, got {describe(path)}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must name a text file, got {str(path)!r} (no such file)")
    text = path.read_text(encoding="utf-8")
    train, validation = split_lines(text, block, every)
    if not validation:
        raise ValueError(f"path must hold a text of more than {block * (every - 1)} lines (block={block}, every="
                         f"{every}) to leave a validation split, got {len(text.splitlines())} lines")
    chars = "".join(sorted(set(text)))
    index = torch.full((max(map(ord, chars)) + 1,), -1, dtype=torch.long)
    index[torch.tensor([ord(c) for c in chars])] = torch.arange(len(chars))

    def ids(s: str) -> torch.Tensor:
        return index[torch.frombuffer(bytearray(s.encode("utf-32-le")), dtype=torch.int32).long()]

    return Corpus(ids(train), ids(validation), chars)


def text_sampler(ids: torch.Tensor, batch: int, length: int, seed: int) -> Sampler:
    """A seeded stream of language-modelling batches for :func:`attention_course.train.fit` (chapter 7):
    ``step -> ((tokens,), targets)``, ``batch`` windows of ``length`` ids at random offsets of ``ids`` ``(n,)``;
    the targets are the same windows shifted by one (``targets[:, t] = ids[offset + t + 1]``).

    Raises:
        TypeError: ``ids`` not an integer tensor. ValueError: ``ids`` not 1-D or not longer than ``length``.
    """
    t = check_tensor("ids", ids, kind="integer", ndim=1, layout="(n,)")
    batch, length = check_int("batch", batch), check_int("length", length)
    if t.shape[0] <= length:
        raise ValueError(f"ids must be longer than length={length} (windows of length + 1), got {t.shape[0]} ids")
    g = _new_generator(seed)
    offsets = torch.arange(length + 1)

    def sample(step: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        start = torch.randint(0, t.shape[0] - length, (batch, 1), generator=g)
        window = t[start + offsets]
        return (window[:, :-1],), window[:, 1:]

    return sample


__all__ += ["CORPUS_FILE", "Corpus", "find_data_file", "load_corpus", "split_lines", "text_sampler"]
