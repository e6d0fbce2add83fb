"""Colab and any bare Jupyter: a fresh virtual environment with only the scientific stack a Colab runtime already
has (torch, numpy, sympy, matplotlib, tqdm, bokeh, ipykernel -- not this project), a notebook copied outside the
repository, and the setup cell pointed at this checkout through ATTENTION_COURSE_SOURCE. The notebook must install
the package itself and run to the end."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from .conftest import ROOT

pytestmark = pytest.mark.reader

NOTEBOOK = ROOT / "book" / "01_soft_lookup.ipynb"
CELL_TIMEOUT = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"]  # the one setting
COLAB_STACK = ["torch", "numpy", "sympy", "matplotlib", "tqdm", "bokeh", "ipykernel"]


def _pinned(names: list[str]) -> list[str]:
    """The exact pins of requirements.txt for these packages (so the venv installs from the same wheels)."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].split(";")[0].strip()  # drop environment markers
        if "==" in line:
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return [f"{n}=={pins[n]}" if n in pins else n for n in names]


def test_notebook_installs_the_package_in_a_bare_kernel(tmp_path):
    venv = tmp_path / "colab-like"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # --no-compile: byte-compiling the stack's thousands of modules took 49 of its 69 s here, and has no bearing
    # on whether the setup cell installs the package (Python compiles what the kernel imports as it imports it)
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-compile", *_pinned(COLAB_STACK)], check=True,
                   stdout=subprocess.DEVNULL)
    has_package = [str(py), "-c", "import importlib.util as u; print(u.find_spec('attention_course') is not None)"]
    assert subprocess.run(has_package, capture_output=True, text=True, check=True).stdout.strip() == "False"

    # A kernelspec for that interpreter, found through JUPYTER_PATH.
    kernels = tmp_path / "jupyter" / "kernels" / "colab-like"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like (no project)", "language": "python",
    }))
    work = tmp_path / "outside"
    work.mkdir()
    nb_path = work / NOTEBOOK.name
    shutil.copy(NOTEBOOK, nb_path)
    nb = nbformat.read(nb_path, as_version=4)

    env_before = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "ATTENTION_COURSE_SOURCE", "PYTHONPATH")}
    os.environ["JUPYTER_PATH"] = str(tmp_path / "jupyter")
    os.environ["ATTENTION_COURSE_SOURCE"] = str(ROOT)  # the setup cell's install source: this checkout
    os.environ.pop("PYTHONPATH", None)
    try:
        NotebookClient(nb, kernel_name="colab-like", timeout=CELL_TIMEOUT, record_timing=False,
                       resources={"metadata": {"path": str(work)}}).execute()
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    # The setup cell installed the package into the bare environment (not the repository's .venv).
    where = [str(py), "-c", "import attention_course, sys; print(attention_course.__file__)"]
    installed = subprocess.run(where, capture_output=True, text=True, check=True).stdout.strip()
    assert installed.startswith(str(venv)), installed


@pytest.mark.parametrize("path", sorted((ROOT / "book").glob("*.ipynb")), ids=lambda p: p.name)
def test_markdown_reads_cleanly_without_extensions(path):
    """What a plain Jupyter or Colab shows of the prose: each notebook rendered by nbconvert's HTML exporter
    (CommonMark plus $math$, no MyST). No role, target or directive may survive as text; figure and citation
    links render as links; every figure's caption is on the page."""
    from html.parser import HTMLParser

    from nbconvert import HTMLExporter

    from .test_site import RAW_MARKUP

    nb = nbformat.read(path, as_version=4)
    body, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)

    class Markdown(HTMLParser):  # the text and links of the rendered Markdown cells only
        def __init__(self):
            super().__init__()
            self.depth, self.text, self.links = 0, [], []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if self.depth:
                self.depth += tag not in ("br", "img", "hr", "input")
                if tag == "a":
                    self.links.append(a.get("href", ""))
            elif "text_cell_render" in (a.get("class") or ""):
                self.depth = 1

        def handle_endtag(self, tag):
            if self.depth:
                self.depth -= 1

        def handle_data(self, data):
            if self.depth:
                self.text.append(data)

    parsed = Markdown()
    parsed.feed(body)
    text = "".join(parsed.text)
    assert "Fig. 1." in text or len(text) > 1000, "no rendered Markdown found"
    markup = sorted({m.group(0) for m in RAW_MARKUP.finditer(text)})
    assert not markup, f"markup a bare Jupyter shows as text: {markup}"
    assert not re.findall(r"\{[a-z][a-z:-]*\}`|^\([\w:-]+\)=|\]\(", text, re.M), "MyST or link syntax left as text"
    captions = [c.metadata["mystnb"]["figure"]["caption"] for c in nb.cells if "mystnb" in c.metadata]
    assert captions, f"{path.name} has no captioned figure"
    for caption in captions:
        opening = " ".join(caption.split()[:6])  # math stays $...$ in the HTML (MathJax typesets it in a browser)
        assert "Fig. " in text and opening in re.sub(r"\s+", " ", text), f"caption not shown: {caption[:60]}"
    assert any(h.startswith("#fig-") for h in parsed.links) and any("bibliography.md#" in h for h in parsed.links)
