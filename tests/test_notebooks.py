"""House rules every chapter notebook follows, checked on the committed files (nbval checks their outputs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
MAX_CODE_LINE = 88  # what the site's code column shows without a scrollbar (see _ext/static/course.css)
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]  # the one place the repository's address is set
# How the repository is named where it is installed or cloned: pip's "git+<url>.git" and "git clone <url>.git".
REPO_MENTION = re.compile(r"git\+(https?://[^\s\"'`)]+?)\.git\b|git clone (https?://[^\s\"'`)]+?)(?:\.git)?(?=[\s`]|$)")


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
    # On the site the setup cell is collapsed (a reader can expand it): a chapter opens with its question.
    assert "hide-input" in code[0].metadata.get("tags", []), "the setup cell is not tagged hide-input"
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
            # nbval does not compare it, and the site renders the saved outputs: they must be there
            assert cell.outputs, f"code cell {i} ignores its output but has none saved (refresh it)"
        # nbval never compares image/png (only a figure's text repr), and the site renders the saved outputs:
        # a figure saved without its image would show as "<Figure ...>" text on the site.
        for out in cell.outputs:
            data = out.get("data", {})
            if str(data.get("text/plain", "")).startswith("<Figure"):
                assert "image/png" in data, f"code cell {i} has a figure saved without its image (refresh it)"
    # every figure reference points at a named figure in this notebook (tests/test_notebook_markdown.py checks
    # the links' form and numbers across the book)
    names = {c.metadata.get("mystnb", {}).get("figure", {}).get("name") for c in code} - {None}
    refs = set(re.findall(r"\]\(#(fig-[^)]+)\)", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")))
    assert refs, "no figure is referred to"
    assert refs <= names, f"figure references without a named figure: {sorted(refs - names)}"


def test_setup_cells_install_from_the_configured_repository():
    """Every setup cell's REPO is pip's "git+<url>.git" of _config.yml's repository.url, and nothing else."""
    expected = f'REPO = "git+{REPO_URL}.git"'
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        setup = next(c.source for c in nb.cells if c.cell_type == "code" and c.source.strip())
        assert setup.count(expected) == 1, f"{path.name}: setup cell does not say {expected}"
        for cell in nb.cells:
            urls = {a or b for a, b in REPO_MENTION.findall(cell.source)}
            assert urls <= {REPO_URL}, f"{path.name}: names another repository {sorted(urls - {REPO_URL})}"


@pytest.mark.parametrize("name", ["README.md", "book/running.md"])
def test_docs_name_the_configured_repository(name):
    text = (ROOT / name).read_text()
    urls = [a or b for a, b in REPO_MENTION.findall(text)]
    assert urls, f"{name} no longer says where the course is installed or cloned from"
    assert set(urls) == {REPO_URL}, f"{name} names {sorted(set(urls))}, _config.yml says {REPO_URL}"


def test_version_is_single_sourced():
    """pyproject.toml holds the version; the package reads it from the installed metadata."""
    import attention_course

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert attention_course.__version__ == version
    init = (ROOT / "src" / "attention_course" / "__init__.py").read_text()
    assert version not in init, "__init__.py repeats the version instead of reading it"


def test_cell_timeout_is_single_sourced():
    """_config.yml's execute.timeout is the notebooks' cell timeout: the Makefile (nbval) and the refresh tool
    read it rather than repeat it."""
    timeout = CONFIG["execute"]["timeout"]
    assert isinstance(timeout, int) and timeout > 0
    makefile = (ROOT / "Makefile").read_text()
    assert not re.search(r"--nbval-cell-timeout=\d", makefile), "the Makefile repeats the cell timeout"
    assert "--nbval-cell-timeout=$(CELL_TIMEOUT)" in makefile
    got = subprocess.run([sys.executable, str(ROOT / "tools" / "refresh_notebooks.py"), "--print-timeout"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert got == str(timeout)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_outputs_were_made_by_the_current_code(path):
    """The site renders saved outputs (figures included, which nbval does not compare): they must come from the
    code as it stands. `make refresh` stamps the hash of the code it executed; editing a cell without it fails."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from refresh_notebooks import code_hash
    finally:
        sys.path.pop(0)
    nb = nbformat.read(path, as_version=4)
    stamp = nb.metadata.get("attention_course", {}).get("executed_code")
    assert stamp == code_hash(nb), (
        f"{path.name}: its code changed since its outputs were saved; run `make refresh NB=book/{path.name}`")


def _refresh_tool():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import refresh_notebooks
    finally:
        sys.path.pop(0)
    return refresh_notebooks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_outputs_record_the_cpu_kernels_they_were_made_with(path):
    """`make nbval` runs under other kernels than these (EVIDENCE.md rule 16), so it must know which they were."""
    stamp = nbformat.read(path, as_version=4).metadata.get("attention_course", {})
    assert stamp.get("cpu_capability") in _refresh_tool().LEVELS + ("SVE256", "VSX", "ZVECTOR"), (
        f"{path.name} does not record the CPU kernel level it was refreshed with; run `make refresh`")


@pytest.mark.parametrize(
    ("native", "refreshed", "environ", "expected"),
    [
        ("AVX512", {"AVX512"}, {}, "avx2"),  # the usual case: refreshed natively on an AVX-512 machine
        ("AVX512", {"AVX512", "AVX2"}, {}, "default"),  # some refreshed with AVX2: neither level
        ("AVX2", {"AVX2"}, {}, "default"),  # an AVX2 machine (AMD EPYC before Zen 4)
        ("AVX512", {"AVX512"}, {"ATEN_CPU_CAPABILITY": "DEFAULT"}, "default"),  # the user's choice wins
    ],
)
def test_nbval_runs_under_kernels_no_notebook_was_refreshed_with(monkeypatch, tmp_path, native, refreshed,
                                                                 environ, expected):
    tool = _refresh_tool()
    monkeypatch.setattr(tool, "cpu_capability", lambda: native)
    paths = []
    for i, level in enumerate(sorted(refreshed)):
        nb = nbformat.v4.new_notebook(metadata={"attention_course": {"cpu_capability": level}})
        paths.append(tmp_path / f"{i}.ipynb")
        nbformat.write(nb, paths[-1])
    assert tool.nbval_capability(paths, environ) == expected
    makefile = (ROOT / "Makefile").read_text()
    assert "ATEN_CPU_CAPABILITY=$$cap $(BIN)/python -m pytest $(NBVAL_FLAGS)" in makefile


def test_a_machine_with_no_other_kernel_level_says_so(monkeypatch, tmp_path, capsys):
    tool = _refresh_tool()
    monkeypatch.setattr(tool, "cpu_capability", lambda: "DEFAULT")
    nbformat.write(nbformat.v4.new_notebook(metadata={"attention_course": {"cpu_capability": "DEFAULT"}}),
                   tmp_path / "a.ipynb")
    assert tool.nbval_capability([tmp_path / "a.ipynb"], {}) == "default"
    assert "no CPU kernel level other than DEFAULT" in capsys.readouterr().err


def test_bibliography_parses_and_holds_every_cited_key():
    """references.bib is valid BibTeX (a dropped brace fails the site build late) and every cited key exists: the
    pages' {cite} roles and the notebooks' plain links to bibliography.md#key."""
    import re

    from pybtex.database import parse_file

    root = Path(__file__).resolve().parents[1]
    keys = set(parse_file(root / "references.bib").entries)
    cited = set()
    for page in [*(root / "book").glob("*.ipynb"), *(root / "book").glob("*.md")]:
        for group in re.findall(r"\{cite(?::[a-z]+)?\}`([^`]*)`", page.read_text()):
            cited.update(k.strip() for k in group.split(","))
        cited.update(re.findall(r"\]\(bibliography\.md#([^)]+)\)", page.read_text()))
    assert cited and cited <= keys, sorted(cited - keys)
