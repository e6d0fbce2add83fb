r"""The notebooks' Markdown is plain CommonMark, so that it reads the same in JupyterLab, Colab and any Jupyter
as on the website: no MyST role (a bare Jupyter shows ``{numref}`fig-norm` `` as markup debris). Three kinds of
link carry what the roles carried:

- a figure:   ``[Fig. 4](#fig-variance)``  (the number is the site's; ``tools/notebook_markdown.py`` writes it)
- a paper:    ``[Vaswani et al. (2017)](bibliography.md#vaswani2017attention)`` in running text, and
              ``([Xiao et al., 2023](bibliography.md#xiao2023efficient))`` in parentheses
- a chapter:  ``[chapter 2](02_scaling.ipynb)``  (MyST resolves a link to a source file on its own)
- a lab's section: ``[§2.E](02_scaling_lab.ipynb)`` or ``[§2.E of the lab](02_scaling_lab.ipynb)``: in a
              notebook it opens the lab; on the site it lands on the section headed ``## 2.E …``
- a solution: ``[Solution to exercise 1.1: `attention` in solutions/ch01.py](https://…/solutions/ch01.py)``, a
              cell of its own below each exercise; a notebook reader follows the link to the file

On the website, ``to_roles`` turns the first two back into MyST's ``{numref}`` and ``{cite:t}``/``{cite:alp}``
before the page is parsed, so Sphinx numbers the figures and sphinxcontrib-bibtex formats and links the
citations, exactly as the roles did, and a lab section's link into a ``{ref}`` to the target ``lab_targets``
puts above that section's heading (``(lab-2e)=``, on the site only); and ``solutions_to_dropdowns`` turns each
solution link into a closed dropdown that holds the solution's function, included from ``solutions/`` (hidden
until clicked). This module is the one owner of that link grammar: the site extension (``course_site``) and the
notebook checker (``tools/notebook_markdown.py``) both import it.
"""

from __future__ import annotations

import json
import re

FIG_LINK = re.compile(r"\[Fig\. (\d+)\]\(#(fig-[A-Za-z0-9-]+)\)")
CITE_LINK = re.compile(r"\[([^\[\]]+)\]\(bibliography\.md#([A-Za-z0-9_:-]+)\)")
DOC_LINK = re.compile(r"\[([^\[\]]+)\]\(([A-Za-z0-9_]+\.(?:ipynb|md))\)")
#: "[§2.E](02_scaling_lab.ipynb)": a section of a chapter's lab; groups: text, chapter, letter, file
LAB_LINK = re.compile(r"\[(§(\d)\.([A-Z])(?: of the lab)?)\]\((0\2_[A-Za-z0-9_]+_lab\.ipynb)\)")
_LAB_SECTION = r"## (\d)\.([A-Z]) "  # a lab section's heading, "## 2.E The factor inside ..."; groups: chapter, letter
#: a lab section's heading opening a line of a cell's Markdown
LAB_SECTION = re.compile("^" + _LAB_SECTION, re.M)
#: the same heading opening a line of a notebook's JSON text (where each source line is a quoted string)
LAB_HEADING = re.compile('"' + _LAB_SECTION)
SOLUTION_LINK = re.compile(r"\[Solution to exercise (\d+\.\d+): `(\w+)` in solutions/(ch\d\d\.py)\]\(https://[^)\s]+\)")
# A textual citation ends with the year in parentheses; a parenthetical one is "Names, year".
TEXTUAL_YEAR = re.compile(r"\((\d{4})\)$")
PARENTHETICAL_YEAR = re.compile(r", (\d{4})$")


def to_roles(text: str) -> str:
    """The site's reading of the plain links: figure, citation and lab-section links become MyST roles."""
    text = FIG_LINK.sub(lambda m: f"{{numref}}`{m.group(2)}`", text)

    def cite(m: re.Match) -> str:
        role = "cite:t" if TEXTUAL_YEAR.search(m.group(1)) else "cite:alp"
        return f"{{{role}}}`{m.group(2)}`"

    text = CITE_LINK.sub(cite, text)
    return LAB_LINK.sub(lambda m: f"{{ref}}`{m.group(1)} <{lab_label(m.group(2), m.group(3))}>`", text)


def lab_label(chapter: str, letter: str) -> str:
    """The site's label of section ``chapter.letter`` of a lab: ("2", "E") → "lab-2e"."""
    return f"lab-{chapter}{letter.lower()}"


def lab_targets(notebook_json: str) -> str:
    """A lab notebook's JSON text with a MyST target line before each section heading ``## N.X …``, so that
    ``to_roles``'s ``{ref}`` lands on it. On the site only: a bare Jupyter would show the target as text."""
    return LAB_HEADING.sub(lambda m: f'"({lab_label(*m.groups())})=\\n", "## {m.group(1)}.{m.group(2)} ',
                           notebook_json)


def solutions_to_dropdowns(notebook_json: str) -> str:
    """A notebook's JSON text with each solution link (a cell of its own) replaced by a dropdown, closed until
    the reader clicks, that includes the solution's function from ``solutions/`` — escaped as the JSON string it
    sits in."""

    def dropdown(m: re.Match) -> str:
        key, name, file = m.groups()
        block = (f":::{{dropdown}} Solution to exercise {key}\n```{{literalinclude}} ../solutions/{file}\n"
                 f":language: python\n:pyobject: {name}\n```\n:::")
        return json.dumps(block)[1:-1]

    return SOLUTION_LINK.sub(dropdown, notebook_json)
