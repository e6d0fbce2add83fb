"""Where the course's own files are (chapters 4–7): the one owner of that convention, for
:func:`attention_course.measure.read_results` (benchmark results) and :func:`attention_course.data.find_data_file`
(chapter 7's corpus).

A file is looked for in the checkout the package runs from, then under the current folder and its parent (a notebook
runs in ``book/``). A reader who has only the installed package (Colab) has none of these: given the course's
repository URL (a setup cell's ``REPO``), the file is downloaded from ``<repository>/raw/main/<relative path>``.
The callers check their arguments and word their own errors.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path


def course_folders() -> list[Path]:
    """Where a checkout's files may be: the package's own checkout, the current folder, its parent."""
    return [Path(__file__).resolve().parents[2], Path.cwd(), Path.cwd().parent]


def find_course_file(relative: str) -> Path | None:
    """The first of :func:`course_folders` holding ``relative`` (e.g. ``"data/kjv.txt"``), or None."""
    for folder in course_folders():
        if (folder / relative).is_file():
            return folder / relative
    return None


def download_course_file(repository: str, relative: str, timeout: float) -> bytes:
    """The bytes of ``relative`` in the course repository ``repository`` (pip's ``git+…​.git`` form or plain)."""
    base = repository.removeprefix("git+").removesuffix(".git").rstrip("/")
    with urllib.request.urlopen(f"{base}/raw/main/{relative}", timeout=timeout) as response:
        return response.read()
