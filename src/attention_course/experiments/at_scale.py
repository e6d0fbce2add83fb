"""Chapter 6's race: naive, tiled and PyTorch's fused attention on one problem — error, memory, time, TFLOP/s.

An experiment, not library code: it combines the library's attention functions with :mod:`attention_course.measure`
for the chapter's §6.5 and for ``benchmarks/bench_fast.py``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .._checks import check_flag, check_int, check_qkv, check_same_device, check_tensor
from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ..measure import attention_flops, peak_memory_bytes, time_interleaved
from ..tiled import tiled_attention

__all__ = ["attention_implementations", "compare_implementations"]


def _check_problem(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t, layout in (("q", q, "(..., n_q, d_k)"), ("k", k, "(..., n_k, d_k)"), ("v", v, "(..., n_k, d_v)")):
        check_tensor(name, t, layout=layout)
    check_qkv(q, k, v)
    check_same_device(["q", "k", "v"], [q, k, v])


def attention_implementations(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, block: int = 128
) -> dict[str, Callable[[], torch.Tensor]]:
    """The attention implementations chapter 6 races, as functions of no arguments returning the output.

    ``naive`` (the package's :func:`~attention_course.scaled_dot_product_attention`, which stores the weights),
    ``tiled`` (:func:`~attention_course.tiled.tiled_attention` with ``block × block`` tiles) and ``F.sdpa``
    (PyTorch's fused ``F.scaled_dot_product_attention``, letting PyTorch pick its backend). On CUDA also
    ``F.sdpa[flash]``, ``F.sdpa[mem-efficient]`` and ``F.sdpa[cuDNN]``: the fused call pinned to one backend each.

    Args:
        q, k, v: ``(..., n, d)`` torch tensors on one device (self-attention shapes when ``causal``).
        causal: query i attends to keys j ≤ i: upper-left aligned, as ``is_causal`` (naive gets the same mask
            from :func:`~attention_course.masks.causal_mask`).
        block: the tile size of ``tiled``, a positive integer.

    The arguments are checked here, not when the functions run. At the edges (no queries, no keys, an empty
    batch) each function gives what its implementation gives.
    """
    _check_problem(q, k, v)
    causal, block = check_flag("causal", causal), check_int("block", block)
    mask = None
    if causal:  # the same upper-left alignment as tiled_attention(causal=True) and F.sdpa(is_causal=True)
        mask = causal_mask(q.shape[-2], k.shape[-2], alignment="upper_left", device=q.device)
    fns: dict[str, Callable[[], torch.Tensor]] = {
        "naive": lambda: scaled_dot_product_attention(q, k, v, mask=mask)[0],
        "tiled": lambda: tiled_attention(q, k, v, causal=causal, block_q=block, block_k=block).output,
        "F.sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    }
    if q.device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def pinned(backend: SDPBackend) -> Callable[[], torch.Tensor]:
            def run() -> torch.Tensor:
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            return run

        fns["F.sdpa[flash]"] = pinned(SDPBackend.FLASH_ATTENTION)
        fns["F.sdpa[mem-efficient]"] = pinned(SDPBackend.EFFICIENT_ATTENTION)
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            fns["F.sdpa[cuDNN]"] = pinned(SDPBackend.CUDNN_ATTENTION)
    return fns


def compare_implementations(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    block: int = 128,
    reps: int = 5,
    warmup: int = 1,
    num_threads: int | None = None,
    measure_memory: bool = True,
) -> dict[str, dict[str, float]]:
    """Race :func:`attention_implementations` on one problem: error, peak memory, interleaved time, TFLOP/s.

    Chapter 6 and ``benchmarks/bench_fast.py``. Each implementation's output is first compared with the naive
    one; then its peak memory is measured (:func:`~attention_course.measure.peak_memory_bytes`) and all are
    timed together (:func:`~attention_course.measure.time_interleaved`, CUDA synchronised).

    Args:
        q, k, v: ``(..., n, d)`` torch tensors on one device; leading dimensions count as batch × heads.
        causal, block: as :func:`attention_implementations`.
        reps, warmup, num_threads: as :func:`~attention_course.measure.time_interleaved` (``num_threads``
            applies on the CPU only).
        measure_memory: skip the memory measurement when False (``peak_bytes`` is then NaN).

    Returns:
        name → ``{"max_abs_err", "peak_bytes", "median_s", "tflops"}``, where ``max_abs_err`` is against the naive
        output and ``tflops`` counts :func:`~attention_course.measure.attention_flops` per median second.

    At the edges: an empty problem (a zero size anywhere in ``q``, ``k`` or ``v``) is refused: there is no
    output to compare and no work to time. Low-precision inputs are raced in their dtype; the errors are
    measured in float32.
    """
    _check_problem(q, k, v)
    if 0 in (q.numel(), k.numel(), v.numel()):
        raise ValueError(
            f"q, k and v must be non-empty to be raced, got shapes {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    reps, warmup = check_int("reps", reps), check_int("warmup", warmup, low=0)
    if num_threads is not None:
        num_threads = check_int("num_threads", num_threads)
    if check_flag("measure_memory", measure_memory) and q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q must be on a CPU or CUDA device to measure memory (or pass measure_memory=False), "
                         f"got one on {q.device}")
    fns = attention_implementations(q, k, v, causal=causal, block=block)
    device = q.device
    ref = fns["naive"]().float()
    errors = {name: float((fn().float() - ref).abs().max()) for name, fn in fns.items()}
    peaks = {name: float("nan") for name in fns}
    if measure_memory:
        peaks = {name: float(peak_memory_bytes(fn, device=device)) for name, fn in fns.items()}
    times = time_interleaved(
        fns,
        reps=reps,
        warmup=warmup,
        device=device if device.type == "cuda" else None,
        num_threads=num_threads if device.type == "cpu" else None,
    )
    batch = math.prod(q.shape[:-2])
    flops = attention_flops(batch, q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], causal=causal)
    result = {}
    for name in fns:
        med = statistics.median(times[name])
        result[name] = {
            "max_abs_err": errors[name],
            "peak_bytes": peaks[name],
            "median_s": med,
            "tflops": flops / med / 1e12,
        }
    return result
