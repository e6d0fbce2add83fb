"""Chapter 1's experiment: train W^Q and W^K alone so that each token's attention weights land on a chosen token.

The attention function has no parameters; the projections that make its queries and keys do. ``train_links``
trains only those two matrices, with the values left as the tokens themselves, so what it shows is what a
bilinear score ``x_a W^Q (x_i W^K)ᵀ`` can be taught. Notation (row vectors): tokens ``x`` are ``(n, d_model)``,
``W^Q`` and ``W^K`` are ``(d_model, d_k)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import check_int, check_real, check_same_device, check_tensor, check_token_ids
from ..attention import scaled_dot_product_attention

__all__ = ["train_links"]


def train_links(x: torch.Tensor, target: torch.Tensor, *, d_k: int = 8, seed: int = 0, steps: int = 40,
                lr: float = 0.01) -> torch.Tensor:
    r"""Train ``W^Q`` and ``W^K`` so that token ``a`` attends to token ``target[a]``; return the weights.

    ``W^Q`` and ``W^K`` start from :math:`\mathcal N(0, 1/d_\text{model})`, drawn in ``x``'s dtype from a CPU
    ``torch.Generator`` seeded with ``seed`` (``W^Q`` first; use another seed than the one that drew ``x``, or
    the start is made of the data's own draws). Each of ``steps`` Adam steps (learning rate ``lr``) lowers the
    cross-entropy between each row of :math:`\operatorname{softmax}(xW^Q(xW^K)^\top/\sqrt{d_k})` and its target
    token, computed from the scores (a log-softmax: no weight underflows to a log of 0). ``x`` is read, never
    trained: no gradient reaches it.

    Args:
        x: the tokens, shape ``(n, d_model)``, floating point, on any device.
        target: for each token, the index of the token it should attend to, shape ``(n,)``, integers in
            ``[0, n)``.
        d_k: the width of the queries and keys.
        seed: seeds the initial ``W^Q`` and ``W^K``.
        steps: Adam steps (0 returns the initial weights).
        lr: Adam's learning rate.

    Returns:
        The trained attention weights, shape ``(n, n)``, as :func:`scaled_dot_product_attention` computes them:
        row ``a`` is token ``a``'s distribution over the tokens.

    Raises:
        TypeError: ``x`` not a floating tensor, ``target`` not an integer tensor, or a setting of the wrong type.
        ValueError: ``x`` not 2-D, ``target`` not of shape ``(n,)`` or out of range, on another device than
            ``x``, or a setting out of range.
    """
    x = check_tensor("x", x, ndim=2, layout="(n, d_model)").detach()
    n, d_model = x.shape
    target = check_token_ids("target", target, n, ndim=1, layout="(n,)", what="token indices")
    if target.shape[0] != n:
        raise ValueError(f"target must hold one index per token of x ({n}), got shape {tuple(target.shape)}")
    check_same_device(["x", "target"], [x, target])
    target = target.long()  # cross_entropy takes int64 class indices
    d_k = check_int("d_k", d_k)
    steps = check_int("steps", steps, low=0)
    lr = check_real("lr", lr, low=0.0)
    g = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    w_q, w_k = ((torch.randn(d_model, d_k, generator=g, dtype=x.dtype) / d_model**0.5).to(x.device)
                .requires_grad_() for _ in range(2))
    opt = torch.optim.Adam([w_q, w_k], lr=lr)
    for _ in range(steps):
        scores = (x @ w_q) @ (x @ w_k).T / d_k**0.5  # the scores scaled_dot_product_attention softmaxes
        loss = F.cross_entropy(scores, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return scaled_dot_product_attention(x @ w_q, x @ w_k, x).weights
