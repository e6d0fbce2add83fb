"""Showing the package's own code in a lesson (attention_course.source)."""

from __future__ import annotations

import pytest

from attention_course import scaled_dot_product_attention
from attention_course.attention import _softmax_torch
from attention_course.source import show_source, source_text


# Docstrings of every shape the cut must leave intact or cut safely.
def one_line():
    """Only this."""
    return 1


def empty_first():
    """
    Summary on the second line.
    """
    return 2


def raw(x):
    r"""A \sqrt{x} summary.

    More.
    """
    return x


def tail():
    """Two lines
    here."""; y = 3  # noqa: E702 - code after the docstring on its closing line
    return y


def fenced():
    """Shows a fence.

    ```
    """
    return "```"


def test_the_source_is_the_packages_with_its_docstring_cut_to_one_line():
    text = source_text(scaled_dot_product_attention)
    assert text.startswith("def scaled_dot_product_attention(")
    assert "scores = (x.q @ x.k.transpose(-2, -1)) * x.scale" in text  # the body, as the package runs it
    assert '"""Attention(Q, K, V) = softmax(Q Kᵀ · scale) V' in text and text.count('"""') == 2
    assert "Returns:" not in text and "Raises:" not in text  # the rest of the docstring is left out
    compile(text, "<shown>", "exec")  # what is shown is still valid Python


def test_a_function_without_a_docstring_is_shown_whole():
    text = source_text(_softmax_torch)
    assert text.startswith("def _softmax_torch(") and text.endswith("\n")


def test_show_source_renders_a_python_block():
    md = show_source(scaled_dot_product_attention)
    assert md.data.startswith("```python\ndef scaled_dot_product_attention(") and md.data.endswith("```")


@pytest.mark.parametrize("obj", [3, "scaled_dot_product_attention", len])
def test_what_has_no_source_is_refused_by_name(obj):
    with pytest.raises(TypeError, match="obj must be"):
        source_text(obj)


def test_a_function_typed_at_a_prompt_has_no_source_to_show():
    namespace: dict = {}
    exec("def typed(): pass", namespace)  # noqa: S102 - a function with no file behind it
    with pytest.raises(TypeError, match="obj must be defined in a source file"):
        source_text(namespace["typed"])


@pytest.mark.parametrize("obj, shown", [
    (one_line, 'def one_line():\n    """Only this."""\n    return 1\n'),
    (empty_first, 'def empty_first():\n    """\n    Summary on the second line.\n    """\n    return 2\n'),
    (raw, 'def raw(x):\n    r"""A \\sqrt{x} summary. …"""\n    return x\n'),
    (tail, 'def tail():\n    """Two lines\n    here."""; y = 3  # noqa: E702 - code after the docstring on its '
           'closing line\n    return y\n'),
])
def test_a_docstring_is_cut_only_where_nothing_else_changes(obj, shown):
    assert source_text(obj) == shown
    compile(source_text(obj), "<shown>", "exec")


def test_a_fence_inside_the_source_gets_a_longer_fence():
    md = show_source(fenced)
    assert md.data.startswith("````python\n") and md.data.endswith("\n````")


def test_a_lambda_is_refused_by_name():
    with pytest.raises(TypeError, match="obj must be a named function"):
        source_text(lambda: 1)
