"""Keep the notebooks' Markdown readable outside the website: plain CommonMark links instead of MyST roles, and
each figure's caption visible in the notebook.

Usage: python tools/notebook_markdown.py          # report what is out of date (exit 1 if anything is)
       python tools/notebook_markdown.py --fix    # rewrite figure numbers and caption cells in place

On the website a figure's caption comes from its code cell's metadata (``mystnb.figure.caption``), which
JupyterLab and Colab never show. So after every figure cell this tool writes a Markdown cell, tagged
``remove-cell`` (the site drops it, having the real caption), that says ``**Fig. N.** <the same caption>``;
the metadata stays the one place a caption is written. Figure links (``[Fig. N](#fig-name)``) get the number
the site gives the figure: Sphinx numbers figures through the whole book, in the order of ``_toc.yml``.
The link grammar itself is ``_ext/notebook_links.py`` (the site turns those links into MyST roles).
`tests/test_notebook_markdown.py` runs the check.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
import yaml
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
from notebook_links import (  # noqa: E402
    CITE_LINK,
    DOC_LINK,
    FIG_LINK,
    LAB_LINK,
    LAB_SECTION,
    PARENTHETICAL_YEAR,
    TEXTUAL_YEAR,
)

ANY_FIG_LINK = re.compile(r"\[[^\[\]]*\]\(#fig-[^)]*\)")  # any link to a figure, well-formed or not
CAPTION_KEY = "caption_of"  # cell metadata attention_course.caption_of = the figure's name
# MyST syntax a bare Jupyter shows as debris: roles, targets "(label)=", directive fences, "%" comments.
MYST_ONLY = {
    "a MyST role": re.compile(r"\{[a-z][a-z:-]*\}`"),
    "a MyST target": re.compile(r"^\([\w:.-]+\)=\s*$", re.M),
    "a MyST directive": re.compile(r"^\s*(```+|:::+)\s*\{", re.M),
    "a MyST comment": re.compile(r"^%", re.M),
}


def notebooks(root: Path = ROOT) -> list[Path]:
    """The book's notebooks in the order of ``_toc.yml`` (the order Sphinx numbers their figures in): each chapter,
    then its sections (a chapter's lab)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]] + [f for part in toc.get("parts", []) for ch in part.get("chapters", [])
                             for f in [ch["file"], *(s["file"] for s in ch.get("sections", []))]]
    return [root / f"{f}.ipynb" for f in files if (root / f"{f}.ipynb").is_file()]


def figure_name(cell) -> str | None:
    return cell.metadata.get("mystnb", {}).get("figure", {}).get("name") if cell.cell_type == "code" else None


def figure_numbers(root: Path = ROOT) -> dict[str, int]:
    """Each named figure's number on the site: 1, 2, ... through the book in ``_toc.yml`` order."""
    names = [figure_name(c) for p in notebooks(root) for c in nbformat.read(p, as_version=4).cells]
    return {name: i for i, name in enumerate([n for n in names if n], start=1)}


def citation_names(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """Each BibTeX key's author-year label parts: ("Vaswani et al.", "2017"), ("Nadaraya", "1964")."""
    out = {}
    for key, entry in parse_file(root / "references.bib").entries.items():
        last = [" ".join(p.last_names).replace("{", "").replace("}", "") for p in entry.persons["author"]]
        names = last[0] if len(last) == 1 else " and ".join(last) if len(last) == 2 else f"{last[0]} et al."
        out[key] = (names, entry.fields["year"])
    return out


def is_caption_cell(cell) -> bool:
    return CAPTION_KEY in cell.metadata.get("attention_course", {})


def caption_cell(name: str, number: int, caption: str):
    cell = nbformat.v4.new_markdown_cell(f"**Fig. {number}.** {caption}")
    cell.metadata = {"tags": ["remove-cell"], "attention_course": {CAPTION_KEY: name}}
    cell.id = f"caption-{name}"  # deterministic, so a fix rewrites nothing that has not changed
    return cell


def _with_captions(nb, numbers: dict[str, int]) -> list:
    cells = []
    for cell in nb.cells:
        if is_caption_cell(cell):
            continue
        cells.append(cell)
        name = figure_name(cell)
        if name:
            caption = cell.metadata["mystnb"]["figure"]["caption"]
            cells.append(caption_cell(name, numbers[name], caption))
    return cells


def _renumber(text: str, numbers: dict[str, int]) -> str:
    return FIG_LINK.sub(lambda m: f"[Fig. {numbers.get(m.group(2), m.group(1))}](#{m.group(2)})", text)


def lab_sections(path: Path) -> set[str]:
    """The sections a lab notebook is headed into: "## 2.E The factor inside ..." gives "2.E"."""
    return {f"{n}.{x}" for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"
            for n, x in LAB_SECTION.findall(c.source)}


def problems(root: Path = ROOT) -> list[str]:
    """Everything in the notebooks' Markdown that would read wrong outside the site, or disagree with it."""
    numbers, cites = figure_numbers(root), citation_names(root)
    sections: dict[Path, set[str]] = {}
    found = []
    for path in notebooks(root):
        nb = nbformat.read(path, as_version=4)
        where = path.name
        expected = _with_captions(nb, numbers)
        if [c.source for c in expected] != [c.source for c in nb.cells]:
            found.append(f"{where}: caption cells are missing or stale (run tools/notebook_markdown.py --fix)")
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "markdown" or is_caption_cell(cell):
                continue
            text = cell.source
            for what, pattern in MYST_ONLY.items():
                for m in pattern.finditer(text):
                    found.append(f"{where} cell {i}: {what} reads as debris outside the site: {m.group(0)!r}")
            for link in ANY_FIG_LINK.finditer(text):
                m = FIG_LINK.fullmatch(link.group(0))
                if m is None:
                    found.append(f"{where} cell {i}: figure link not of the form [Fig. N](#name): {link.group(0)}")
                    continue
                n, name = int(m.group(1)), m.group(2)
                if name not in numbers:
                    found.append(f"{where} cell {i}: [Fig. {n}] points at no figure named {name!r}")
                elif numbers[name] != n:
                    found.append(f"{where} cell {i}: {name} is Fig. {numbers[name]} on the site, the link says {n}")
            for m in CITE_LINK.finditer(text):
                label, key = m.groups()
                if key not in cites:
                    found.append(f"{where} cell {i}: no BibTeX entry {key!r}")
                    continue
                names, year = cites[key]
                textual = TEXTUAL_YEAR.search(label) and label == f"{names} ({year})"
                parenthetical = PARENTHETICAL_YEAR.search(label) and label == f"{names}, {year}"
                if not (textual or parenthetical):
                    found.append(f"{where} cell {i}: citation {label!r} should read "
                                 f"'{names} ({year})' or '{names}, {year}' for {key}")
            for m in DOC_LINK.finditer(text):
                if not (path.parent / m.group(2)).is_file():
                    found.append(f"{where} cell {i}: link to a missing page {m.group(2)}")
            for m in LAB_LINK.finditer(text):
                target, section = path.parent / m.group(4), f"{m.group(2)}.{m.group(3)}"
                if target.is_file():
                    if target not in sections:  # each lab read once, however many links point into it
                        sections[target] = lab_sections(target)
                    if section not in sections[target]:
                        found.append(f"{where} cell {i}: {m.group(0)} names no section '## {section}' of the lab")
    return found


def fix(root: Path = ROOT) -> list[Path]:
    """Rewrite the figure numbers of links and the caption cells; returns the notebooks it changed."""
    numbers, changed = figure_numbers(root), []
    for path in notebooks(root):
        nb = nbformat.read(path, as_version=4)
        before = nbformat.writes(nb)
        nb.cells = _with_captions(nb, numbers)
        for cell in nb.cells:
            if cell.cell_type == "markdown" and not is_caption_cell(cell):
                cell.source = _renumber(cell.source, numbers)
        if nbformat.writes(nb) != before:
            nbformat.write(nb, path)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="rewrite figure numbers and caption cells in place")
    args = parser.parse_args(argv)
    if args.fix:
        for path in fix():
            print("updated", path.relative_to(ROOT))
    found = problems()
    for p in found:
        print(p)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
