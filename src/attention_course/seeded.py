"""Arms over seeds: the one runner of the benchmarks that train (the results files of chapters 2–7).

Such a benchmark compares *arms*, settings that differ in one thing, over *seeds*, the same seeds in every arm so
that the arms are paired. This module owns how it runs: the command line (:func:`seeded_parser`: ``--seeds``,
``--steps``, ``--workers``, ``--out``), the runs (:func:`run_seeded`: in ``--workers`` spawned processes on one
PyTorch thread each; every run seeds itself, so the results depend neither on ``--workers`` nor on the order the
runs finish in) and the summary over seeds (:func:`mean_and_std`). :func:`attention_course.measure.write_results`
records what they produced.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from ._checks import check_callable, check_int, check_real, describe
from .measure import seed_range

__all__ = ["mean_and_std", "run_seeded", "seeded_parser", "summarise_arms"]


def seeded_parser(
    description: str,
    *,
    out: Path | None,
    seeds: str = "0-4",
    steps: int | None = None,
    workers: int | None = None,
) -> argparse.ArgumentParser:
    """The command line of a benchmark that trains over seeds: ``--seeds``, ``--out`` and, where given a default,
    ``--steps`` and ``--workers``. A script adds its own options (``--part``) to the parser returned.

    Args:
        description: the script's one-line description.
        out: the default of ``--out`` (the results file; None: the script chooses one per part).
        seeds: the default of ``--seeds`` (read by :func:`seed_range`).
        steps: the default of ``--steps``, the training steps of every run; None: no such option.
        workers: the default of ``--workers`` (:func:`run_seeded`'s processes); None: no such option.

    Raises:
        TypeError: ``description`` not a string, ``out`` not a path or None, ``seeds`` not a string.
        ValueError: ``seeds`` that :func:`seed_range` refuses; ``steps`` or ``workers`` below 1.
    """
    if not isinstance(description, str):
        raise TypeError(f"description must be a string, got {describe(description)}")
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a path or None, got {describe(out)}")
    parser = argparse.ArgumentParser(description=description)
    seed_range(seeds)
    parser.add_argument("--seeds", type=seed_range, default=seeds, help=f"first-last seed, e.g. 0-1 (default: {seeds})")
    if steps is not None:
        parser.add_argument("--steps", type=int, default=check_int("steps", steps),
                            help=f"training steps of every run (default: {steps})")
    if workers is not None:
        parser.add_argument("--workers", type=int, default=check_int("workers", workers),
                            help=f"runs at a time, each in its own process on one thread; the results do not "
                                 f"depend on it (default: {workers})")
    where = "the part's own file" if out is None else out
    parser.add_argument("--out", type=Path, default=None if out is None else Path(out),
                        help=f"the results file (default: {where})")
    return parser


def _one_thread() -> None:
    torch.set_num_threads(1)


def run_seeded(run: Callable[[object], object], tasks: Iterable[object], workers: int) -> list:
    """``[run(task) for task in tasks]``, in that order, ``workers`` runs at a time: the benchmarks' one runner.

    The runs go to ``workers`` spawned processes that use one PyTorch thread each, as the chapters train: the
    course's models are too small to gain from threads, and one thread sums in the same order on every machine. A
    process runs several tasks in turn and keeps its module state between them (a script may cache its corpus
    there), so each run must seed itself, as every benchmark's does: then the results depend neither on
    ``workers`` nor on the order the runs finish in. ``run`` must be importable by name (a function at the top of a
    module or script) and each task picklable, usually ``(arm, settings, seed)``.

    Raises:
        TypeError: ``run`` not callable, ``tasks`` not iterable, ``workers`` not an integer.
        ValueError: ``workers`` below 1.
    """
    check_callable("run", run, "a function task -> result, defined at the top of a module")
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Iterable):
        raise TypeError(f"tasks must be an iterable of the runs' arguments, got {describe(tasks)}")
    workers = check_int("workers", workers)
    tasks = list(tasks)
    if not tasks:
        return []
    with multiprocessing.get_context("spawn").Pool(min(workers, len(tasks)), initializer=_one_thread) as pool:
        return pool.map(run, tasks, chunksize=1)


def mean_and_std(values: Sequence[float] | torch.Tensor | np.ndarray) -> tuple[float, float]:
    """The mean and the sample standard deviation of a measurement over seeds; one value has deviation 0.

    Raises:
        TypeError: ``values`` not a sequence (or tensor, or array) of real numbers.
        ValueError: no values, one that is NaN or infinite, or one above 1e300 in size (the mean would overflow).
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, torch.Tensor, np.ndarray)):
        raise TypeError(f"values must be a sequence of numbers, got {describe(values)}")
    values = [check_real(f"values[{i}]", v) for i, v in enumerate(values)]
    if not values:
        raise ValueError("values must hold at least one number, got an empty sequence")
    if max(abs(v) for v in values) > 1e300:
        raise ValueError(f"values must be below 1e300 in size (their mean would overflow), got {max(values, key=abs)}")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarise_arms(runs: Sequence[dict], arms: Iterable[str], key: str) -> dict[str, dict[str, float]]:
    """Per arm, the mean and deviation over seeds of ``run[key]`` (bits per character) for the runs whose
    ``"arm"`` is that arm, as ``{arm: {"mean_bpc", "std_bpc"}}``, each printed as it is summarised.

    Raises:
        TypeError: ``runs`` not a sequence of dicts. ValueError: an arm without runs, a run without ``key``.
    """
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence) or not all(isinstance(r, dict) for r in runs):
        raise TypeError(f"runs must be a sequence of dicts (one per run), got {describe(runs)}")
    summary = {}
    for name in arms:
        mine = [r for r in runs if r.get("arm") == name]
        if not mine:
            raise ValueError(f"runs must hold at least one run of each arm, got none of arm {name!r}")
        if any(key not in r for r in mine):
            raise ValueError(f"runs must each hold {key!r}, got a run of arm {name!r} without it")
        mean, std = mean_and_std([r[key] for r in mine])
        summary[name] = {"mean_bpc": mean, "std_bpc": std}
        print(f"{name}: {mean:.4f} ± {std:.4f} bits/char")
    return summary
