"""Every chapter is a lesson a learner reads in about fifteen minutes, and a lab that proves it (issue #39).

Measured on the notebooks, per chapter: the lesson (``book/0N_*.ipynb``) and its lab (``book/0N_*_lab.ipynb``,
"How we know"). A lesson keeps to its word budget, to sentences of about twenty words, answers its question in
short within its first 300 prose words, and carries no bookkeeping (the live checks, provenance and statistics
of a lab). Lesson and lab together keep every ``assert`` the chapter had before the split: evidence moves, it is
never dropped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
#: assert lines per chapter on 2026-11-27, before any split: lesson + lab keep at least these
ASSERTS_BEFORE = {"01": 55, "02": 73, "03": 67, "04": 81, "05": 49, "06": 54, "07": 38}
MAX_WORDS = {"01": 3000, "02": 3000, "03": 3000, "04": 3000, "05": 3500, "06": 3500, "07": 3500}
MAX_MEAN_SENTENCE, LONG_SENTENCE, MAX_LONG_SHARE, ANSWER_WITHIN = 22, 35, 0.10, 300
#: words of a lab's machinery, not of a lesson
BOOKKEEPING = re.compile(r"LiveCheck|fingerprint|provenance|nbval|ATEN_CPU|var(?:y|ies) by machine|\bHolm\b|"
                         r"bootstrap|p-value|\bp = 0\.", re.I)
#: the short answer: a heading that says "in short" or "answer", or a tip/important/note box
SHORT_ANSWER = re.compile(r"^#+ .*\b(in short|answer)\b|```\{(tip|important|note)\}", re.I | re.M)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def prose(markdown: str) -> str:
    """The words a learner reads: math, code, link targets and roles reduced to a token each."""
    text = re.sub(r"\$\$.*?\$\$|```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$|\{[a-z]+\}`[^`]*`", "X", text)
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)


def sentences(text: str) -> list[str]:
    """Sentences of three words or more, headings and table rows left out."""
    text = re.sub(r"^\s*(#+|[|:-]).*$", " ", text, flags=re.M)
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z(\"'*])", re.sub(r"\s+", " ", text))
    return [p for p in parts if len(p.split()) >= 3]


def measure(lesson: list[dict]) -> dict[str, object]:
    markdown = [c for c in lesson if c["cell_type"] == "markdown"]
    text = prose("\n".join(_source(c) for c in markdown))
    lengths = [len(s.split()) for s in sentences(text)]
    before = 0
    for c in markdown:
        if SHORT_ANSWER.search(_source(c)):
            break
        before += len(prose(_source(c)).split())
    else:
        before = None  # no short answer at all
    return {
        "words": len(text.split()),
        "mean": sum(lengths) / max(1, len(lengths)),
        "long": sum(n > LONG_SENTENCE for n in lengths) / max(1, len(lengths)),
        "bookkeeping": sorted({m.group(0) for c in lesson for m in BOOKKEEPING.finditer(_source(c))}),
        "before_answer": before,
    }


def asserts(cells: list[dict]) -> int:
    return sum(len(re.findall(r"^\s*assert\b", _source(c), re.M)) for c in cells if c["cell_type"] == "code")


def _chapter(number: str) -> tuple[list[dict], list[dict] | None]:
    notebooks = sorted(BOOK.glob(f"{number}_*.ipynb"))
    lessons = [p for p in notebooks if not p.stem.endswith("_lab")]
    labs = [p for p in notebooks if p.stem.endswith("_lab")]
    assert len(lessons) == 1 and len(labs) <= 1, notebooks
    return _cells(lessons[0]), (_cells(labs[0]) if labs else None)


def shortfalls(number: str) -> list[str]:
    lesson, lab = _chapter(number)
    m = measure(lesson)
    out = []
    if lab is None:
        out.append("no lab notebook")
    if m["words"] > MAX_WORDS[number]:
        out.append(f"{m['words']} prose words (at most {MAX_WORDS[number]})")
    if m["mean"] > MAX_MEAN_SENTENCE or m["long"] > MAX_LONG_SHARE:
        out.append(f"sentences of {m['mean']:.1f} words on average, {m['long']:.0%} over {LONG_SENTENCE} "
                   f"(at most {MAX_MEAN_SENTENCE} and {MAX_LONG_SHARE:.0%})")
    if m["bookkeeping"]:
        out.append(f"bookkeeping in the lesson: {m['bookkeeping']}")
    if m["before_answer"] is None or m["before_answer"] > ANSWER_WITHIN:
        out.append(f"the short answer comes after {m['before_answer']} words (within {ANSWER_WITHIN})")
    kept = asserts(lesson) + asserts(lab or [])
    if kept < ASSERTS_BEFORE[number]:
        out.append(f"{kept} asserts in lesson and lab, fewer than the {ASSERTS_BEFORE[number]} before the split")
    return out


@pytest.mark.parametrize("number", sorted(ASSERTS_BEFORE))
def test_each_chapter_is_a_short_lesson_and_a_lab(number):
    assert not shortfalls(number), f"chapter {number}: " + "; ".join(shortfalls(number))


def test_the_measures_can_fail():
    """Planted shortfalls: a long sentence, bookkeeping words and an answer after a long preamble are caught."""
    long = "Many " + "words " * 40 + "end here. "
    lesson = [{"cell_type": "markdown", "source": ["# Title\n\n" + long * 20]},
              {"cell_type": "markdown", "source": ["## In short\n\nShort. Then a LiveCheck report."]},
              {"cell_type": "code", "source": ["assert True\n"]}]
    m = measure(lesson)
    assert m["mean"] > MAX_MEAN_SENTENCE and m["long"] == pytest.approx(20 / 21)
    assert m["bookkeeping"] == ["LiveCheck"] and m["before_answer"] > ANSWER_WITHIN
    assert asserts(lesson) == 1
    assert measure(lesson[:1])["before_answer"] is None
