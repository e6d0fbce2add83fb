"""The notebooks' Markdown reads as plain CommonMark (JupyterLab, Colab) and agrees with the site: figure links carry
the site's numbers, citations the bibliography's authors and years, and every figure's caption is visible in the
notebook (tools/notebook_markdown.py; the link grammar is _ext/notebook_links.py)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "_ext"))
import notebook_markdown as nm  # noqa: E402
from notebook_links import lab_targets, to_roles  # noqa: E402


def test_the_book_has_no_markdown_problems():
    assert nm.problems() == []


def test_every_figure_has_a_visible_caption_cell():
    for path in nm.notebooks():
        cells = nbformat.read(path, as_version=4).cells
        for cell, after in zip(cells, cells[1:] + [None], strict=True):
            name = nm.figure_name(cell)
            if name:
                caption = cell.metadata["mystnb"]["figure"]["caption"]
                assert after is not None and nm.is_caption_cell(after), f"{path.name}: {name} has no caption cell"
                assert after.source.endswith(caption) and after.source.startswith("**Fig. ")
                assert "remove-cell" in after.metadata["tags"]  # the site shows the real caption instead


def test_figures_are_numbered_through_the_book_in_toc_order():
    numbers = nm.figure_numbers()
    assert sorted(numbers.values()) == list(range(1, len(numbers) + 1))
    assert numbers["fig-soft-lookup"] == 1  # chapter 1's first figure
    ch2 = [nm.figure_name(c) for c in nbformat.read(ROOT / "book/02_scaling.ipynb", as_version=4).cells]
    first_of_ch2 = next(n for n in ch2 if n)
    # chapter 1 is its lesson, then its lab (a section of the chapter in _toc.yml)
    ch1 = [nm.figure_name(c) for name in ("01_soft_lookup", "01_soft_lookup_lab")
           for c in nbformat.read(ROOT / f"book/{name}.ipynb", as_version=4).cells]
    assert numbers[first_of_ch2] == sum(1 for n in ch1 if n) + 1


def test_the_site_reads_plain_links_as_roles():
    text = ("[Fig. 4](#fig-variance) and [Vaswani et al. (2017)](bibliography.md#vaswani2017attention); "
            "a sink ([Xiao et al., 2024](bibliography.md#xiao2023efficient)); [chapter 2](02_scaling.ipynb).")
    assert to_roles(text) == ("{numref}`fig-variance` and {cite:t}`vaswani2017attention`; "
                              "a sink ({cite:alp}`xiao2023efficient`); [chapter 2](02_scaling.ipynb).")


@pytest.fixture
def toy_book(tmp_path):
    """A one-chapter book with one figure and one citation, in the course's layout."""
    (tmp_path / "book").mkdir()
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n"
                                       "  - chapters:\n      - file: book/ch\n")
    shutil.copy(ROOT / "references.bib", tmp_path / "references.bib")
    lab = nbformat.v4.new_notebook()  # a lab with sections 0.A and 0.B, outside the toc: a link target only
    lab.cells = [nbformat.v4.new_markdown_cell("## 0.A First\n\nText."),
                 nbformat.v4.new_markdown_cell("Text.\n\n## 0.B Second")]
    nbformat.write(lab, tmp_path / "book" / "00_ch_lab.ipynb")
    nb = nbformat.v4.new_notebook()
    fig = nbformat.v4.new_code_cell("plot()")
    fig.metadata = {"mystnb": {"figure": {"name": "fig-a", "caption": "A line."}}}
    nb.cells = [nbformat.v4.new_markdown_cell("See [Fig. 1](#fig-a), after "
                                              "[Vaswani et al. (2017)](bibliography.md#vaswani2017attention)."),
                fig]
    path = tmp_path / "book" / "ch.ipynb"
    nbformat.write(nb, path)
    return tmp_path, path


def _set_text(path: Path, text: str) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = text
    nbformat.write(nb, path)


def test_fix_writes_the_caption_cell_and_then_the_toy_book_is_clean(toy_book):
    root, path = toy_book
    assert any("caption cells are missing" in p for p in nm.problems(root))
    assert nm.fix(root) == [path]
    cells = nbformat.read(path, as_version=4).cells
    assert cells[2].source == "**Fig. 1.** A line." and nm.is_caption_cell(cells[2])
    assert nm.problems(root) == []
    assert nm.fix(root) == []  # a second fix changes nothing


@pytest.mark.parametrize("text, complaint", [
    ("See {numref}`fig-a`.", "MyST role"),
    ("(fig-a)=\nA target.", "MyST target"),
    ("```{note}\nhi\n```", "MyST directive"),
    ("See [Fig. 2](#fig-a).", "is Fig. 1 on the site"),
    ("See [Fig. 1](#fig-b).", "no figure named"),
    ("See [the figure](#fig-a).", "not of the form"),
    ("[Vaswani (2017)](bibliography.md#vaswani2017attention)", "should read 'Vaswani et al. (2017)'"),
    ("[Vaswani et al., 2016](bibliography.md#vaswani2017attention)", "should read"),
    ("[Someone (2017)](bibliography.md#nokey2017)", "no BibTeX entry"),
    ("[chapter 9](09_missing.ipynb)", "missing page"),
    ("[§0.C](00_ch_lab.ipynb)", "names no section '## 0.C' of the lab"),
])
def test_the_checker_finds_each_kind_of_problem(toy_book, text, complaint):
    root, path = toy_book
    nm.fix(root)
    _set_text(path, text)
    found = nm.problems(root)
    assert any(complaint in p for p in found), found


def test_links_to_a_labs_sections_are_checked_and_land_on_the_section_on_the_site(toy_book):
    root, path = toy_book
    nm.fix(root)
    _set_text(path, "Proved in [§0.A](00_ch_lab.ipynb) and [§0.B of the lab](00_ch_lab.ipynb).")
    assert nm.problems(root) == []
    assert to_roles("[§2.E](02_scaling_lab.ipynb), [§4.D of the lab](04_multihead_lab.ipynb)") == (
        "{ref}`§2.E <lab-2e>`, {ref}`§4.D of the lab <lab-4d>`")
    # a chapter's link to another chapter's lab file stays a link to the page
    assert to_roles("[§2.E](03_qkv_roles_lab.ipynb)") == "[§2.E](03_qkv_roles_lab.ipynb)"
    text = (root / "book" / "00_ch_lab.ipynb").read_text()
    cells = json.loads(lab_targets(text))["cells"]  # still a notebook, a target above each section heading
    assert ["".join(c["source"]) for c in cells] == ["(lab-0a)=\n## 0.A First\n\nText.",
                                                       "Text.\n\n(lab-0b)=\n## 0.B Second"]


def test_every_lab_section_the_lessons_link_gets_a_target_on_the_site():
    for path in sorted((ROOT / "book").glob("0*_lab.ipynb")):
        targets = set(re.findall(r"\((lab-\d[a-z])\)=", lab_targets(path.read_text())))
        sections = nm.lab_sections(path)
        assert len(sections) >= 3 and targets == {f"lab-{s.replace('.', '').lower()}" for s in sections}, path.name


def test_fix_renumbers_a_stale_figure_link(toy_book):
    root, path = toy_book
    _set_text(path, "See [Fig. 7](#fig-a).")
    nm.fix(root)
    assert nbformat.read(path, as_version=4).cells[0].source == "See [Fig. 1](#fig-a)."
