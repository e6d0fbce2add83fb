"""Device choice and seeding, used by every notebook's setup cell (chapter 1 onwards)."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["get_device", "seed_everything"]


def get_device(prefer: str | None = None) -> torch.device:
    """The best available device: ``cuda``, then ``mps``, then ``cpu``.

    Args:
        prefer: force a device by name (e.g. ``"cpu"``); the environment variable ``ATTENTION_COURSE_DEVICE``
            does the same for a whole notebook run.

    Returns:
        A ``torch.device``. Notebook cells print only results that do not depend on it.
    """
    name = prefer or os.environ.get("ATTENTION_COURSE_DEVICE")
    if name:
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and PyTorch's (CPU and CUDA) random number generators."""
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 -- the legacy global RNG is what unseeded user code draws from
    torch.manual_seed(seed)
