"""Exercises at the end of every chapter, and the one API that checks them (:func:`check`).

A chapter's exercise cell defines the function the exercise asks for and passes it to :func:`check`, which prints
a checklist. The checks of chapter N live in ``chapterN.py``; the solutions do not ship with the package (they are
in the course's ``solutions/`` folder, one click away on the website).
"""

from __future__ import annotations

from . import chapter1, chapter2, chapter3, chapter4, chapter5, chapter6, chapter7  # noqa: F401 -- they register
from .checking import check, exercises, run_checks

__all__ = ["check", "exercises", "run_checks"]
