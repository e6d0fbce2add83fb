"""The package's shape (DESIGN.md, "Library and experiments"), checked on its source: the library never imports the
experiments, no module reaches into another module's private names, masks.py depends on no attention module, and
every library module stays short enough to read in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attention_course"
LIBRARY = sorted(PACKAGE.glob("*.py")) + sorted((PACKAGE / "kernels").glob("*.py"))
EXPERIMENTS = sorted((PACKAGE / "experiments").glob("*.py"))
MAX_LINES = 500


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import in ``path``, relative imports resolved against the package."""
    tree = ast.parse(path.read_text())
    package = path.parent.relative_to(PACKAGE.parent).as_posix().replace("/", ".")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return found


def test_the_package_has_a_library_and_experiments():
    assert len(LIBRARY) > 10 and EXPERIMENTS


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_library_module_imports_no_experiment_and_no_private_name(path):
    for module, names in _imports(path):
        assert not module.startswith("attention_course.experiments"), f"{path.name} imports {module}"
        if module.startswith("attention_course."):
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            assert not private, f"{path.name} reaches into {module}'s private names {private}"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_experiment_uses_only_public_library_names(path):
    for module, names in _imports(path):
        private = [n for n in names if n.startswith("_")]
        assert not (module.startswith("attention_course") and private), (
            f"experiments/{path.name} reaches into {module}'s private names {private}")


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_library_module_is_short_enough_to_read(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines (more than {MAX_LINES}): split it"


def test_masks_depend_on_no_attention_module():
    """masks.py uses only the shared input checks, which import nothing else of the package."""
    modules = {m for m, _ in _imports(PACKAGE / "masks.py")} - {"attention_course._checks"}
    assert not any(m.startswith("attention_course.") for m in modules), modules
    checks = {m for m, _ in _imports(PACKAGE / "_checks.py")}
    assert not any(m.startswith("attention_course.") for m in checks), checks
