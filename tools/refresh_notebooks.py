"""Re-execute notebooks in place so their saved outputs are what the current code prints.

Usage: python tools/refresh_notebooks.py book/01_soft_lookup.ipynb [more.ipynb ...]   (or: make refresh NB=...)

Unlike `jupyter execute --inplace`, this writes no per-cell timing metadata, so a refresh changes a notebook's
file only where its outputs changed. nbval (in `make test`) then checks that a fresh run reproduces them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def refresh(path: Path, timeout: int = 900) -> float:
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
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        print(f"{path}: executed in {refresh(path, args.timeout):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
