r"""The notebooks' Markdown is plain CommonMark, so that it reads the same in JupyterLab, Colab and any Jupyter
as on the website: no MyST role (a bare Jupyter shows ``{numref}`fig-norm` `` as markup debris). Three kinds of
link carry what the roles carried:

- a figure:   ``[Fig. 4](#fig-variance)``  (the number is the site's; ``tools/notebook_markdown.py`` writes it)
- a paper:    ``[Vaswani et al. (2017)](bibliography.md#vaswani2017attention)`` in running text, and
              ``([Xiao et al., 2023](bibliography.md#xiao2023efficient))`` in parentheses
- a chapter:  ``[chapter 2](02_scaling.ipynb)``  (MyST resolves a link to a source file on its own)

On the website, ``to_roles`` turns the first two back into MyST's ``{numref}`` and ``{cite:t}``/``{cite:alp}``
before the page is parsed, so Sphinx numbers the figures and sphinxcontrib-bibtex formats and links the
citations, exactly as the roles did. This module is the one owner of that link grammar: the site extension
(``course_site``) and the notebook checker (``tools/notebook_markdown.py``) both import it.
"""

from __future__ import annotations

import re

FIG_LINK = re.compile(r"\[Fig\. (\d+)\]\(#(fig-[A-Za-z0-9-]+)\)")
CITE_LINK = re.compile(r"\[([^\[\]]+)\]\(bibliography\.md#([A-Za-z0-9_:-]+)\)")
DOC_LINK = re.compile(r"\[([^\[\]]+)\]\(([A-Za-z0-9_]+\.(?:ipynb|md))\)")
# A textual citation ends with the year in parentheses; a parenthetical one is "Names, year".
TEXTUAL_YEAR = re.compile(r"\((\d{4})\)$")
PARENTHETICAL_YEAR = re.compile(r", (\d{4})$")


def to_roles(text: str) -> str:
    """The site's reading of the plain links: figure and citation links become MyST roles."""
    text = FIG_LINK.sub(lambda m: f"{{numref}}`{m.group(2)}`", text)

    def cite(m: re.Match) -> str:
        role = "cite:t" if TEXTUAL_YEAR.search(m.group(1)) else "cite:alp"
        return f"{{{role}}}`{m.group(2)}`"

    return CITE_LINK.sub(cite, text)
