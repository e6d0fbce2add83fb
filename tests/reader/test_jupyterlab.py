"""JupyterLab, for real: start `jupyter lab` on 127.0.0.1, open chapter 1 in Chromium, run all cells through the
menu, save, and check on the saved file that every code cell ran and none produced an error. On the page itself:
every Markdown cell rendered, each figure's caption visible (the caption cells of tools/notebook_markdown.py), no
MyST markup left as text (the notebooks' Markdown is plain CommonMark, see _ext/notebook_links.py), and the
interactive figure drawn by the run (Bokeh's JavaScript from the output itself) moving when its slider does."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .conftest import ROOT, SCREENSHOTS, guard_network
from .test_site import RAW_MARKUP

pytestmark = pytest.mark.reader

NOTEBOOK = ROOT / "book" / "01_soft_lookup.ipynb"


# The caption of chapter 1's first figure, as its caption cell shows it in the notebook.
CAPTION = "Fig. 1. The soft lookup on four keys"


def _markdown_cells(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited early with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer at {url} within {timeout} s")


def _kernel_idle(base: str, token: str, name: str) -> bool:
    """Whether the server holds a session for notebook `name` whose kernel reports idle (the kernel is up and
    connected; the page's execution indicator can read idle before a kernel exists)."""
    try:
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=2) as r:
            sessions = json.loads(r.read())
    except OSError:
        return False
    return any(
        s.get("path", "").endswith(name) and (s.get("kernel") or {}).get("execution_state") == "idle"
        for s in sessions
    )


def _accept_dialog(page) -> None:
    """Accept JupyterLab's dialog if one is open (the kernel choice; its preselected kernel is the notebook's)."""
    dialog = page.locator(".jp-Dialog .jp-mod-accept")
    if dialog.count():
        dialog.first.click()


# True once some code cell's prompt shows it queued or run ("[*]:", "[1]:"), not the blank "[ ]:".
STARTED = """() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'))
                     .some(e => !['', '[ ]:'].includes(e.innerText.trim()))"""


def _log_tail(path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def _all_ran(path) -> bool:
    """Whether the saved notebook at ``path`` shows every code cell executed; False while JupyterLab is still
    writing it (a notebook with an interactive figure is about 2 MB, and a read can catch half a file)."""
    try:
        nb = json.loads(path.read_text())
    except json.JSONDecodeError:
        return False
    return all(c.get("execution_count") is not None for c in _code_cells(nb))


def test_chapter_1_runs_in_jupyterlab(browser, tmp_path):
    work = tmp_path / "lab"
    work.mkdir()
    nb_path = work / NOTEBOOK.name
    shutil.copy(NOTEBOOK, nb_path)  # run a copy: saving must not touch the repository's notebook
    # Clear the outputs, so that what we read back afterwards can only come from this run.
    nb = json.loads(nb_path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb_path.write_text(json.dumps(nb))
    before = nb_path.stat().st_mtime_ns

    port, token = _free_port(), secrets.token_hex(16)
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log_path = tmp_path / "lab.log"
    log = log_path.open("w")
    # Render every cell, not only those on screen (JupyterLab's default windowing renders lazily), so the page's
    # text can be read whole: a user setting in a settings directory of this test's own.
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings")}
    proc = subprocess.Popen(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for_server(f"{base}/api/status?token={token}", proc)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        attempted: list[str] = []
        guard_network(context, attempted)
        page = context.new_page()
        page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}", wait_until="load")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60000)
        # Wait until the server's kernel for this notebook is idle. JupyterLab may ask which kernel to start, at
        # any moment on a loaded machine, so a dialog is accepted whenever it shows.
        deadline = time.monotonic() + 120
        while not _kernel_idle(base, token, NOTEBOOK.name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no idle kernel for {NOTEBOOK.name} within 120 s:\n{_log_tail(log_path)}")
            _accept_dialog(page)
            page.wait_for_timeout(500)
        # Run all cells from the menu; if no prompt shows a cell queued within 30 s (the click reached a page
        # that was not ready), accept any dialog and choose the menu item again, at most three times in all.
        for _ in range(3):
            _accept_dialog(page)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            try:
                page.wait_for_function(STARTED, timeout=30000)
                break
            except PlaywrightTimeout:
                continue
        started = page.evaluate(STARTED)
        # Save every few seconds until the saved file shows every code cell executed (or time runs out):
        # the file on disk, not the (virtualised) page, is the record of what ran.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            page.wait_for_timeout(3000)
            page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
            page.keyboard.press("Control+s")
            page.wait_for_timeout(1000)
            if nb_path.stat().st_mtime_ns != before and _all_ran(nb_path):
                break
        # The interactive figure the run drew: Bokeh loaded from the cell's own output, and its slider moving
        # the readout (the frames are checked against the package in test_interactive.py, on the site)
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=30000)
        readout = "() => Bokeh.documents.map(d => d.get_model_by_name('circle:readout')).find(m => m).text"
        first = page.evaluate(readout)
        handle = page.locator("#ac-circle .noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        page.keyboard.press("ArrowRight")
        moved = page.evaluate(readout)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "jupyterlab-chapter1-interactive.png"))
        rendered = page.evaluate(
            """() => ({
              cells: document.querySelectorAll('.jp-MarkdownCell').length,
              rendered: document.querySelectorAll('.jp-MarkdownCell.jp-mod-rendered').length,
              text: Array.from(document.querySelectorAll('.jp-MarkdownCell .jp-RenderedMarkdown'))
                         .map(e => e.innerText).join('\\n'),
            })"""
        )
        caption = page.locator(".jp-RenderedMarkdown", has_text=CAPTION).first
        caption.scroll_into_view_if_needed()
        caption_visible = caption.is_visible()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "jupyterlab-chapter1-caption.png"))
        page.keyboard.press("Control+Home")
        page.screenshot(path=str(SCREENSHOTS / "jupyterlab-chapter1.png"))
        context.close()
    finally:
        proc.terminate()  # stop the server by its PID
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

    assert nb_path.stat().st_mtime_ns != before, "the notebook was never saved"
    saved = json.loads(nb_path.read_text())
    code = _code_cells(saved)
    not_run = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    errors = [
        f"cell {i}: {o.get('ename')}: {o.get('evalue')}"
        for i, c in enumerate(code)
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert started, f"Run All Cells queued no cell; the server said:\n{_log_tail(log_path)}"
    assert code and not not_run, f"code cells that did not run: {not_run}; the server said:\n{_log_tail(log_path)}"
    assert not errors, errors
    # the figures were drawn in the browser too
    assert sum("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", [])) >= 2
    assert not attempted, attempted
    assert first.startswith("θ = 60°") and moved.startswith("θ = 65°"), (first, moved)
    # What the reader sees: every Markdown cell rendered, the figure's caption on screen, no markup debris.
    n_markdown = len(_markdown_cells(json.loads(NOTEBOOK.read_text())))
    assert rendered["cells"] == rendered["rendered"] == n_markdown, rendered | {"expected": n_markdown}
    assert caption_visible, f"the caption {CAPTION!r} is not on screen"
    markup = sorted({m.group(0) for m in RAW_MARKUP.finditer(rendered["text"])})
    assert not markup, f"MyST markup shown as text in JupyterLab: {markup}"
    assert "1. Attention as a soft dictionary lookup" in rendered["text"]  # the whole notebook was read
    assert "[Fig." not in rendered["text"] and "Fig. 2" in rendered["text"]  # figure links render as links
