"""Device choice and seeding: every notebook's setup cell (chapter 1 onwards) and every seeded experiment."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

__all__ = ["get_device", "seed_everything", "seeded"]


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


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the enclosed block with PyTorch's global generator seeded with ``seed``; restore the caller's state after.

    What a block draws from the global generator (``torch.randn`` without a ``generator``, the default
    initialisation of ``nn.Linear`` and ``nn.Embedding``) is then fixed by ``seed``, and the caller's own random
    stream continues as if the block had not run. The course's experiments build each model this way::

        with seeded(seed):
            model = build()

    Raises:
        TypeError: ``seed`` is not an integer.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an integer, got {type(seed).__name__} {seed!r}")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        yield
