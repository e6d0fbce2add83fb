"""Every number in a chapter's prose is printed on its page (EVIDENCE.md rule 10).

For each checked chapter, the numbers written in its markdown cells — outside LaTeX math, inline code, MyST
roles, section/chapter/footnote references, numbered-list markers and headings — must appear among the numbers
the notebook shows: its saved outputs (text, tables, figure captions built by code) or its code cells (a setting
such as ``d_k = 256`` is on the page). A number that is a fact cited from a paper goes in ALLOWED with the reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
#: every chapter's lesson and lab ("01_soft_lookup", "01_soft_lookup_lab", ...)
CHAPTERS = sorted(p.stem for p in BOOK.glob("0*.ipynb"))

#: chapter -> number -> why it may appear without being printed: only facts cited from papers.
ALLOWED: dict[str, dict[str, str]] = {name: {} for name in CHAPTERS} | {
    "02_scaling_lab": {
        "50": "Gemma 2 caps attention logits with c = 50 (gemma2024gemma2), cited in §2.I",
    },
    "04_multihead": {
        "110": "BERT-base has 110 M parameters (devlin2019bert), cited in §4.3",
        "340": "BERT-large has 340 M parameters (devlin2019bert), cited in §4.3",
    },
    "05_transformer": {
        "10000": "the base of the sinusoidal encoding's frequencies, 10000^(-2i/d) (vaswani2017attention), §5.2, §5.3",
    },
    "05_transformer_lab": {
        "10000": "the base of the sinusoidal encoding's frequencies (vaswani2017attention), §5.B and §5.C",
    },
}

NUMBER = re.compile(r"(?<![\w.])\d+(?:[ \u202f\u2009]\d{3})*(?:\.\d+)?(?![\w])")
#: Prose that names places, not quantities: "§2.3", "chapter 5", "footnote 4", "Table 3", "eq. (1)", "Figure 2",
#: "Fig. 12".
REFERENCE = re.compile(
    r"(§\s*[\d.–-]+|\b(?:[Cc]hapters?|[Ff]ootnotes?|[Tt]ables?|[Ss]ections?|[Ff]igures?|Fig\.|[Ee]q\.|[Ee]quations?)"
    r"\s*\(?\d+(?:\.\d+)*\)?(?:\s*(?:and|to|–|-)\s*\d+(?:\.\d+)*)*)"
)


#: Inside LaTeX math only measured-looking numbers count: decimals and numbers of two or more digits, not in an
#: exponent, a subscript or braces ($d_k = 1024$ and $\approx 4.16$ count; $1/\sqrt{2}$ and $x^{10}$ do not).
MATH_NUMBER = re.compile(r"(?<![\w.{^_])(?:\d+\.\d+|\d{2,})(?![\w}])")


def _prose(markdown: str) -> str:
    """The markdown with what is not prose removed; numbers from its math appended."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    maths = re.findall(r"\$\$.*?\$\$|\$[^$\n]*\$", text, flags=re.S)
    in_math = " ; ".join(m.group() for math in maths for m in MATH_NUMBER.finditer(math))  # not "10 000"-joined
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]*\$", " ", text)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\{[a-z]+\}`[^`]*`", " ", text)  # roles such as {cite}`key`
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
    text = re.sub(r"^\s*#+.*$", " ", text, flags=re.M)  # headings ("## 2.3 …")
    text = re.sub(r"^\s*\d+\.\s", " ", text, flags=re.M)  # numbered-list markers
    text = re.sub(r"\(\s*\d{4}[a-z]?\s*\)|\bet al\.,? \d{4}", " ", text)  # years of citations: (2017)
    text = re.sub(r", \d{4}[a-z]?\]", "]", text)  # and of citation links: [Dao, 2024](bibliography.md#…)
    return REFERENCE.sub(" ", text) + " " + in_math


def _normal(token: str) -> str:
    return re.sub(r"[ \u202f\u2009_]", "", token)


def _shown(nb: dict) -> set[str]:
    """Every number the page shows: in code cells and in saved outputs."""
    texts = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        texts.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            for mime in ("text/plain", "text/markdown", "text/html", "text/latex"):
                texts.append("".join(out.get("data", {}).get(mime, "")))
    joined = re.sub(r"(?<=\d)_(?=\d)", "", "\n".join(texts))
    return {_normal(m.group()) for m in NUMBER.finditer(joined)}


def _unprinted(name: str) -> list[str]:
    nb = json.loads((BOOK / f"{name}.ipynb").read_text())
    shown, allowed = _shown(nb), ALLOWED[name]
    missing = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        prose = _prose("".join(cell["source"]))
        for m in NUMBER.finditer(prose):
            token = _normal(m.group())
            if token not in shown and token not in allowed:
                context = " ".join(prose[max(0, m.start() - 40) : m.end() + 20].split())
                missing.append(f"cell {i}: {token!r} in “…{context}…”")
    return missing


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_number_in_the_prose_is_printed_on_the_page(name):
    missing = _unprinted(name)
    assert not missing, "numbers in the prose that the page does not print:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", CHAPTERS)
def test_allowed_numbers_are_in_the_prose(name):
    """The allow-list holds no stale entries."""
    nb = json.loads((BOOK / f"{name}.ipynb").read_text())
    prose = " ".join(_prose("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "markdown")
    found = {_normal(m.group()) for m in NUMBER.finditer(prose)}
    assert set(ALLOWED[name]) <= found


def test_the_check_sees_an_unprinted_number(tmp_path, monkeypatch):
    """Numbers typed into the prose (or its math) and printed nowhere are reported; printed, they pass. Section
    and chapter references are not numbers to print."""
    cells = [
        {"cell_type": "markdown", "source": ["The gap is 2.8 nats (§2.3, chapter 5; $d_k = 64$)."]},
        {"cell_type": "code", "source": ["print(round(gap, 1))"], "outputs": [{"text": "2.7\n"}]},
    ]
    monkeypatch.setattr(__import__(__name__), "BOOK", tmp_path)
    (tmp_path / "x.ipynb").write_text(json.dumps({"cells": cells}))
    monkeypatch.setitem(ALLOWED, "x", {})
    assert [m.split(":")[1].strip().split()[0] for m in _unprinted("x")] == ["'2.8'", "'64'"]
    cells[1]["outputs"][0]["text"] = "2.8 at d_k = 64\n"
    (tmp_path / "x.ipynb").write_text(json.dumps({"cells": cells}))
    assert _unprinted("x") == []
