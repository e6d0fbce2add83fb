"""Measuring what the chapters claim about cost: thread control, interleaved timing, peak memory, FLOPs.

One copy of each measurement, used by the benchmarks, the experiments and the notebooks (chapter 6 introduces
them): :func:`cpu_threads` (the one place that sets PyTorch's CPU threads), :func:`time_interleaved`,
:func:`peak_memory_bytes`, :func:`attention_flops` with :func:`device_peak_tflops`, and :func:`provenance` /
:func:`write_results`, with which the benchmarks record where, when and with what their numbers were made, and
:func:`seed_range`, the one reading of their ``--seeds FIRST-LAST`` option (the benchmarks that train run through
:mod:`attention_course.seeded`).
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import torch

from ._checks import check_callable, check_device, check_flag, check_int, describe
from ._files import course_folders, download_course_file, find_course_file
from .fingerprint import code_fingerprint, fingerprint_names
from .machines import numeric_environment

__all__ = [
    "PEAK_TFLOPS_16BIT",
    "attention_flops",
    "count_copies",
    "cpu_threads",
    "device_name",
    "device_peak_tflops",
    "measured_on",
    "op_counts",
    "peak_memory_bytes",
    "provenance",
    "read_results",
    "seed_range",
    "time_interleaved",
    "write_results",
]


@contextlib.contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """Run the enclosed block with ``n`` PyTorch CPU threads, then restore the previous setting (even on error).

    ``None`` leaves the setting alone. One thread is what the course's small experiments use: their tensors are
    too small to gain from threads, a busy machine's waiting threads can slow a step tenfold, and the floating-
    point summation order (hence every trained number) is then the same on every machine.

    Raises:
        ValueError: ``n`` is not a positive integer or None.
    """
    if n is not None:
        check_int("n", n)
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the enclosed block (C++ libraries write there directly, so
    redirecting ``sys.stderr`` is not enough; a notebook would otherwise show their timestamped log lines)."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _profiled(fn: Callable[[], object], profile_memory: bool = False):
    """``fn()`` run under :mod:`torch.profiler` (CPU activity); its result is dropped, the profile returned."""
    from torch.profiler import ProfilerActivity, profile

    # The profiler's C++ side logs a timestamped line at start and stop, and on a machine with CUDA its Python
    # side may warn about the GPU activity it was not asked to trace: neither is the reader's concern, and either
    # would be a stderr output that nbval compares (chapter 6 wrote one on an H200).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"torch\.(profiler|autograd)")
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=profile_memory)
        with _quiet_stderr():
            prof.start()
        try:
            fn()
        finally:
            with _quiet_stderr():
                prof.stop()
    return prof


def peak_memory_bytes(fn: Callable[[], object], device: str | torch.device = "cpu") -> int:
    """Peak bytes of tensor memory that ``fn()`` allocates on ``device`` above what was live when it started.

    Chapter 6. On the CPU, PyTorch's allocator reports every allocation and free to the profiler when
    ``profile_memory=True``; this replays that stream in time order and returns the highest running total (exact,
    allocation by allocation; ``tracemalloc`` cannot see these allocations, which bypass Python's allocator).
    On CUDA it uses ``torch.cuda.max_memory_allocated`` after resetting the peak. Outputs of ``fn`` count
    (they are allocated during the call); its inputs, allocated before, do not.

    Raises:
        TypeError: ``fn`` not callable. ValueError: a device other than the CPU or CUDA.
    """
    check_callable("fn", fn, "a function of no arguments")
    device = check_device("device", device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)
    if device.type != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda' (what peak_memory_bytes can measure), got {device}")
    prof = _profiled(fn, profile_memory=True)
    records = []
    with _quiet_stderr():
        events = list(prof.profiler.kineto_results.events())
    for e in events:
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU:
            records.append((e.start_ns(), e.nbytes()))
    records.sort(key=lambda r: r[0])  # stable: same-time records keep their order
    current = peak = 0
    for _, nbytes in records:
        current += nbytes
        peak = max(peak, current)
    return int(peak)


def count_copies(fn: Callable[[], object]) -> int:
    """Data copies (``aten::copy_`` and ``aten::clone`` calls, counted by :mod:`torch.profiler`) made by ``fn()``
    (chapter 4): the data movement in which two implementations of the same matrix products differ. Exact and
    the same on every machine for a given PyTorch version, unlike a time."""
    check_callable("fn", fn, "a function of no arguments")
    return sum(e.name in ("aten::copy_", "aten::clone") for e in _profiled(fn).events())


def op_counts(fn: Callable[[], object]) -> collections.Counter:
    """How many times ``fn()`` calls each operator, by name, as :mod:`torch.profiler` records them on the CPU
    (chapter 5 compares the package's Transformer with ``torch.nn.Transformer`` by them).

    Every recorded event counts, nested ones included (``aten::clone`` calls ``aten::copy_``: both count), and
    autograd's backward functions too. The counts are the same on every machine for a given PyTorch version.

    Raises:
        TypeError: ``fn`` not callable.
    """
    check_callable("fn", fn, "a function of no arguments")
    return collections.Counter(e.name for e in _profiled(fn).events())


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    reps: int = 5,
    warmup: int = 1,
    device: str | torch.device | None = None,
    num_threads: int | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each function, measured *interleaved*: every repetition runs all of them, in an order
    that rotates from one repetition to the next, so a change in the machine's load hits all alike (chapter 6).

    Args:
        fns: name → a function of no arguments.
        reps: timed repetitions of each; warmup: untimed calls of each first.
        device: synchronise this CUDA device around every call (None or a CPU device: no synchronisation).
        num_threads: run with this many PyTorch CPU threads (:func:`cpu_threads`), then restore the previous
            setting. One thread compares algorithms per core and is far less disturbed by other processes on a
            busy machine, whose competition for cores can slow a multi-threaded loop of small operations tenfold.

    Returns:
        name → the ``reps`` times in seconds, in repetition order (take the median; entry ``r`` of every name
        comes from the same repetition, so per-repetition ratios compare calls made moments apart).

    Raises:
        ValueError: ``fns`` empty, ``reps`` not a positive integer, ``warmup`` not a non-negative integer, or a
            bad ``num_threads`` (as :func:`cpu_threads`).
        TypeError: a value of ``fns`` that is not callable.
    """
    if not isinstance(fns, Mapping):
        raise TypeError(f"fns must be a mapping name → function, got {describe(fns)}")
    if not fns:
        raise ValueError("fns must name at least one function, got an empty mapping")
    for name, fn in fns.items():
        check_callable(f"fns[{name!r}]", fn, "a function of no arguments")
    check_int("reps", reps)
    check_int("warmup", warmup, low=0)
    if num_threads is not None:
        check_int("num_threads", num_threads)
    dev = None if device is None else check_device("device", device)
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    with cpu_threads(num_threads):
        for _ in range(warmup):
            for name in names:
                fns[name]()
        _sync(dev)
        for rep in range(reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                _sync(dev)
                start = time.perf_counter()
                fns[name]()
                _sync(dev)
                times[name].append(time.perf_counter() - start)
    return times


def attention_flops(
    batch: int, n_q: int, n_k: int, d_k: int, d_v: int | None = None, *, causal: bool = False
) -> int:
    """Floating-point operations of one attention forward pass: ``2·d_k`` per score (multiply-add) and ``2·d_v``
    per weighted value, over the (query, key) pairs that are computed — all ``n_q·n_k`` of them, or the
    ``Σ_i min(i+1, n_k)`` pairs a causal mask allows. ``batch`` counts batch × heads. Softmax and rescaling are
    not counted (the usual convention, e.g. FlashAttention's benchmarks, which use ``4·n²·d`` and its half for
    causal). At the edges: any size 0 gives 0. Causal pairs are counted with upper-left alignment.

    Raises:
        TypeError: sizes not integers, ``causal`` not a bool. ValueError: negative sizes.
    """
    batch, n_q, n_k, d_k = (check_int(n, v, low=0) for n, v in zip(("batch", "n_q", "n_k", "d_k"),
                                                                     (batch, n_q, n_k, d_k), strict=True))
    d_v = d_k if d_v is None else check_int("d_v", d_v, low=0)
    causal = check_flag("causal", causal)
    if causal:
        full = min(n_q, n_k)
        pairs = full * (full + 1) // 2 + max(0, n_q - n_k) * n_k
    else:
        pairs = n_q * n_k
    return int(batch * pairs * 2 * (d_k + d_v))


#: Dense (no sparsity) 16-bit tensor-core peaks in TFLOP/s from the vendors' data sheets — bfloat16 where the GPU
#: has bfloat16 tensor cores, float16 on the T4 and V100, which have none (bfloat16 runs far below this there) —
#: matched against ``torch.cuda.get_device_name()`` (more specific names first: a PCIe or NVL card has a lower
#: peak than the SXM module of the same name). Every entry accumulates in float32, as PyTorch's 16-bit matrix
#: products do: GeForce cards (the RTX 4090) quote twice as much with a float16 accumulator, a rate PyTorch does
#: not use.
PEAK_TFLOPS_16BIT: dict[str, float] = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.4,  # SXM
    "H200 NVL": 835.0,
    "H200": 989.4,  # SXM
    "H800 PCIe": 756.0,
    "H800": 989.4,  # SXM
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
    "RTX 4090": 165.2,
    "T4": 65.0,
    "V100 PCIe": 112.0,
    "V100": 125.0,  # SXM2
}


def device_peak_tflops(name: str) -> float | None:
    """The dense 16-bit tensor-core peak (TFLOP/s) of a GPU from its name (``torch.cuda.get_device_name()``), or
    None when the table :data:`PEAK_TFLOPS_16BIT` does not know it."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a GPU's name (a string), got {describe(name)}")
    words = re.sub(r"[-_\s]+", " ", name.lower())  # "Tesla V100-PCIE-16GB" reads as "tesla v100 pcie 16gb"
    for key, value in PEAK_TFLOPS_16BIT.items():  # whole words only: "L4" is not "L40", "A100" not "A1000"
        if re.search(rf"(?<![\w]){re.escape(key.lower())}(?![\w])", words):
            return value
    return None


# ---------------------------------------------------------------------------------------------------------------
# Provenance: where, when and with what a measurement was made
# ---------------------------------------------------------------------------------------------------------------


def device_name(device: str | torch.device = "cpu") -> str:
    """A readable name of the device measurements ran on: the GPU's name for CUDA, the CPU's model otherwise
    (from ``/proc/cpuinfo`` where there is one, else :func:`platform.processor`), with the architecture.

    Raises:
        ValueError: a CUDA device this machine does not have.
    """
    device = check_device("device", device)  # refuses a CUDA device this machine lacks
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    model = model or platform.processor()
    return f"{device.type}: {model} ({platform.machine()})" if model else f"{device.type} ({platform.machine()})"


def _git_commit(where: Path) -> str | None:
    """The commit checked out at ``where`` (with ``+dirty`` when files differ from it), or None outside git."""
    try:
        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(where), *args], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()

        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}+dirty" if dirty else commit


#: The checkout's commit when this module was imported. A benchmark runs the code that was on disk when it started;
#: a run of many minutes can end after the checkout has moved on, so its results name this commit, not the one
#: the checkout holds when they are written (they did: chapter 5's runs named a later commit, marked dirty).
_COMMIT_AT_IMPORT = _git_commit(Path(__file__).resolve().parent)


def provenance(device: str | torch.device = "cpu") -> dict[str, object]:
    """Where, when and with what a measurement is being made, as a JSON-ready dict.

    Keys: ``date`` (UTC, ISO 8601), ``command`` (this process's command line), ``device`` (:func:`device_name`),
    ``cpu_count`` (logical CPUs), ``torch_threads`` (PyTorch's current CPU threads), ``python``, ``torch``,
    ``platform``, and ``git_commit`` of the package's checkout when the package was imported (``+dirty`` if it
    had uncommitted changes; None when the package is not in a git checkout).
    """
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "device": device_name(device),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "git_commit": _COMMIT_AT_IMPORT,
    }


def write_results(
    path: str | os.PathLike,
    results: Mapping[str, object],
    settings: Mapping[str, object],
    device: str | torch.device = "cpu",
    *,
    code: Sequence[object],
) -> Path:
    """Write a benchmark's results as JSON: ``{"provenance": ..., "settings": ..., "results": ...}``.

    The provenance holds the numeric environment of the runs (:func:`attention_course.machines.numeric_environment`,
    its thread count from ``settings["threads"]`` where that is an integer) and the ``fingerprint`` of ``code`` and
    ``settings`` (:func:`attention_course.fingerprint.code_fingerprint`) with the entry points' names, from which
    ``tests/test_results_files.py`` recomputes it: a file today's code would not reproduce fails that test.

    Args:
        path: the file to write (its folder is created), e.g. ``benchmarks/results/bench_mha.json``.
        results: what was measured (JSON-serialisable: numbers, strings, lists, dicts).
        settings: the sizes and options it was measured with (repetitions, threads, shapes, dtype, ...).
        device: where it ran, for :func:`provenance`.
        code: the functions that produced ``results`` (a benchmark script's entry point for this file); files
            they read (a corpus) may be added as paths.

    Returns:
        The path written.

    Raises:
        TypeError: ``path`` not a path, ``results`` or ``settings`` not a mapping or holding something JSON
            cannot store, ``code`` empty or not functions.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, got {describe(path)}")
    for name, value in (("results", results), ("settings", settings)):
        if not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a mapping (name → value), got {describe(value)}")
    if isinstance(code, (str, bytes)) or not isinstance(code, Sequence) or not code:
        raise TypeError(f"code must be a non-empty list of the functions that produced the results, "
                        f"got {describe(code)}")
    threads = settings.get("threads")
    record = {"provenance": provenance(device), "settings": dict(settings), "results": dict(results)}
    record["provenance"]["environment"] = numeric_environment(
        device, threads if isinstance(threads, int) and not isinstance(threads, bool) else None)
    record["provenance"]["fingerprint"] = {"code": fingerprint_names(code),
                                           "sha256": code_fingerprint(code, settings)}
    try:
        text = json.dumps(record, indent=2, allow_nan=False) + "\n"
    except TypeError as err:
        raise TypeError(f"results and settings must be JSON-serialisable, got {err}") from None
    except ValueError:  # JSON has no NaN or infinity: a file with them is not JSON other tools can read
        raise ValueError("results and settings must hold finite numbers (JSON has no NaN or inf; use None), "
                         "got a NaN or an infinity") from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def seed_range(text: str) -> range:
    """The seeds a benchmark's ``--seeds`` option names: ``"FIRST-LAST"`` (both included) or one seed ``"N"``.

    Every benchmark script that trains over seeds reads its option with this (``type=seed_range``), so a second
    numeric environment can be measured over fewer seeds than the stored runs (``--seeds 0-1``) and the default
    (``"0-4"``, say) is the script's own seeds.

    >>> list(seed_range("0-4"))
    [0, 1, 2, 3, 4]
    >>> seed_range("3")
    range(3, 4)

    Raises:
        TypeError: ``text`` not a string.
        ValueError: ``text`` not two non-negative integers joined by ``-`` (or one), or ``FIRST`` above ``LAST``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be seeds as a string 'FIRST-LAST' such as '0-4', got {describe(text)}")
    match = re.fullmatch(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?", text)
    if match is None:
        raise ValueError(f"text must be seeds 'FIRST-LAST' (non-negative integers, both included) or one seed, "
                         f"such as '0-4' or '3', got {text!r}")
    first = int(match[1])
    last = first if match[2] is None else int(match[2])
    if first > last:
        raise ValueError(f"text must be seeds 'FIRST-LAST' with FIRST <= LAST, such as '0-4', got {text!r}")
    return range(first, last + 1)


def read_results(name: str, repository: str | None = None, *, history: bool = False) -> dict:
    """The record :func:`write_results` wrote as ``benchmarks/results/<name>.json``: ``{"provenance", "settings",
    "results"}``.

    Looked for in the checkout the package runs from, then under the current folder and its parent (a notebook
    in ``book/``). A reader who has only the installed package (Colab) has no such folder: given
    ``repository`` (the course's URL, e.g. a setup cell's ``REPO``), the file is then downloaded from
    ``<repository>/raw/main/benchmarks/results/<name>.json``. ``history=True`` reads
    ``benchmarks/results/history/<name>.json`` instead: a record of code that has changed since (its provenance
    names the commit that ran), kept because no run of today's code has replaced it yet.

    Raises:
        TypeError: ``name`` or ``repository`` not a string.
        ValueError: ``name`` not a plain file name, or no such file found and no ``repository`` to fetch it from.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a results file's name such as 'bench_mha', got {describe(name)}")
    if not name or Path(name).name != name or name.endswith(".json"):
        raise ValueError(f"name must be a plain name without folder or '.json', such as 'bench_mha', got {name!r}")
    if repository is not None and not isinstance(repository, str):
        raise TypeError(f"repository must be the course's URL (a string), got {describe(repository)}")
    relative = f"benchmarks/results/{'history/' if check_flag('history', history) else ''}{name}.json"
    path = find_course_file(relative)
    if path is not None:
        return json.loads(path.read_text())
    if repository is None:
        looked = ", ".join(str(f / "benchmarks" / "results") for f in course_folders())
        raise ValueError(f"name must name a results file, got {name!r}, not found in {looked}; pass repository= "
                         "to download it")
    return json.loads(download_course_file(repository, relative, timeout=60))


def measured_on(record: dict) -> str:
    """The device a record of :func:`read_results` was measured on, as :func:`device_name` wrote it (chapter 6's
    lesson names the GPU its stored runs came from). ``"NVIDIA H200"``, ``"AMD EPYC ..."``.

    Raises:
        TypeError: ``record`` not a dict.
        ValueError: ``record`` names no device (not a record of :func:`write_results`).
    """
    if not isinstance(record, dict):
        raise TypeError(f"record must be a dict that read_results returned, got {describe(record)}")
    provenance = record.get("provenance")
    device = provenance.get("device") if isinstance(provenance, dict) else None
    if not isinstance(device, str):
        raise ValueError(f"record must hold provenance.device (a record of write_results), got keys {sorted(record)}")
    return device
