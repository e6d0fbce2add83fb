"""Sphinx extension: drop repeated inline <script> bodies from every page.

sphinx-thebe (loaded by Jupyter Book 1 even with Thebe off) registers its inline configuration script once per
reading pass, so pages ended up declaring `const THEBE_JS_URL` twice, a console error in every reader's
browser (caught by tests/reader/test_site.py). This keeps the first copy of each inline script.
"""

from __future__ import annotations


def _dedupe(app, pagename, templatename, context, doctree) -> None:
    seen, kept = set(), []
    for js in context.get("script_files", []):
        body = getattr(js, "attributes", {}).get("body") if not isinstance(js, str) else None
        key = ("body", body) if body else ("file", str(js))
        if body and key in seen:
            continue
        seen.add(key)
        kept.append(js)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _dedupe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
