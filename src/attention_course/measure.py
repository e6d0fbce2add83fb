"""Measuring what the chapters claim about cost: CPU thread control first; timing, memory and FLOPs join it.

One copy of each measurement, used by the benchmarks, the experiments and the notebooks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["cpu_threads"]


@contextlib.contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """Run the enclosed block with ``n`` PyTorch CPU threads, then restore the previous setting (even on error).

    ``None`` leaves the setting alone. One thread is what the course's small experiments use: their tensors are
    too small to gain from threads, a busy machine's waiting threads can slow a step tenfold, and the floating-
    point summation order (hence every trained number) is then the same on every machine.

    Raises:
        ValueError: ``n`` is not a positive integer or None.
    """
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise ValueError(f"n must be a positive integer or None, got {n!r}")
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
