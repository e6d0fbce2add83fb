"""The package's own code, shown in a lesson (chapter 1 on): the code a chapter teaches is the code that runs.

``show_source(scaled_dot_product_attention)`` renders the function as the installed package holds it, its
docstring cut to its first line (the reference documentation keeps the rest), so a lesson never retypes what the
library already says.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

from ._checks import describe

__all__ = ["show_source", "source_text"]


def source_text(obj: object) -> str:
    """The source of a function, method or class, dedented, its docstring cut to its first line (``…``).

    The source is shown as written wherever cutting could change it: a docstring on the ``def`` line, code after
    the docstring on its closing line, a docstring of one line or with an empty first line.

    Raises:
        TypeError: ``obj`` is not a function, method or class defined in a source file (a builtin, a lambda, or
            code typed at a prompt).
    """
    if not (inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isclass(obj)):
        raise TypeError(f"obj must be a function, method or class, got {describe(obj)}")
    if getattr(obj, "__name__", "") == "<lambda>":
        raise TypeError(f"obj must be a named function (a lambda's source is the line around it), got {describe(obj)}")
    try:
        text = textwrap.dedent(inspect.getsource(obj))
    except OSError as err:  # no file behind it: code typed at a prompt or built with exec
        raise TypeError(f"obj must be defined in a source file, got {describe(obj)} ({err})") from None
    lines = text.splitlines()
    node = ast.parse(text).body[0]
    first = node.body[0]
    doc = ast.get_docstring(node, clean=False)
    opening = lines[first.lineno - 1] if doc is not None else ""
    if (doc is None or first.lineno == first.end_lineno or first.lineno == node.lineno
            or not lines[first.end_lineno - 1].rstrip().endswith(('"""', "'''"))
            or opening.strip().lstrip("rRbBuU") in ('"""', "'''")):
        return text.rstrip() + "\n"  # nothing to cut, or cutting could change what is shown
    quotes = '"""' if '"""' in opening else "'''"
    kept = [*lines[: first.lineno - 1], f"{opening.rstrip()} …{quotes}", *lines[first.end_lineno:]]
    return "\n".join(kept).rstrip() + "\n"


def show_source(obj: object):
    """:func:`source_text` as a Python code block that JupyterLab, Colab and the website all render (an
    ``IPython.display.Markdown``; IPython is imported here, so the rest of the module needs no notebook)."""
    from IPython.display import Markdown

    text = source_text(obj)
    fence = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))  # longer than any run inside
    return Markdown(f"{fence}python\n{text}{fence}")
