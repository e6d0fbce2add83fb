"""The package's own code, shown in a lesson (chapter 1 on): the code a chapter teaches is the code that runs.

``show_source(scaled_dot_product_attention)`` renders the function as the installed package holds it, with its
docstring shortened to its first line (the reference documentation keeps the rest), so a lesson never retypes
what the library already says.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from IPython.display import Markdown

from ._checks import describe

__all__ = ["show_source", "source_text"]


def source_text(obj: object) -> str:
    """The source of a function, method or class, dedented, with its docstring cut to its first line.

    Raises:
        TypeError: ``obj`` is not a function, method or class, or Python keeps no source for it (a builtin).
    """
    if not (inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isclass(obj)):
        raise TypeError(f"obj must be a function, method or class, got {describe(obj)}")
    try:
        text = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as err:  # builtins, or code typed into a prompt
        raise TypeError(f"obj must be defined in a source file, got {describe(obj)} ({err})") from None
    node = ast.parse(text).body[0]
    doc = ast.get_docstring(node, clean=False)
    if doc is None:
        return text.rstrip() + "\n"
    first = node.body[0]  # the docstring's expression statement
    lines = text.splitlines()
    indent = lines[first.lineno - 1][: len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())]
    summary = inspect.cleandoc(doc).splitlines()[0]
    kept = [*lines[: first.lineno - 1], f'{indent}"""{summary} …"""', *lines[first.end_lineno:]]
    return "\n".join(kept).rstrip() + "\n"


def show_source(obj: object) -> Markdown:
    """:func:`source_text` as a Python code block that JupyterLab, Colab and the website all render."""
    return Markdown(f"```python\n{source_text(obj)}```")
