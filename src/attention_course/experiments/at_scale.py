"""Chapter 6's race: naive, tiled and PyTorch's fused attention on one problem — error, memory, time, TFLOP/s.

An experiment, not library code: it combines the library's attention functions with :mod:`attention_course.measure`
for the chapter's §6.5 and for ``benchmarks/bench_fast.py``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .._checks import check_flag, check_int, check_ints, check_qkv, check_same_device, check_tensor, describe
from ..attention import scaled_dot_product_attention
from ..device import SDPA_BACKEND_NEEDS, DeviceInfo, compute_dtype, memory_budget, sdpa_backends
from ..masks import causal_mask
from ..measure import attention_flops, peak_memory_bytes, time_interleaved
from ..tiled import tiled_attention

__all__ = ["RacePlan", "attention_implementations", "compare_implementations", "plain_attention", "race_plan"]


def _check_problem(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t, layout in (("q", q, "(..., n_q, d_k)"), ("k", k, "(..., n_k, d_k)"), ("v", v, "(..., n_k, d_v)")):
        check_tensor(name, t, layout=layout)
    check_qkv(q, k, v)
    check_same_device(["q", "k", "v"], [q, k, v])


def plain_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """``softmax(Q Kᵀ/√d_k) V`` as one would write it in plain PyTorch: the honest baseline of chapter 6's race.

    Computed in the inputs' dtype. Its peak holds two ``n_q × n_k`` matrices (the scores while the softmax
    writes the weights), where the package's teaching version,
    :func:`~attention_course.scaled_dot_product_attention`, keeps four (it also returns the weights, and computes
    16-bit inputs in float32). ``mask``: boolean, broadcastable to the scores, True = may attend; a fully masked
    row gives NaN, as ``torch.softmax`` of ``-inf`` does (the race has none).

    Raises:
        TypeError, ValueError: as :func:`attention_implementations`, and for a mask that is not boolean.
    """
    _check_problem(q, k, v)
    if mask is not None:
        check_tensor("mask", mask, kind="bool", layout="(..., n_q, n_k)")
    scores = (q * (1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0)) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def attention_implementations(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    block: int = 128,
    backends: Iterable[str] | None = None,
) -> dict[str, Callable[[], torch.Tensor]]:
    """The attention implementations chapter 6 races, as functions of no arguments returning the output.

    ``plain`` (:func:`plain_attention`, ``softmax(Q Kᵀ/√d_k) V`` in plain PyTorch, the honest baseline), ``naive``
    (the package's :func:`~attention_course.scaled_dot_product_attention`, the teaching version, which keeps the
    weights and computes 16-bit inputs in float32),
    ``tiled`` (:func:`~attention_course.tiled.tiled_attention` with ``block × block`` tiles) and ``F.sdpa``
    (PyTorch's fused ``F.scaled_dot_product_attention``, letting PyTorch pick its backend). On CUDA also
    ``F.sdpa[flash]``, ``F.sdpa[mem-efficient]`` and ``F.sdpa[cuDNN]``: the fused call pinned to one backend each,
    and ``triton (ch. 6)``, the course's Triton kernel (:func:`~attention_course.kernels.triton_attention`), where
    triton is installed and the inputs are ``(batch, heads, n, d)`` with ``d ≤ 256``.

    Args:
        q, k, v: ``(..., n, d)`` torch tensors on one device (self-attention shapes when ``causal``).
        causal: query i attends to keys j ≤ i: upper-left aligned, as ``is_causal`` (naive gets the same mask
            from :func:`~attention_course.masks.causal_mask`).
        block: the tile size of ``tiled``, a positive integer.
        backends: on CUDA, which pinned backends to include, by the names of
            :data:`~attention_course.device.SDPA_BACKEND_NEEDS` (default: all; :func:`race_plan` passes those the
            device can run — a T4 has no FlashAttention backend).

    The arguments are checked here, not when the functions run. At the edges (no queries, no keys, an empty
    batch) each function gives what its implementation gives.
    """
    _check_problem(q, k, v)
    causal, block = check_flag("causal", causal), check_int("block", block)
    wanted = _check_backends(backends)
    mask = None
    if causal:  # the same upper-left alignment as tiled_attention(causal=True) and F.sdpa(is_causal=True)
        mask = causal_mask(q.shape[-2], k.shape[-2], alignment="upper_left", device=q.device)
    fns: dict[str, Callable[[], torch.Tensor]] = {
        "plain": lambda: plain_attention(q, k, v, mask),
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

        enums = {"flash": "FLASH_ATTENTION", "mem-efficient": "EFFICIENT_ATTENTION", "cuDNN": "CUDNN_ATTENTION"}
        for name, attr in enums.items():
            if name in wanted and hasattr(SDPBackend, attr):
                fns[f"F.sdpa[{name}]"] = pinned(getattr(SDPBackend, attr))
        if _triton_fits(q, k, v):
            from attention_course.kernels import triton_attention

            fns["triton (ch. 6)"] = lambda: triton_attention(q, k, v, causal=causal).output
    return fns


def _triton_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """The course's Triton kernel joins the CUDA race where triton is installed and the problem is one it takes."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return (q.ndim == k.ndim == v.ndim == 4 and q.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and q.shape[-1] <= 256 and q.shape[:2] == k.shape[:2] == v.shape[:2] and k.shape == v.shape
            and q.shape[-1] == k.shape[-1] and min(q.numel(), k.numel()) > 0)


def _check_backends(backends: Iterable[str] | None) -> list[str]:
    if backends is None:
        return list(SDPA_BACKEND_NEEDS)
    if isinstance(backends, (str, bytes)) or not isinstance(backends, Iterable):
        raise TypeError(f"backends must be an iterable of backend names such as ['flash'], got {describe(backends)}")
    names = list(backends)
    unknown = [b for b in names if b not in SDPA_BACKEND_NEEDS]
    if unknown:
        raise ValueError(f"backends must name backends of {list(SDPA_BACKEND_NEEDS)}, got {unknown!r}")
    return names


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
    backends: Iterable[str] | None = None,
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
        backends: the pinned CUDA backends to race, as :func:`attention_implementations`.

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
    fns = attention_implementations(q, k, v, causal=causal, block=block, backends=backends)
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


class RacePlan(NamedTuple):
    """The GPU race of chapter 6 sized for one device (:func:`race_plan`).

    Attributes:
        batch, heads, n, d: the problem, ``(batch, heads, n, d)`` for each of q, k and v.
        dtype: :func:`~attention_course.device.compute_dtype` of the device.
        backends: the pinned backends the device can run; ``skipped``: one printable reason per other backend.
        planned_bytes: the naive implementation's estimated peak, within the device's
            :func:`~attention_course.device.memory_budget`.
    """

    batch: int
    heads: int
    n: int
    d: int
    dtype: torch.dtype
    backends: list[str]
    skipped: dict[str, str]
    planned_bytes: int


#: Bytes per (query, key) pair that the naive implementation holds at its peak: the package's softmax keeps about
#: four n × n buffers, in float32 whatever the input dtype (chapter 6 recorded 16.4 on an H200 at n = 4096, bf16).
NAIVE_BYTES_PER_PAIR = 17


def race_plan(
    info: DeviceInfo,
    sizes: Sequence[int] = (1024, 2048, 4096),
    batch: int = 4,
    heads: int = 16,
    d: int = 128,
) -> RacePlan | None:
    """Size chapter 6's GPU race for a device, or None off CUDA (the race times CUDA kernels).

    The longest ``n`` of ``sizes`` is chosen (then, if none fits, a smaller ``batch``) whose naive peak, about
    :data:`NAIVE_BYTES_PER_PAIR` · batch · heads · n² bytes plus q, k, v and the output, stays within
    :func:`~attention_course.device.memory_budget`; the dtype and the backends come from the device's capability.
    None as well when not even ``batch = 1`` at the smallest ``n`` fits.

    Raises:
        TypeError, ValueError: a bad ``info`` (see :func:`~attention_course.device.compute_dtype`) or a size that is
            not a positive integer.
    """
    dtype, (usable, skipped) = compute_dtype(info), sdpa_backends(info)
    sizes = sorted(check_ints("sizes", sizes), reverse=True)
    batch, heads, d = check_int("batch", batch), check_int("heads", heads), check_int("d", d)
    budget = memory_budget(info)
    if info.type != "cuda" or budget is None:
        return None
    itemsize = torch.empty((), dtype=dtype).element_size()
    for b in range(batch, 0, -1):
        for n in sizes:
            need = b * heads * (NAIVE_BYTES_PER_PAIR * n * n + 4 * n * d * itemsize)
            if need <= budget:
                return RacePlan(b, heads, n, d, dtype, usable, skipped, need)
    return None
