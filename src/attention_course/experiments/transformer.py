"""Chapter 5's reversal model: where it trains, in what dtype, and a head ablation for opening it up.

:func:`reversal_plan` chooses, from a :class:`~attention_course.device.DeviceInfo`, the device and dtype the chapter
trains on. The model and its training budget are the same on every device — the configuration whose results the
chapter asserts on the CPU (≥ 99 % exact match, the attention-map checks) — so that a reader's GPU reproduces
those results rather than a different, never-verified run; the device only changes how fast it goes.
:func:`ablated_head` removes one attention head's contribution (zero- or mean-ablation) and
:func:`mean_head_outputs` measures the mean a mean-ablation puts in its place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch

from .._checks import check_callable, check_instance, check_int, check_tensor
from ..device import DeviceInfo, memory_budget
from ..multihead import MultiHeadAttention

__all__ = ["ReversalPlan", "ablated_head", "mean_head_outputs", "reversal_plan"]

#: The chapter's model and budget (§5.7): 2 + 2 post-LN layers, d_model 64, 4 heads, 2500 steps of 64 strings.
REVERSAL_CONFIG = dict(d_model=64, nhead=4, layers=2, d_ff=128, batch=64, steps=2500, warmup=300, factor=0.5)

#: What training it holds on a device at most, with a wide margin: about 0.1 M parameters with Adam's two moments
#: and the activations of one batch of 64 strings of at most 12 tokens — tens of MB; 256 MiB is asked for.
REVERSAL_BYTES = 256 * 2**20


class ReversalPlan(NamedTuple):
    """Where and how chapter 5 trains its reversal model (:func:`reversal_plan`).

    Attributes:
        device: ``"cuda"``, ``"mps"`` or ``"cpu"``.
        dtype: always ``torch.float32`` (see :func:`reversal_plan`).
        threads: CPU threads to set (1 on the CPU, for the same arithmetic on every CPU), or None.
        config: :data:`REVERSAL_CONFIG`.
        note: one printable line when the plan departs from the device asked about, else None.
    """

    device: str
    dtype: torch.dtype
    threads: int | None
    config: dict
    note: str | None


def reversal_plan(info: DeviceInfo) -> ReversalPlan:
    """Choose the device and dtype for chapter 5's training run from a device's properties.

    - The model and budget are :data:`REVERSAL_CONFIG` everywhere.
    - The dtype is float32 on every device, whatever :func:`~attention_course.device.compute_dtype` would pick: the
      chapter's asserted results were reached in float32, and it checks that cached decoding's logits equal a full
      pass to 1e-4, which bfloat16's 8-bit mantissa cannot meet. (With d_model 64 each matrix product is too small
      for 16-bit tensor cores to pay much; an expectation, not a timing.)
    - A CUDA or MPS device is used when :func:`~attention_course.device.memory_budget` leaves
      :data:`REVERSAL_BYTES` for it; otherwise the CPU, with a one-line note saying why.

    Raises:
        TypeError: ``info`` not a :class:`~attention_course.device.DeviceInfo`. ValueError: a CUDA device without
            its compute capability, or a type other than cuda, mps, cpu.
    """
    check_instance("info", info, DeviceInfo)
    budget = memory_budget(info)  # validates info
    config = dict(REVERSAL_CONFIG)
    if info.type == "cpu":
        return ReversalPlan("cpu", torch.float32, 1, config, None)
    if budget < REVERSAL_BYTES:
        note = (f"{info.name}: {budget / 2**20:.0f} MiB free to plan with, {REVERSAL_BYTES / 2**20:.0f} MiB "
                "needed; training on the CPU")
        return ReversalPlan("cpu", torch.float32, 1, config, note)
    return ReversalPlan(info.type, torch.float32, None, config, None)


@contextlib.contextmanager
def ablated_head(attention: MultiHeadAttention, head: int, mean: torch.Tensor | None = None) -> Iterator[None]:
    """Within the block, head ``head`` of ``attention`` no longer depends on the input (chapter 5).

    The columns of ``out_proj.weight`` that read the head's output are set to zero, so both attention paths (with
    weights formed or fused) drop it. With ``mean`` (the head's average output, ``(head_dim,)``, from
    :func:`mean_head_outputs`) that average is put back as a constant through ``out_proj``'s bias: a
    *mean-ablation*, which removes what the head says about each input without also moving the layer's output off
    the values it was trained on (a zero-ablation does both). Everything is restored on exit.

    Raises:
        TypeError: ``attention`` not a :class:`~attention_course.multihead.MultiHeadAttention`, ``head`` not an
            integer, ``mean`` not a floating tensor. ValueError: ``head`` outside ``[0, num_heads)``; ``mean`` not
            of shape ``(head_dim,)``, or given to a layer whose ``out_proj`` has no bias.
    """
    check_instance("attention", attention, MultiHeadAttention)
    head = check_int("head", head, low=0, high=attention.num_heads - 1)
    cols = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    weight, bias = attention.out_proj.weight, attention.out_proj.bias
    if mean is not None:
        mean = check_tensor("mean", mean, kind="floating", ndim=1, layout="(head_dim,)")
        if mean.shape[0] != attention.head_dim:
            raise ValueError(f"mean must have shape ({attention.head_dim},) (the head's width), got "
                             f"{tuple(mean.shape)}")
        if bias is None:
            raise ValueError("mean must go with a layer whose out_proj has a bias (it carries the constant), got "
                             "a layer built with bias=False; use mean=None (zero-ablation)")
    saved_w = weight.detach()[:, cols].clone()
    saved_b = None if bias is None else bias.detach().clone()
    with torch.no_grad():
        if mean is not None:
            bias += saved_w @ mean.to(saved_w)
        weight[:, cols] = 0
    try:
        yield
    finally:
        with torch.no_grad():
            weight[:, cols] = saved_w
            if saved_b is not None:
                bias.copy_(saved_b)


@torch.no_grad()
def mean_head_outputs(
    attention: MultiHeadAttention, run: Callable[[], object], where: torch.Tensor | None = None
) -> torch.Tensor:
    """Each head's output averaged over the query positions of the forward pass ``run()`` makes (chapter 5).

    ``run`` is called once (e.g. ``lambda: model(src, tgt)``); the input of ``attention.out_proj`` — the heads'
    outputs side by side — is recorded, and averaged over the positions where ``where`` is True (boolean
    ``(batch, n_q)``, e.g. the non-padding target positions; all positions when None).

    Returns:
        ``(num_heads, head_dim)``: row ``h`` is what :func:`ablated_head` puts in place of head ``h``.

    Raises:
        TypeError: ``attention`` not a MultiHeadAttention, ``run`` not callable, ``where`` not boolean.
        ValueError: ``run`` never called the layer, or ``where`` not of the recorded ``(batch, n_q)`` shape or
            selecting nothing.
    """
    check_instance("attention", attention, MultiHeadAttention)
    check_callable("run", run, "a function that runs the model once")
    seen: list[torch.Tensor] = []
    handle = attention.out_proj.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    try:
        run()
    finally:
        handle.remove()
    if not seen:
        raise ValueError("run must call the attention layer at least once (its outputs are averaged), got a "
                         "run() that never called it")
    x = torch.cat([t.reshape(-1, t.shape[-1]) for t in seen]) if where is None else seen[0]
    if where is not None:
        where = check_tensor("where", where, kind="bool", ndim=2, layout="(batch, n_q)")
        if len(seen) != 1 or tuple(where.shape) != tuple(x.shape[:2]) or not where.any():
            raise ValueError(f"where must select some of the {tuple(x.shape[:2])} (batch, n_q) query positions of "
                             f"one forward pass, got shape {tuple(where.shape)} over {len(seen)} passes")
        x = x[where.to(x.device)]
    return x.mean(0).view(attention.num_heads, attention.head_dim)
