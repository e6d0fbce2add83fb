r"""Small Sphinx fixes for the course's site, each found by the browser test (tests/reader/test_site.py).

1. sphinx-thebe (loaded by Jupyter Book 1 even with Thebe off) registers its inline configuration script once
   per reading pass, so every page declared `const THEBE_JS_URL` twice: a console error in every reader's
   browser. We keep the first copy of each inline script.
2. Wide tables and display equations widened the whole page on a phone; `static/course.css` makes them scroll
   inside their own box.
3. Chapter titles hold math (e.g. "Why divide the scores by $\sqrt{d_k}$"), and every page shows them in its
   navigation, but Sphinx loads MathJax only on pages whose own text has math: the bibliography and index
   pages showed raw TeX in the sidebar. The assets policy "always" loads it on every page.
4. The notebooks' Markdown is plain CommonMark (so it reads in JupyterLab and Colab); `notebook_links.to_roles`
   turns their figure and citation links into MyST roles before each page is parsed, so the site numbers and
   links them as before; `notebook_links.solutions_to_dropdowns` turns each exercise's solution link into a
   closed dropdown holding the solution, included from `solutions/`; a link to a lab's section (`[§2.E](…_lab.ipynb)`)
   becomes a reference to a target `notebook_links.lab_targets` puts above that section's heading.

Kept outside the book's source on purpose: Jupyter Book 1 injects every .js found in a `_static/` there.
"""

from __future__ import annotations

from pathlib import Path

from notebook_links import (  # _ext/ is on sys.path: Jupyter Book puts local_extensions' folder there
    lab_targets,
    solutions_to_dropdowns,
    to_roles,
)

STATIC = Path(__file__).parent / "static"


def _dedupe(app, pagename, templatename, context, doctree) -> None:
    seen, kept = set(), []
    for js in context.get("script_files", []):
        body = getattr(js, "attributes", {}).get("body") if not isinstance(js, str) else None
        if body:
            if body in seen:
                continue
            seen.add(body)
        kept.append(js)
    context["script_files"] = kept


def _plain_links_to_roles(app, docname: str, source: list[str]) -> None:
    source[0] = to_roles(source[0])
    if str(app.env.doc2path(docname)).endswith(".ipynb"):
        source[0] = solutions_to_dropdowns(source[0])
    if docname.endswith("_lab"):
        source[0] = lab_targets(source[0])


def _static(app) -> None:
    app.config.html_static_path.append(str(STATIC))


def setup(app):
    app.set_html_assets_policy("always")
    app.connect("builder-inited", _static)
    app.connect("source-read", _plain_links_to_roles)
    app.add_css_file("course.css")
    app.connect("html-page-context", _dedupe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
