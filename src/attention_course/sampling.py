r"""Choosing the next token from a language model's logits: greedy, temperature, top-k and top-p (chapter 7).

A decoder-only model gives, at its last position, logits :math:`z \in \mathbb{R}^V` over the vocabulary. The
next token is drawn from :math:`p = \operatorname{softmax}(z / \tau)`, after optionally keeping only some tokens:

* **greedy**: the arg-max of ``z`` (the first one on a tie, as ``torch.argmax``);
* **temperature** :math:`\tau`: :math:`\tau \to 0` concentrates ``p`` on the arg-max (greedy, chapter 1's
  hard lookup as the limit of a softmax), :math:`\tau = 1` is the model's own distribution, :math:`\tau \to \infty`
  flattens it to uniform over the tokens kept;
* **top-k**: keep exactly the ``k`` largest logits (ties broken by ``torch.topk``'s order);
* **top-p** (nucleus): keep the smallest set of most probable tokens whose probability sums to at least ``p``.

Each filter returns logits with the dropped tokens set to ``-inf``; :func:`next_token_probs` composes them (order:
temperature, then top-k, then top-p, as common libraries do) and :func:`sample_next` draws from the result with a
seeded ``torch.Generator``, on the CPU, so that a seed gives the same tokens on every device.
"""

from __future__ import annotations

import torch

from ._checks import check_generator, check_int, check_real, check_tensor

__all__ = ["greedy", "next_token_probs", "sample_next", "scale_by_temperature", "top_k_filter", "top_p_filter"]

_LOGITS = "(..., vocab)"


def _logits(logits: object) -> torch.Tensor:
    t = check_tensor("logits", logits, layout=_LOGITS)
    if t.ndim == 0 or t.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty last axis (..., vocab) with vocab ≥ 1, got shape "
                         f"{tuple(t.shape)}")
    return t


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The most likely token: ``logits`` ``(..., vocab)`` → ids ``(...)`` (int64), the first on a tie.

    Raises:
        TypeError: ``logits`` not a floating-point tensor. ValueError: no vocabulary axis, or an empty one.
    """
    return _logits(logits).argmax(dim=-1)


def scale_by_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    r"""``logits / temperature`` (``(..., vocab)``, same shape): softmax of the result is :math:`p_\tau`.

    Raises:
        ValueError: ``temperature`` not a finite positive number (0 is greedy: use :func:`greedy`).
    """
    t = _logits(logits)
    temperature = check_real("temperature", temperature, low=0.0, open_low=True)
    return t / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep exactly the ``k`` largest logits of each row, set the others to ``-inf`` (``(..., vocab)``, same shape).

    Ties at the boundary are broken by ``torch.topk``'s choice, so exactly ``min(k, vocab)`` entries stay finite
    whatever the values. ``k ≥ vocab`` keeps everything.

    Raises:
        ValueError: ``k`` not a positive integer.
    """
    t = _logits(logits)
    k = check_int("k", k)
    if k >= t.shape[-1]:
        return t.clone()
    keep = torch.zeros_like(t, dtype=torch.bool).scatter_(-1, t.topk(k, dim=-1).indices, True)
    return t.masked_fill(~keep, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most probable tokens whose probability (softmax of ``logits``) sums to ≥ ``p``.

    The tokens are ranked by probability; a token stays when the probability of the tokens ranked before it is
    below ``p``, so the most probable token always stays and ``p = 1`` keeps every token of non-zero probability.
    Returns logits ``(..., vocab)`` with the others set to ``-inf``.

    Raises:
        ValueError: ``p`` outside ``(0, 1]``.
    """
    t = _logits(logits)
    p = check_real("p", p, low=0.0, high=1.0, open_low=True)
    probs = torch.softmax(t.float() if t.dtype in (torch.float16, torch.bfloat16) else t, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1).roll(1, dims=-1)  # mass of the tokens ranked before each one
    before[..., 0] = 0.0
    keep_sorted = (before < p) & (sorted_probs > 0)
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
    return t.masked_fill(~keep, float("-inf"))


def next_token_probs(
    logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """The distribution the next token is drawn from: ``(..., vocab)`` probabilities, each row summing to 1.

    Temperature first (``temperature = 0``: one-hot on the greedy token), then :func:`top_k_filter`, then
    :func:`top_p_filter` (each only when given). Computed in float32 for half-precision logits.

    Raises:
        ValueError: ``temperature`` negative or not finite; ``top_k``, ``top_p`` as the filters.
    """
    t = _logits(logits)
    temperature = check_real("temperature", temperature, low=0.0)
    if top_k is not None:
        check_int("top_k", top_k)
    if top_p is not None:
        check_real("top_p", top_p, low=0.0, high=1.0, open_low=True)
    t = t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
    if temperature == 0.0:
        return torch.zeros_like(t).scatter_(-1, t.argmax(dim=-1, keepdim=True), 1.0)
    t = scale_by_temperature(t, temperature)
    if top_k is not None:
        t = top_k_filter(t, top_k)
    if top_p is not None:
        t = top_p_filter(t, top_p)
    return torch.softmax(t, dim=-1)


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw one token per row from :func:`next_token_probs`: ``logits`` ``(batch, vocab)`` → ids ``(batch,)`` (int64,
    on the logits' device). ``temperature = 0`` is greedy and draws nothing. The draw is made on the CPU with
    ``generator`` (a seeded CPU ``torch.Generator``; None: PyTorch's global one), so a seed gives the same tokens on
    every device.

    Raises:
        TypeError: ``generator`` not a CPU ``torch.Generator``. ValueError: ``logits`` not 2-D; the settings as
            :func:`next_token_probs`.
    """
    t = check_tensor("logits", logits, ndim=2, layout="(batch, vocab)")
    check_generator("generator", generator)
    probs = next_token_probs(t, temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return probs.argmax(dim=-1)
    if t.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=t.device)
    ids = torch.multinomial(probs.detach().to("cpu", torch.float64), 1, generator=generator).squeeze(-1)
    return ids.to(t.device)
