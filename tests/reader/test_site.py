"""The website, checked in a real browser (Debian's Chromium driven by Playwright) over the built site.

Every page is loaded twice, once at desktop width in dark mode and once at phone width in light mode, and each
load checks: all math typeset by the offline MathJax (no raw TeX left, no MathJax errors), every image loaded,
no console errors, no request leaving the machine, nothing wider than the screen; a screenshot of the first
screen. The desktop load of a page in `_toc.yml` also checks that in dark mode no text is invisible and every
figure keeps its own opaque background, and that of a chapter that it opens with its question (the setup cell
collapsed) and its solutions hidden; the desktop loads also read each page's previous/next links, which must walk
the book in `_toc.yml` order. Those four checks share the loads (`page_reports`, computed once by the worker that
runs the class TestEveryPage) and report as four tests. Then: search finds "softmax", the bibliography renders.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, SCREENSHOTS, guard_network

pytestmark = pytest.mark.reader

# Raw TeX that must not survive typesetting in the page's prose (code cells are excluded: they may hold TeX
# inside matplotlib labels). `W^Q` catches a chapter title whose math a cross-reference printed as plain text.
RAW_TEX = re.compile(r"\\frac|\\sqrt|\\sum|\\begin\{|\\operatorname|\$\$|\\\(|\\\[|\b[A-Za-z]\^[A-Za-z{]")
# Markup the site must have turned into links: MyST roles, and the notebooks' plain figure/citation links
# (_ext/notebook_links.py turns those into roles before Sphinx parses the page).
RAW_MARKUP = re.compile(r"\{(numref|cite|doc|ref)[a-z:]*\}|\]\(#fig-|bibliography\.md#")
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


def _toc_pages() -> list[str]:
    """The book's pages in `_toc.yml` order, as paths relative to the site root without suffix."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            pages.append(chapter["file"])
            pages += [s["file"] for s in chapter.get("sections", [])]
    return [str(Path(p).with_suffix("")) for p in pages]


def _all_pages(site: Path) -> list[str]:
    skip = {"_static", "_sources", "_images", "jupyter_execute"}
    return sorted(
        str(p.relative_to(site))
        for p in site.rglob("*.html")
        if not skip & set(p.relative_to(site).parts) and p.name != "index.html"
    )


def _visit(browser, url: str, viewport: dict, scheme: str = "light") -> tuple[object, object, list[str], list[str]]:
    context = browser.new_context(viewport=viewport, color_scheme=scheme)
    attempted: list[str] = []
    guard_network(context, attempted)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load")
    return context, page, errors, attempted


def _wait_for_math(page) -> None:
    has_math = page.evaluate("() => document.querySelectorAll('.math').length > 0")
    if has_math:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30000)
        page.evaluate("() => MathJax.startup.promise")


_RENDER_REPORT = """() => {
  const article = document.querySelector('article') || document.body;
  const clone = article.cloneNode(true);
  clone.querySelectorAll('pre, code, .highlight, .cell_input, mjx-container, script').forEach(e => e.remove());
  return {
    math: document.querySelectorAll('.math').length,
    typeset: document.querySelectorAll('mjx-container').length,
    merror: document.querySelectorAll('mjx-merror, .MathJax_Error').length,
    text: clone.innerText,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    images: Array.from(document.images).map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth]),
  };
}"""


def _render_problems(report: dict, where: str) -> list[str]:
    problems = []
    if report["math"] and report["typeset"] < report["math"]:
        problems.append(f"{where}: {report['typeset']} of {report['math']} math elements typeset")
    if report["overflow"] > 1:
        problems.append(f"{where}: the page is {report['overflow']} px wider than the screen")
    if report["merror"]:
        problems.append(f"{where}: {report['merror']} MathJax error nodes")
    raw = RAW_TEX.findall(report["text"])
    if raw:
        problems.append(f"{where}: raw TeX left in the text: {sorted(set(raw))}")
    markup = sorted({m.group(0) for m in RAW_MARKUP.finditer(report["text"])})
    if markup:
        problems.append(f"{where}: unresolved markup in the text: {markup}")
    for src, complete, width in report["images"]:
        if not complete or width == 0:
            problems.append(f"{where}: image not loaded: {src}")
    return problems


def _dark_problems(report: dict, rel: str) -> list[str]:
    problems = []
    if report["theme"] != "dark":
        problems.append(f"{rel}: the theme is {report['theme']!r} for a reader in dark mode")
    if report["checked"] < 10:
        problems.append(f"{rel}: only {report['checked']} text elements found to check")
    problems += [f"{rel}: low-contrast text {t}" for t in report["low"]]
    problems += [f"{rel}: figure with a transparent background {src}" for src, a in report["images"] if a < 255]
    return problems


@pytest.fixture(scope="session")
def page_reports(browser, site, site_url) -> dict:
    """Load every page of the site at each width once and gather what four tests judge: "render" (every page,
    both widths), "dark" (the `_toc.yml` pages at desktop width, dark mode), "chapters" (each chapter's
    opening and its solutions, at desktop width) and "walk" (the previous/next links of each `_toc.yml` page, read
    on its desktop load, and where a click on the first page's "next" lands). A reader in dark mode gets the dark
    theme (default_mode: auto), so the desktop loads ask for it; light mode is what the phone loads see."""
    pages = _all_pages(site)
    assert len(pages) >= len(_toc_pages()), pages
    toc = {f"{p}.html" for p in _toc_pages()}
    chapters = {f"{p}.html" for p in _chapters()}
    assert toc <= set(pages) and chapters <= toc, (toc - set(pages), chapters - toc)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {"render": [], "dark": [], "chapters": []}
    walk: dict[str, tuple[str | None, str | None]] = {}  # page -> (previous, next), as a click would resolve them
    for rel in pages:
        for name, viewport in VIEWPORTS.items():
            scheme = "dark" if name == "desktop" else "light"
            context, page, errors, attempted = _visit(browser, f"{site_url}/{rel}", viewport, scheme)
            _wait_for_math(page)
            where = f"{rel} ({name}, {scheme})"
            problems["render"] += _render_problems(page.evaluate(_RENDER_REPORT), where)
            # the first screen, for a person to look at (the checks cover the whole page)
            shot = SCREENSHOTS / f"{rel.replace('/', '__').removesuffix('.html')}-{name}.png"
            page.screenshot(path=str(shot))
            if name == "desktop" and rel in toc:
                problems["dark"] += _dark_problems(page.evaluate(_CONTRAST), rel)
                walk[rel.removesuffix(".html")] = (_link(page, "a.left-prev", site_url),
                                                   _link(page, "a.right-next", site_url))
            if name == "desktop" and rel in chapters:  # last: it clicks, opening what it checks
                problems["chapters"] += _chapter_problems(page, rel.removesuffix(".html"))
            problems["render"] += [f"{where}: console error: {e}" for e in errors]
            problems["render"] += [f"{where}: request leaving the machine (aborted): {u}" for u in attempted]
            context.close()
    # The links are read above; one click shows that following "next" is what a reader's click does.
    first = _toc_pages()[0]
    context, page, _, attempted = _visit(browser, f"{site_url}/{first}.html", VIEWPORTS["desktop"])
    with page.expect_navigation(wait_until="domcontentloaded"):
        page.click("a.right-next")
    clicked = _page_path(page.url, site_url)
    context.close()
    return {**problems, "walk": walk, "clicked": (first, clicked, attempted)}


def _link(page, selector: str, site_url: str) -> str | None:
    """Where the page's link ``selector`` leads, as a path without suffix (None: the page has no such link)."""
    link = page.query_selector(selector)
    if link is None:
        return None
    return _page_path(page.evaluate("(a) => a.href", link), site_url)  # resolved against the page, as a click would


def _page_path(url: str, site_url: str) -> str:
    """A page's address on the served site as the `_toc.yml` path: no host, no anchor, no suffix."""
    return url.removeprefix(site_url + "/").split("#")[0].removesuffix(".html")


class TestEveryPage:
    """The four judgements of every page's loads (page_reports). A class, so that `make reader`'s --dist loadscope
    sends the four to one worker and the pages load once (pytest-xdist's xdist_group marks did not group tests
    under pytest 9: each worker loaded every page)."""

    def test_every_page_renders_offline(self, page_reports):
        assert not page_reports["render"], "\n".join(page_reports["render"])

    def test_dark_mode_keeps_text_and_figures_readable(self, page_reports):
        """Every piece of text keeps a contrast of at least 3 against what is behind it, and every figure an
        opaque background of its own (a transparent PNG would draw black axes on the dark page)."""
        assert not page_reports["dark"], "\n".join(page_reports["dark"])

    def test_chapters_open_with_their_question_and_the_setup_cell_collapsed(self, page_reports):
        """The setup cell (a guarded pip install) is tagged hide-input: collapsed under a toggle a reader can
        open. And every exercise's solution is hidden, one click away (_solutions_hidden)."""
        assert not page_reports["chapters"], "\n".join(page_reports["chapters"])

    def test_prev_next_walk_the_toc(self, page_reports):
        """Following "next" from the first page walks every page in `_toc.yml` order, and on each page "previous"
        points at the page before. The links are those each page's desktop load found; clicking the first page's
        "next" lands where its link says."""
        expected, walk = _toc_pages(), page_reports["walk"]
        first, clicked, attempted = page_reports["clicked"]
        assert clicked == walk[first][1] and not attempted, (clicked, walk[first], attempted)
        walked = [expected[0]]
        while (nxt := walk.get(walked[-1], (None, None))[1]) is not None:
            walked.append(nxt)
            assert len(walked) <= len(expected) + 1, walked
        assert walked == expected
        assert [walk[p][0] for p in expected] == [None, *expected[:-1]]


def test_search_finds_softmax(browser, site_url):
    context, page, errors, attempted = _visit(browser, f"{site_url}/search.html?q=softmax", VIEWPORTS["desktop"])
    page.wait_for_selector("#search-results ul.search li", timeout=30000)
    hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.href)")
    context.close()
    assert any("01_soft_lookup" in h for h in hits), hits
    assert not errors and not attempted


def test_bibliography_renders(browser, site_url):
    context, page, errors, _ = _visit(browser, f"{site_url}/book/bibliography.html", VIEWPORTS["desktop"])
    text = page.inner_text("article")
    context.close()
    assert "Attention is all you need" in text or "Attention Is All You Need" in text
    assert "Vaswani" in text
    assert not errors


def test_notebook_pages_have_colab_and_download_buttons(site):
    """Checked on the HTML itself: each chapter's Colab link and download link point at its own notebook."""

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    branch = config["repository"].get("branch", "main")
    notebooks = sorted((ROOT / "book").glob("*.ipynb"))
    assert notebooks
    for nb in notebooks:
        html = (site / "book" / f"{nb.stem}.html").read_text(encoding="utf-8")
        colab = f"https://colab.research.google.com/github/{repo}/blob/{branch}/book/{nb.name}"
        assert colab in html, f"{nb.name}: no Colab link {colab}"
        download = re.search(rf'href="([^"]*_sources/book/{re.escape(nb.name)})"', html)
        assert download, f"{nb.name}: no download link to the .ipynb"
        target = (site / "book" / download.group(1)).resolve()
        assert target.is_file(), f"{nb.name}: download link points at a missing file {target}"


def _chapters() -> list[str]:
    return [f"book/{nb.stem}" for nb in sorted((ROOT / "book").glob("*.ipynb"))]


def _solutions_hidden(page, rel: str) -> list[str]:
    """Each exercise's solution (solutions/chNN.py, included by the site) sits in a closed dropdown: its code is
    hidden until the reader clicks, and then shows the function. A chapter's exercises close its lesson; its lab
    ("How we know") ends with one, the chapter's project (issue #41)."""
    dropdowns = page.locator("details.sd-dropdown", has_text="Solution to exercise")
    if rel.endswith("_lab"):
        if dropdowns.count() != 1:
            return [f"{rel}: a lab with {dropdowns.count()} solution dropdowns, expected one (its project)"]
    elif dropdowns.count() < 4:
        return [f"{rel}: {dropdowns.count()} solution dropdowns, expected one per exercise (at least 4)"]
    problems = []
    for i in range(dropdowns.count()):
        code = dropdowns.nth(i).locator("pre").first
        if code.is_visible():
            problems.append(f"{rel}: solution {i + 1} shows before the reader asks for it")
    first = dropdowns.first
    first.locator("summary").first.click()
    code = first.locator("pre").first
    if not (code.is_visible() and code.inner_text().lstrip().startswith("def ")):
        problems.append(f"{rel}: the first solution does not open to its function when clicked")
    return problems


def _chapter_problems(page, rel: str) -> list[str]:
    """A chapter opens with its title and question before the setup cell, which is collapsed and opens when
    clicked; its solutions are hidden (_solutions_hidden)."""
    problems = _solutions_hidden(page, rel)
    setup = page.locator(".cell", has_text="ATTENTION_COURSE_SOURCE").first
    source = setup.locator(".cell_input pre").first
    if source.is_visible():
        problems.append(f"{rel}: the setup cell's code shows before the reader asks for it")
    title_y = page.locator("article h1").first.bounding_box()["y"]
    question_y = page.locator("article h1 ~ p").first.bounding_box()["y"]
    setup_y = setup.bounding_box()["y"]
    if not title_y < question_y < setup_y:
        problems.append(f"{rel}: the page does not open with its title and question (y: {title_y}, "
                        f"{question_y}, setup {setup_y})")
    setup.locator("summary").first.click()  # the reader opens it
    if not source.is_visible():
        problems.append(f"{rel}: the setup cell does not open when its toggle is clicked")
    return problems


# Per element with its own text: its colour, the first opaque background behind it, and WCAG's contrast ratio.
_CONTRAST = """() => {
  const rgba = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = el => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) return c;
    }
    return rgba(getComputedStyle(document.documentElement).backgroundColor);
  };
  const low = [];
  let checked = 0;
  for (const el of document.querySelectorAll('article *')) {
    const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || el.closest('mjx-container, script, style') || !el.getClientRects().length) continue;
    const style = getComputedStyle(el);
    if (style.visibility !== 'visible' || +style.opacity === 0) continue;
    const a = lum(rgba(style.color)), b = lum(background(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    checked += 1;
    if (ratio < 3) low.push([el.tagName, el.textContent.trim().slice(0, 40), ratio.toFixed(2)]);
  }
  const images = Array.from(document.querySelectorAll('article img')).map(img => {
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const corners = [[0, 0], [c.width - 1, 0], [0, c.height - 1], [c.width - 1, c.height - 1]];
    return [img.src, Math.min(...corners.map(([x, y]) => g.getImageData(x, y, 1, 1).data[3]))];
  });
  return {theme: document.documentElement.dataset.theme, checked, low, images};
}"""
