"""The fingerprint of the code behind a results file (attention_course.fingerprint): it follows the code a script
runs, and changes with a line of code, a constant, a setting or a file, not with documentation or layout."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap

import pytest

from attention_course import fingerprint
from attention_course.fingerprint import code_closure, code_fingerprint

SCRIPT = '''
"""A benchmark script."""
from attention_course.train import mean_std

STEPS = 300
ARMS = {"b", "a"}


def helper(x):
    """Documented."""
    return x * 2  # a comment


def main():
    return mean_std([helper(STEPS), 1.0]), sorted(ARMS)
'''


def _load(tmp_path, source: str, name: str = "bench_x"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_fingerprint_follows_the_script_its_constants_and_the_package(tmp_path):
    m = _load(tmp_path, SCRIPT)
    names = set(code_closure([m.main])[0])
    assert {"<script>.main", "<script>.helper", "<script>:STEPS", "<script>:ARMS"} <= names
    assert "attention_course.train.mean_std" in names  # the package's code, followed
    assert not any(n.startswith("torch") or "_checks" in n for n in names)  # not PyTorch's, nor input checks


@pytest.mark.parametrize(
    "change",
    [
        ("return x * 2", "return x * 3"),  # a planted one-line change to the code
        ("STEPS = 300", "STEPS = 301"),  # a constant the code reads
        ('ARMS = {"b", "a"}', 'ARMS = {"b", "c"}'),
    ],
)
def test_a_changed_line_of_code_changes_the_fingerprint(tmp_path, change):
    before = code_fingerprint([_load(tmp_path, SCRIPT, "bench_a").main], {"steps": 300})
    after = code_fingerprint([_load(tmp_path, SCRIPT.replace(*change), "bench_b").main], {"steps": 300})
    assert before != after


@pytest.mark.parametrize(
    "change",
    [
        ('"""Documented."""', '"""Documented better."""'),
        ("# a comment", "# another comment"),
        ("return x * 2", "return (x\n            * 2)"),
    ],
)
def test_documentation_and_layout_leave_the_fingerprint_alone(tmp_path, change):
    before = code_fingerprint([_load(tmp_path, SCRIPT, "bench_c").main])
    after = code_fingerprint([_load(tmp_path, SCRIPT.replace(*change), "bench_d").main])
    assert before == after


def test_settings_and_files_are_part_of_the_fingerprint(tmp_path):
    m = _load(tmp_path, SCRIPT)
    data = tmp_path / "corpus.txt"
    data.write_text("abc")
    base = code_fingerprint([m.main, data], {"steps": 300})
    assert base != code_fingerprint([m.main, data], {"steps": 301})
    data.write_text("abd")
    assert base != code_fingerprint([m.main, data], {"steps": 300})


def test_a_package_change_reaches_the_fingerprint(monkeypatch, tmp_path):
    m = _load(tmp_path, SCRIPT)
    before = code_fingerprint([m.main])
    real = fingerprint._source_tree

    def planted(obj):  # mean_std's source as if one line of it had been edited
        if getattr(obj, "__qualname__", "") == "mean_std":
            return fingerprint.ast.parse("def mean_std(values):\n    return 0.0, 0.0\n")
        return real(obj)

    monkeypatch.setattr(fingerprint, "_source_tree", planted)
    assert code_fingerprint([m.main]) != before


def test_the_fingerprint_refuses_what_is_not_code():
    with pytest.raises(TypeError, match="code must hold functions"):
        code_fingerprint([3])
    with pytest.raises(TypeError, match="settings must be JSON-ready"):
        code_fingerprint([test_the_fingerprint_refuses_what_is_not_code], {"x": object()})


def test_late_imports_and_computing_input_helpers_are_followed():
    from attention_course import train

    names = set(code_closure([train.exact_match])[0])
    assert "attention_course.seq2seq.greedy_decode" in names  # imported inside exact_match's body
    from attention_course import attention

    names = set(code_closure([attention.scaled_dot_product_attention])[0])
    assert "attention_course._checks.attention_inputs" in names  # default scale, upcasting: followed
    assert not any(n.startswith("attention_course._checks.check_") for n in names)  # validators: not


def test_a_function_inside_a_constant_counts_by_its_name(tmp_path):
    source = SCRIPT.replace('ARMS = {"b", "a"}', 'ARMS = {"b": abs, "a": max}')
    before = code_fingerprint([_load(tmp_path, source, "bench_e").main])
    after = code_fingerprint([_load(tmp_path, source.replace('"a": max', '"a": min'), "bench_f").main])
    assert before != after


def test_the_syntax_tree_text_is_the_same_under_a_later_python(monkeypatch):
    """Python 3.12 gave function definitions a new field, ``type_params``, empty where code does not use it;
    ``ast.dump`` wrote it, so every fingerprint made under 3.12 (Colab, the GPU machines) differed from 3.11's."""
    tree = ast.parse("def f(x, *, y=2):\n    return [x + y, None]\n")
    before = fingerprint._portable_dump(tree)
    monkeypatch.setattr(ast.FunctionDef, "_fields", (*ast.FunctionDef._fields, "type_params"))
    tree.body[0].type_params = []
    assert fingerprint._portable_dump(tree) == before
    tree.body[0].type_params = [ast.Name("T")]  # a field in use is part of the text
    assert fingerprint._portable_dump(tree) != before
    assert fingerprint._portable_dump(ast.parse("f(1)")) != fingerprint._portable_dump(ast.parse("f(2)"))


def test_process_state_is_not_code(monkeypatch):
    """The kernel modules' lazily imported triton and their caches of fitted and tuned tiles change with what ran
    earlier in the process; the fingerprint of code that reaches them must not (it did: a fresh clone's test order
    gave chapter 6's results files another fingerprint)."""
    from attention_course.kernels import flash_kernels, flash_triton

    before = code_closure([flash_triton.triton_attention])
    monkeypatch.setattr(flash_triton, "_FITTED", {("forward", "cuda", "bf16", 64, (128, 64)): (64, 64)})
    monkeypatch.setattr(flash_triton, "_TUNED", {("forward", "cuda", "bf16", 64, True, False): (64, 64, 4, 3)})
    monkeypatch.setattr(flash_kernels, "tl", object())

    class JITFunction:  # what triton.jit returns, the kernel's Python function as .fn: kernels_for rebinds the helpers
        def __init__(self, fn):
            self.fn = fn

    for name, helper in flash_kernels.HELPERS.items():
        monkeypatch.setattr(flash_kernels, name, JITFunction(helper))
    assert code_closure([flash_triton.triton_attention]) == before
    assert any(name.endswith("._load_rows") for name in before[0])  # the helpers' code, both times
    assert any(name.endswith(".forward_kernel") for name in before[0])  # and the kernels'
    assert not [name for name in before[0] if name.endswith((":tl", ":_FITTED", ":_TUNED"))]


def test_a_scripts_cache_is_process_state_not_code(tmp_path):
    """gpt_tokens.py caches its tokenised corpora in _CORPORA: empty when the script is imported, full after a run.
    The fingerprint written at the end of a run must be the one a fresh import recomputes."""
    m = _load(tmp_path, '''
        _CORPORA: dict = {}


        def main():
            if not _CORPORA:
                _CORPORA["characters"] = 1
            return _CORPORA
    ''', name="bench_cache")
    before = code_fingerprint([m.main], {"seeds": [0]})
    m.main()
    assert m._CORPORA and code_fingerprint([m.main], {"seeds": [0]}) == before
