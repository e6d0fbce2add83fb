"""Re-execute notebooks in place so their saved outputs are what the current code prints.

Usage: python tools/refresh_notebooks.py book/01_soft_lookup.ipynb [more.ipynb ...]   (or: make refresh NB=...)

Unlike `jupyter execute --inplace`, this writes no per-cell timing metadata, so a refresh changes a notebook's
file only where its outputs changed. nbval (in `make test`) then checks that a fresh run reproduces them, and
the site renders them.

Each refreshed notebook is stamped with a hash of its code cells (metadata `attention_course.executed_code`).
The site renders the saved outputs, figures included, and nbval compares only their text; the stamp lets
`tests/test_notebooks.py` prove that every saved output, images too, was made by the code as it stands: edit a
code cell without refreshing and that test fails.

The cell timeout is `execute.timeout` in `_config.yml`, the one place it is set; `--print-timeout` prints it
for the Makefile, which passes it to nbval.

The stamp also records PyTorch's CPU kernel level the outputs were made with (`cpu_capability`), and
`--nbval-capability` names another one for `make nbval` to run under (ATEN_CPU_CAPABILITY): the saved outputs
must be what any processor prints, and a re-run under other kernels is the cheap proof of it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient

CONFIG = Path(__file__).resolve().parents[1] / "_config.yml"


def cell_timeout(config: Path = CONFIG) -> int:
    """Seconds a notebook cell may run: ``execute.timeout`` in the book's ``_config.yml``."""
    timeout = yaml.safe_load(config.read_text())["execute"]["timeout"]
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        raise ValueError(f"execute.timeout in {config} must be a positive integer (seconds), got {timeout!r}")
    return timeout


def code_hash(nb: nbformat.NotebookNode) -> str:
    """SHA-256 of the notebook's code cells, in order: what its saved outputs were computed from."""
    code = "\n\0".join(c.source for c in nb.cells if c.cell_type == "code")
    return hashlib.sha256(code.encode()).hexdigest()


def cpu_capability() -> str:
    """The vector kernels PyTorch's CPU operators run in this environment (``ATEN_CPU_CAPABILITY`` or the
    processor's best): ``DEFAULT``, ``AVX2``, ``AVX512``, ... The kernel a refresh starts inherits it."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


#: x86 kernel levels PyTorch can be asked for, best first (ATEN_CPU_CAPABILITY takes them in lower case)
LEVELS = ("AVX512", "AVX2", "DEFAULT")


def nbval_capability(notebooks: list[Path], environ: dict[str, str] | None = None) -> str:
    """The kernel level nbval should run the notebooks under: one that none of them was refreshed with, so that an
    output only one kind of processor would print fails CI on any machine (EVIDENCE.md rule 16).

    ``ATEN_CPU_CAPABILITY``, when set, is used as it is. Otherwise the best level below the processor's own that no
    notebook records (``AVX2`` on an AVX-512 machine whose notebooks were refreshed natively, ``DEFAULT`` where they
    were refreshed with AVX2). A processor offering no other level (not x86) gets its own, with a warning.
    """
    environ = dict(os.environ if environ is None else environ)
    if environ.get("ATEN_CPU_CAPABILITY"):
        return environ["ATEN_CPU_CAPABILITY"].lower()
    native = cpu_capability()
    used = {nbformat.read(p, as_version=4).metadata.get("attention_course", {}).get("cpu_capability", native)
            for p in notebooks}
    below = LEVELS[LEVELS.index(native) + 1:] if native in LEVELS else ()
    others = [level for level in below if level not in used]
    if not others:
        print(f"warning: no CPU kernel level other than {native} to run nbval under here; the notebooks were "
              f"refreshed with {sorted(used)}", file=sys.stderr)
        return native.lower()
    return others[0].lower()


def refresh(path: Path, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata["attention_course"] = {"executed_code": code_hash(nb), "cpu_capability": cpu_capability()}
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: _config.yml's)")
    parser.add_argument("--print-timeout", action="store_true", help="print _config.yml's cell timeout and exit")
    parser.add_argument("--nbval-capability", action="store_true",
                        help="print the CPU kernel level nbval should run the notebooks under, and exit")
    args = parser.parse_args(argv)
    if args.print_timeout:
        print(cell_timeout())
        return 0
    if args.nbval_capability:
        print(nbval_capability(args.notebooks))
        return 0
    if not args.notebooks:
        parser.error("name at least one notebook")
    timeout = cell_timeout() if args.timeout is None else args.timeout
    for path in args.notebooks:
        print(f"{path}: executed in {refresh(path, timeout):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
