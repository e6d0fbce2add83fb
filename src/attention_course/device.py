"""Device choice and seeding: every notebook's setup cell (chapter 1 onwards) and every seeded experiment.

The GPU cells of chapters 5 and 6 do not test a device's name: they read a :class:`DeviceInfo` (its kind, free
memory and CUDA compute capability) and choose sizes and dtypes from it with :func:`compute_dtype`,
:func:`sdpa_backends` and :func:`memory_budget`, so that the same cell runs on a 16 GB T4 in Colab, an 80 GB H100
and a Mac, and skips what a device cannot do with one printed line. The tests feed these functions the
properties of devices this machine does not have.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from ._checks import check_device, check_instance, check_int, check_real, describe
from .measure import device_name

__all__ = [
    "DeviceInfo",
    "compute_dtype",
    "device_info",
    "get_device",
    "memory_budget",
    "sdpa_backends",
    "seed_everything",
    "seeded",
]


def get_device(prefer: str | None = None) -> torch.device:
    """The best available device: ``cuda``, then ``mps``, then ``cpu``.

    Args:
        prefer: force a device by name (e.g. ``"cpu"``); the environment variable ``ATTENTION_COURSE_DEVICE``
            does the same for a whole notebook run.

    Returns:
        A ``torch.device``. Notebook cells print only results that do not depend on it.

    Raises:
        TypeError: ``prefer`` not a string or ``torch.device``.
        ValueError: a name torch does not know, or a CUDA/MPS device this machine does not have.
    """
    source = "prefer" if prefer is not None else "ATTENTION_COURSE_DEVICE"
    name = prefer if prefer is not None else os.environ.get("ATTENTION_COURSE_DEVICE")
    if name is not None and name != "":
        device = check_device(source, name)
        if not _available(device):
            raise ValueError(f"{source} must name a device this machine has, got {str(device)!r} "
                             f"(available: {', '.join(_available_types())})")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _available_types() -> list[str]:
    mps = getattr(torch.backends, "mps", None)
    return ["cpu"] + ["cuda"] * torch.cuda.is_available() + ["mps"] * bool(mps is not None and mps.is_available())


def _available(device: torch.device) -> bool:
    """CUDA and MPS devices were checked by check_device; other types (xla, xpu, …) are refused here."""
    return device.type in _available_types() or device.type == "meta"


#: NumPy's legacy generator takes seeds in [0, 2**32).
MAX_SEED = 2**32 - 1


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and PyTorch's (CPU and CUDA) random number generators.

    Raises:
        TypeError: ``seed`` is not an integer. ValueError: ``seed`` outside ``[0, 2**32)`` (NumPy's range).
    """
    seed = check_int("seed", seed, low=0, high=MAX_SEED)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 -- the legacy global RNG is what unseeded user code draws from
    torch.manual_seed(seed)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the enclosed block with PyTorch's global generator seeded with ``seed``; restore the caller's state after.

    What a block draws from the global generator (``torch.randn`` without a ``generator``, the default
    initialisation of ``nn.Linear`` and ``nn.Embedding``) is then fixed by ``seed``, and the caller's own random
    stream continues as if the block had not run. The course's experiments build each model this way::

        with seeded(seed):
            model = build()

    Raises:
        TypeError: ``seed`` is not an integer. ValueError: a negative ``seed``.
    """
    seed = check_int("seed", seed, low=0, high=2**64 - 1)  # torch's generators take 64-bit seeds
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        yield


class DeviceInfo(NamedTuple):
    """What a GPU cell needs to know about its device to choose sizes and dtypes (chapters 5 and 6).

    Attributes:
        type: ``"cuda"``, ``"mps"`` or ``"cpu"``.
        name: the device's name, e.g. ``"Tesla T4"``.
        total_bytes, free_bytes: its memory, or None where torch cannot tell (the CPU).
        capability: the CUDA compute capability, e.g. ``(7, 5)`` for a T4; None for MPS and the CPU.
    """

    type: str
    name: str
    total_bytes: int | None
    free_bytes: int | None
    capability: tuple[int, int] | None = None


def device_info(device: str | torch.device | None = None) -> DeviceInfo:
    """Read a device's :class:`DeviceInfo` from torch (default: :func:`get_device`'s choice).

    On CUDA the free memory is ``torch.cuda.mem_get_info`` (what other processes hold is not free); on MPS the
    total is the Metal recommended working-set size and the free part what the driver has not allocated; on the
    CPU both are None.

    Raises:
        TypeError: ``device`` not a string or ``torch.device``.
        ValueError: a name torch does not know, or a CUDA/MPS device this machine does not have.
    """
    device = get_device() if device is None else check_device("device", device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        free, total = torch.cuda.mem_get_info(device)
        return DeviceInfo("cuda", props.name, int(total), int(free), (props.major, props.minor))
    if device.type == "mps":
        total = int(torch.mps.recommended_max_memory())
        return DeviceInfo("mps", "Apple MPS", total, max(0, total - int(torch.mps.driver_allocated_memory())))
    return DeviceInfo(device.type, device_name(device), None, None)


def _check_info(info: DeviceInfo) -> DeviceInfo:
    check_instance("info", info, DeviceInfo)
    if info.type not in ("cuda", "mps", "cpu"):
        raise ValueError(f"info must describe a cuda, mps or cpu device, got type {info.type!r}")
    if info.type == "cuda" and info.capability is None:
        raise ValueError("info must carry the compute capability of a CUDA device, got capability=None")
    return info


def compute_dtype(info: DeviceInfo) -> torch.dtype:
    """The dtype a GPU cell computes in on this device.

    - CUDA with compute capability 8.0 or more (A100, H100, RTX 30xx/40xx): ``bfloat16``, which their tensor cores
      run at full speed and whose range needs no loss scaling.
    - CUDA 7.x (V100, T4 — Colab's free GPU): ``float16``; these have float16 tensor cores and no bfloat16 ones
      (bfloat16 runs there, emulated and slowly).
    - Older CUDA GPUs (P100, 6.x): ``float16`` as well — no tensor cores, but twice the float32 rate on a P100.
      Before 6.0: ``float32``.
    - MPS: ``float16`` (bfloat16 needs macOS 14; float64 does not exist there at all).
    - CPU: ``float32``; a CPU has no fast 16-bit matrix unit the course can count on.

    Raises:
        TypeError: ``info`` not a :class:`DeviceInfo`. ValueError: a CUDA device without its capability.
    """
    info = _check_info(info)
    if info.type == "cuda":
        if info.capability >= (8, 0):
            return torch.bfloat16
        return torch.float16 if info.capability >= (6, 0) else torch.float32
    return torch.float16 if info.type == "mps" else torch.float32


#: The fused backends of ``F.scaled_dot_product_attention`` that chapter 6 pins, and what each needs (PyTorch's
#: FlashAttention-2 and cuDNN kernels are built for compute capability 8.0 and up; the memory-efficient one for 5.0).
SDPA_BACKEND_NEEDS = {"flash": (8, 0), "mem-efficient": (5, 0), "cuDNN": (8, 0)}


def sdpa_backends(info: DeviceInfo) -> tuple[list[str], dict[str, str]]:
    """Which of PyTorch's pinned attention backends (:data:`SDPA_BACKEND_NEEDS`) can run on this device.

    Returns:
        ``(usable, skipped)``: the names that can run, and for each that cannot, a one-line reason to print.
        Off CUDA every pinned backend is skipped (the unpinned ``F.scaled_dot_product_attention`` still runs).

    Raises:
        TypeError: ``info`` not a :class:`DeviceInfo`. ValueError: a CUDA device without its capability.
    """
    info = _check_info(info)
    usable, skipped = [], {}
    for name, need in SDPA_BACKEND_NEEDS.items():
        if info.type != "cuda":
            skipped[name] = f"{name}: a CUDA backend ({info.type} here)"
        elif info.capability < need:
            cap = ".".join(map(str, info.capability))
            skipped[name] = f"{name}: needs compute capability {need[0]}.{need[1]}, {info.name} has {cap}"
        else:
            usable.append(name)
    return usable, skipped


def memory_budget(info: DeviceInfo, share: float = 0.5) -> int | None:
    """The bytes a GPU cell may plan to use: ``share`` of the device's free memory (None on the CPU).

    Half by default: the caching allocator, fragmentation and the notebook's other tensors need the rest.

    Raises:
        TypeError: ``info`` not a :class:`DeviceInfo`, ``share`` not a number.
        ValueError: ``share`` outside (0, 1].
    """
    info = _check_info(info)
    share = check_real("share", share, low=0.0, high=1.0, open_low=True)
    if info.free_bytes is None:
        return None
    if not isinstance(info.free_bytes, int) or info.free_bytes < 0:
        raise ValueError(f"info.free_bytes must be a non-negative integer, got {describe(info.free_bytes)}")
    return int(share * info.free_bytes)
