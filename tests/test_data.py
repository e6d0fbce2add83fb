"""The synthetic task generators: shapes, ranges and that the targets are what the task says."""

import pytest
import torch

from attention_course.data import associative_recall, previous_token, previous_token_sampler, recall_sampler


def test_associative_recall_consistent():
    g = torch.Generator().manual_seed(0)
    b = associative_recall(64, 6, 10, 5, g)
    assert b.keys.shape == b.values.shape == (64, 6) and b.query.shape == b.target.shape == (64,)
    assert int(b.keys.max()) < 10 and int(b.values.max()) < 5
    for row in range(64):
        assert len(set(b.keys[row].tolist())) == 6  # distinct keys: the lookup is well defined
        assert b.keys[row, b.position[row]] == b.query[row] and b.values[row, b.position[row]] == b.target[row]
    again = associative_recall(64, 6, 10, 5, torch.Generator().manual_seed(0))
    assert torch.equal(again.keys, b.keys) and torch.equal(again.target, b.target)
    assert all(x is y for x, y in zip(b.inputs, (b.keys, b.values, b.query), strict=True))


def test_empty_batches():
    """batch = 0 is an empty batch of the right shapes (the bad sizes are in tests/bad_inputs/data.py)."""
    from attention_course.data import reverse_digits

    b = associative_recall(0, 3, 10, 5)
    assert b.keys.shape == (0, 3) and b.query.shape == (0,)
    tokens, targets = previous_token(0, 4, 7)
    assert tokens.shape == targets.shape == (0, 4)
    r = reverse_digits(0, 1, 3)
    assert r.src.shape == (0, 3) and r.tgt.shape == (0, 5)


def test_previous_token():
    tokens, targets = previous_token(8, 12, 7, torch.Generator().manual_seed(1))
    assert tokens.shape == targets.shape == (8, 12)
    assert torch.all(targets[:, 0] == -100) and torch.equal(targets[:, 1:], tokens[:, :-1])
    with pytest.raises(ValueError):
        previous_token(2, 1, 7)


def test_samplers_are_seeded_streams():
    a, b = recall_sampler(4, 3, 6, 5, seed=3), recall_sampler(4, 3, 6, 5, seed=3)
    g = torch.Generator().manual_seed(3)
    for step in range(2):
        (ka, va, qa), ta = a(step)
        (kb, vb, qb), tb = b(step)
        assert torch.equal(ka, kb) and torch.equal(ta, tb)
        direct = associative_recall(4, 3, 6, 5, g)  # the stream is associative_recall's, batch after batch
        assert all(torch.equal(x, y) for x, y in zip((ka, va, qa), direct.inputs, strict=True))
        assert torch.equal(ta, direct.target)
    (t1,), y1 = previous_token_sampler(4, 6, 5, seed=1)(0)
    (t2,), _ = previous_token_sampler(4, 6, 5, seed=2)(0)
    assert not torch.equal(t1, t2) and torch.equal(y1[:, 1:], t1[:, :-1])


# ------------------------------------------------------------------------------------------- chapter 5
def test_reverse_digits_targets_are_reversed_sources():
    from attention_course.data import BOS_ID, EOS_ID, FIRST_SYMBOL, PAD_ID, reverse_digits

    b = reverse_digits(200, 1, 7, torch.Generator().manual_seed(0))
    assert b.src.shape == (200, 7) and b.tgt.shape == (200, 9)
    assert int(b.lengths.min()) >= 1 and int(b.lengths.max()) <= 7 and len(set(b.lengths.tolist())) > 3
    for src, tgt, m in zip(b.src.tolist(), b.tgt.tolist(), b.lengths.tolist(), strict=True):
        assert all(FIRST_SYMBOL <= t < FIRST_SYMBOL + 10 for t in src[:m]) and src[m:] == [PAD_ID] * (7 - m)
        assert tgt == [BOS_ID, *src[:m][::-1], EOS_ID] + [PAD_ID] * (7 - m)
    again = reverse_digits(200, 1, 7, torch.Generator().manual_seed(0))
    assert torch.equal(again.src, b.src) and torch.equal(again.tgt, b.tgt)


def test_reverse_digits_splits_are_disjoint():
    from attention_course.data import reverse_digits

    train = reverse_digits(3000, 1, 3, torch.Generator().manual_seed(1), n_symbols=5)
    test = reverse_digits(3000, 1, 3, torch.Generator().manual_seed(1), n_symbols=5, split="test")
    seen, held = {tuple(r) for r in train.src.tolist()}, {tuple(r) for r in test.src.tolist()}
    assert seen and held and not seen & held
    assert 0.03 < len(held) / (len(seen) + len(held)) < 0.25  # about one string in ten is held out


# --------------------------------------------------------------------------------------------- chapter 7
def test_the_corpus_is_the_committed_file_split_deterministically():
    import hashlib

    from attention_course.data import find_data_file, load_corpus, split_lines

    path = find_data_file()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == "b5c4940bcfeee072c0935b5200d0f9d88a00a0199cb0961d16133458fcdfae5d"  # data/README.md's
    assert path.stat().st_size <= 5 * 2**20
    corpus = load_corpus()
    assert corpus.vocab_size == 63 and corpus.chars == "".join(sorted(set(corpus.chars)))
    text = path.read_text()
    assert corpus.train.numel() + corpus.validation.numel() == len(text)
    assert 0.09 < corpus.validation.numel() / len(text) < 0.11
    train, validation = split_lines(text)
    assert corpus.decode(corpus.train[:60]) == train[:60] and corpus.decode(corpus.validation[-60:]) == validation[-60:]
    assert train.startswith("In the beginning God created the heaven and the earth.\n")
    assert corpus.decode(corpus.encode("And God said, Let there be light")) == "And God said, Let there be light"


def test_find_data_file_downloads_once_into_the_cache_when_not_in_a_checkout(tmp_path, monkeypatch):
    """A reader with only the package (Colab) gets data/<name> from the course repository (a file:// stand-in with
    GitHub's /raw/main/ layout), cached under ~/.cache/attention_course/ and found there the next time."""
    import pytest

    from attention_course.data import find_data_file

    remote = tmp_path / "repo" / "raw" / "main" / "data"
    remote.mkdir(parents=True)
    (remote / "only_remote.txt").write_text("In the beginning\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(ValueError, match="repository="):
        find_data_file("only_remote.txt")
    path = find_data_file("only_remote.txt", repository=f"git+file://{tmp_path / 'repo'}.git")
    assert path == tmp_path / "home" / ".cache" / "attention_course" / "only_remote.txt"
    assert path.read_text() == "In the beginning\n"
    (remote / "only_remote.txt").unlink()
    assert find_data_file("only_remote.txt") == path  # the cached copy, no repository needed


def test_split_lines_blocks():
    from attention_course.data import split_lines

    text = "".join(f"{i}\n" for i in range(25))
    train, validation = split_lines(text, block=2, every=3)
    assert validation == "4\n5\n10\n11\n16\n17\n22\n23\n"
    assert sorted((train + validation).splitlines(), key=int) == [str(i) for i in range(25)]


def test_text_sampler_targets_are_the_next_characters():
    from attention_course.data import text_sampler

    ids = torch.arange(100)
    (tokens,), targets = text_sampler(ids, 4, 9, seed=0)(0)
    assert tokens.shape == targets.shape == (4, 9)
    assert torch.equal(targets, tokens + 1) and int(targets.max()) < 100
    (again,), _ = text_sampler(ids, 4, 9, seed=0)(0)
    assert torch.equal(again, tokens)
