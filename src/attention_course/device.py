"""Device choice and seeding: every notebook's setup cell (chapter 1 onwards) and every seeded experiment."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

from ._checks import check_device, check_int

__all__ = ["get_device", "seed_everything", "seeded"]


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
