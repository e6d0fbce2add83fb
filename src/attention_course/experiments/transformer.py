"""Chapter 5's reversal model: where it trains, in what dtype, and a head ablation for opening it up.

:func:`reversal_plan` chooses, from a :class:`~attention_course.device.DeviceInfo`, the device and dtype the chapter
trains on. The model and its training budget are the same on every device — the configuration whose results the
chapter asserts on the CPU (≥ 99 % exact match, the attention-map checks) — so that a reader's GPU reproduces
those results rather than a different, never-verified run; the device only changes how fast it goes.
:func:`zeroed_head` removes one attention head's contribution for an ablation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch

from .._checks import check_instance, check_int
from ..device import DeviceInfo, memory_budget
from ..multihead import MultiHeadAttention

__all__ = ["ReversalPlan", "reversal_plan", "zeroed_head"]

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
    - The dtype is float32 on every device, whatever :func:`~attention_course.device.compute_dtype` would pick: a
      model of d_model 64 is bound by kernel launches, not arithmetic, so 16-bit buys no speed, and the chapter
      asserts that cached decoding's logits equal a full pass to 1e-4, which bfloat16's 8-bit mantissa cannot meet.
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
def zeroed_head(attention: MultiHeadAttention, head: int) -> Iterator[None]:
    """Within the block, head ``head`` of ``attention`` contributes nothing to its output.

    The columns of ``out_proj.weight`` that read the head's output are set to zero (so both attention paths, with
    weights formed or fused, drop it; the output bias stays), and restored on exit.

    Raises:
        TypeError: ``attention`` not a :class:`~attention_course.multihead.MultiHeadAttention`, ``head`` not an
            integer. ValueError: ``head`` outside ``[0, num_heads)``.
    """
    check_instance("attention", attention, MultiHeadAttention)
    head = check_int("head", head, low=0, high=attention.num_heads - 1)
    cols = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    weight = attention.out_proj.weight
    saved = weight.detach()[:, cols].clone()
    with torch.no_grad():
        weight[:, cols] = 0
    try:
        yield
    finally:
        with torch.no_grad():
            weight[:, cols] = saved

