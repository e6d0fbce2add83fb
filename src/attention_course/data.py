"""Synthetic tasks generated on the fly, no downloads (chapters 2–4).

Every generator takes a ``torch.Generator`` so a notebook's experiment is reproducible, and returns plain
integer tensors. Token ids for keys and values are drawn from disjoint ranges so a model cannot confuse them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["RecallBatch", "associative_recall", "previous_token"]


class RecallBatch(NamedTuple):
    """One batch of the associative-recall task.

    Attributes:
        keys: ``(batch, n_pairs)`` key ids in ``[0, n_keys)``, distinct within a row.
        values: ``(batch, n_pairs)`` value ids in ``[0, n_values)``.
        query: ``(batch,)`` one of the row's keys.
        target: ``(batch,)`` the value stored under ``query``.
        position: ``(batch,)`` where ``query`` sits among the row's keys.
    """

    keys: torch.Tensor
    values: torch.Tensor
    query: torch.Tensor
    target: torch.Tensor
    position: torch.Tensor


def associative_recall(
    batch: int, n_pairs: int, n_keys: int, n_values: int, generator: torch.Generator | None = None
) -> RecallBatch:
    """A soft-dictionary task: ``n_pairs`` (key, value) pairs and a query key; the answer is the query's value.

    This is chapter 1's lookup as a learning problem. A model sees each pair at one position and the query
    separately, so one attention layer can solve it: the query must *address* the right key (Q·K) and *copy*
    its value (V).

    Args:
        batch: number of sequences.
        n_pairs: pairs per sequence (``≤ n_keys``: keys are distinct within a sequence).
        n_keys: size of the key vocabulary.
        n_values: size of the value vocabulary.
        generator: the random source.

    Returns:
        A :class:`RecallBatch`.
    """
    if not 1 <= n_pairs <= n_keys:
        raise ValueError(f"need 1 <= n_pairs <= n_keys (keys are distinct), got n_pairs={n_pairs}, n_keys={n_keys}")
    if n_values < 2:
        raise ValueError(f"need at least 2 values, got n_values={n_values}")
    keys = torch.rand(batch, n_keys, generator=generator).argsort(dim=1)[:, :n_pairs]
    values = torch.randint(0, n_values, (batch, n_pairs), generator=generator)
    position = torch.randint(0, n_pairs, (batch,), generator=generator)
    rows = torch.arange(batch)
    return RecallBatch(keys, values, keys[rows, position], values[rows, position], position)


def previous_token(
    batch: int, length: int, vocab: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy the previous token: the target at position ``t`` is the token at ``t - 1``.

    A task that needs a *directed* look-up (position ``t`` must find ``t - 1``, not ``t + 1`` and not itself),
    used in chapter 3 to test tied query/key weights.

    Returns:
        ``(tokens, targets)``, both ``(batch, length)``; ``targets[:, 0] = -100`` (no previous token; ignored by
        ``torch.nn.functional.cross_entropy``).
    """
    if length < 2:
        raise ValueError(f"need length >= 2, got {length}")
    tokens = torch.randint(0, vocab, (batch, length), generator=generator)
    targets = torch.full_like(tokens, -100)
    targets[:, 1:] = tokens[:, :-1]
    return tokens, targets
