"""House rules every chapter notebook follows, checked on the committed files (nbval checks their outputs)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
MAX_CODE_LINE = 88  # what the site's code column shows without a scrollbar (see _ext/static/course.css)


def _toc_files() -> set[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = {toc["root"]}
    for part in toc.get("parts", []):
        for ch in part.get("chapters", []):
            files.add(ch["file"])
            files |= {s["file"] for s in ch.get("sections", [])}
    return {str(Path(f).with_suffix("")) for f in files}


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_house_rules(path):
    nb = nbformat.read(path, as_version=4)
    assert f"book/{path.stem}" in _toc_files(), f"{path.name} is not in _toc.yml"
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    first = code[0].source
    # One setup cell: installs the package when missing, seeds every RNG, applies the figure style.
    assert "ATTENTION_COURSE_SOURCE" in first and "ac.setup_notebook(seed=" in first, "first code cell is not setup"
    for i, cell in enumerate(code):
        assert cell.execution_count is not None, f"code cell {i} was never executed"
        assert not [o for o in cell.outputs if o.output_type == "error"], f"code cell {i} has an error output"
        assert "execution" not in cell.metadata, f"code cell {i} has timing metadata (refresh it)"
        long = [line for line in cell.source.splitlines() if len(line) > MAX_CODE_LINE]
        assert not long, f"code cell {i} has lines over {MAX_CODE_LINE} characters (they overflow on the site): {long}"
        tags = set(cell.metadata.get("tags", []))
        assert "nbval-skip" not in tags and "NBVAL_SKIP" not in cell.source, f"code cell {i} is skipped by nbval"
        if "nbval-ignore-output" in tags:
            # an ignored output must say why, in the cell itself
            assert re.search(r"#.*(vary|varies|timing|time|device)", cell.source, re.I), (
                f"code cell {i} ignores its output without a comment saying why"
            )
    # every figure reference points at a named figure in this notebook or another chapter
    names = {c.metadata.get("mystnb", {}).get("figure", {}).get("name") for c in code} - {None}
    refs = set(re.findall(r"\{numref\}`([^`<]+)`", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")))
    assert refs <= names, f"figure references without a named figure: {sorted(refs - names)}"
