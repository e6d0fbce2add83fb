"""Check that the built site loads nothing from the network: every <script src>, stylesheet <link>, <img> and
<iframe> in every HTML page must point inside the site. Also checks that MathJax is the offline copy.

Usage: python tools/check_site.py _build/html
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path

EXTERNAL = ("http://", "https://", "//")


class _Loads(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.loads: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "video", "audio") and a.get("src"):
            self.loads.append((tag, a["src"] or ""))
        if tag == "link" and a.get("href"):
            rel = (a.get("rel") or "").lower()
            if any(r in rel for r in ("stylesheet", "preload", "icon", "modulepreload", "prefetch")):
                self.loads.append((f"link rel={rel}", a["href"] or ""))


def check(site: Path) -> list[str]:
    pages = sorted(site.rglob("*.html"))
    if not pages:
        return [f"no HTML pages under {site}"]
    problems = []
    for page in pages:
        parser = _Loads()
        parser.feed(page.read_text(encoding="utf-8"))
        for tag, url in parser.loads:
            if url.startswith(EXTERNAL):
                problems.append(f"{page.relative_to(site)}: <{tag}> loads {url}")
    mathjax = site / "_static" / "mathjax" / "tex-chtml.js"
    if not mathjax.is_file():
        problems.append(f"the offline MathJax is missing ({mathjax})")
    return problems


def main(argv: list[str]) -> int:
    site = Path(argv[1] if len(argv) > 1 else "_build/html")
    problems = check(site)
    for p in problems:
        print("external load:", p)
    n = len(list(site.rglob("*.html")))
    print(f"check_site: {n} pages, {len(problems)} external loads")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
