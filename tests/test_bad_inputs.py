"""Every public name of the package meets bad input with a clear error (issue #13).

The cases live in tests/bad_inputs/, one module per package module. This file runs them all and checks that
they cover every name in every module's ``__all__``: a new public function without a bad-input case fails here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections import Counter
from pathlib import Path

import pytest
from bad_inputs import BadInput

import attention_course

CASE_MODULES = sorted(p.stem for p in (Path(__file__).parent / "bad_inputs").glob("*.py") if p.stem != "__init__")
CASES: list[BadInput] = [
    c for m in CASE_MODULES for c in importlib.import_module(f"bad_inputs.{m}").CASES
]
#: Records a function returns and no function takes back as input (each case module lists its own as RESULTS):
#: there is no bad input to give them.
RESULT_TYPES = {
    id(r): r for m in CASE_MODULES for r in getattr(importlib.import_module(f"bad_inputs.{m}"), "RESULTS", ())
}


def _public_names() -> dict[str, object]:
    """``module.name`` → object for every name in every module's ``__all__`` (the package and experiments)."""
    modules = ["attention_course"] + [
        m.name for m in pkgutil.walk_packages(attention_course.__path__, "attention_course.")
    ]
    found = {}
    for name in modules:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", []):
            obj = getattr(module, public)
            home = f"{obj.__module__}.{obj.__qualname__}" if hasattr(obj, "__qualname__") else f"{name}.{public}"
            found.setdefault(home if home.startswith("attention_course") else f"{name}.{public}", obj)
    return found


def _takes_arguments(obj: object) -> bool:
    try:
        return bool(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return True


def _needs_a_case(key: str, obj: object) -> bool:
    """Constants, type aliases and functions of no arguments take no input; result records are listed in
    RESULT_TYPES."""
    if not callable(obj) or getattr(obj, "__module__", "") == "typing" or not _takes_arguments(obj):
        return False
    return id(obj) not in RESULT_TYPES


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_a_clear_error(bad: BadInput):
    with pytest.raises(Exception) as info:
        bad.call()
    error = info.value
    assert type(error) is bad.error, f"expected {bad.error.__name__}, got {type(error).__name__}: {error}"
    message = str(error)
    named = re.search(rf"(?<![\w.]){re.escape(bad.arg)}(?!\w)", message)
    assert named, f"the message does not name {bad.arg!r}: {message}"
    assert "got" in message, f"the message does not say what it got: {message}"
    assert re.search(r"must|expect", message), f"the message does not say what was expected: {message}"
    for word in bad.says:
        assert word in message, f"the message does not say {word!r}: {message}"


def test_case_ids_are_distinct():
    repeated = [i for i, n in Counter(c.id for c in CASES).items() if n > 1]
    assert not repeated


def test_there_are_at_least_80_cases():
    assert len(CASES) >= 80


def test_every_public_name_has_a_bad_input_case():
    covered = {id(obj) for c in CASES for obj in c.covers}
    missing = [key for key, obj in _public_names().items() if _needs_a_case(key, obj) and id(obj) not in covered]
    assert not missing, f"public names without a bad-input case: {missing}"


def test_result_types_are_records():
    for record in RESULT_TYPES.values():
        assert inspect.isclass(record), record
        assert issubclass(record, tuple) or hasattr(record, "__dataclass_fields__"), record


def test_the_coverage_check_can_fail():
    """The enumeration sees every module's names: a package function is reported until a case covers it."""
    names = _public_names()
    assert "attention_course.attention.softmax" in names
    assert "attention_course.experiments.heads.head_sweep" in names
    assert len([k for k, o in names.items() if _needs_a_case(k, o)]) > 100
