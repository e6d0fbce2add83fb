"""The synthetic task generators: shapes, ranges and that the targets are what the task says."""

import pytest
import torch

from attention_course.data import associative_recall, previous_token


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


def test_associative_recall_errors():
    with pytest.raises(ValueError, match="n_pairs <= n_keys"):
        associative_recall(2, 11, 10, 5)
    with pytest.raises(ValueError, match="at least 2 values"):
        associative_recall(2, 3, 10, 1)


def test_previous_token():
    tokens, targets = previous_token(8, 12, 7, torch.Generator().manual_seed(1))
    assert tokens.shape == targets.shape == (8, 12)
    assert torch.all(targets[:, 0] == -100) and torch.equal(targets[:, 1:], tokens[:, :-1])
    with pytest.raises(ValueError):
        previous_token(2, 1, 7)
