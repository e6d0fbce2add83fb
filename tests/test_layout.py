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


#: The longest a class may be, and the layer a lesson shows whole (#43: nanoGPT's CausalSelfAttention is the bar).
MAX_CLASS_LINES, MAX_FORWARD_LINES = 230, 40


@pytest.mark.parametrize("path", LIBRARY + EXPERIMENTS, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_class_reads_in_one_sitting(path):
    """No class over 230 lines; a forward method at most 40, signature and docstring included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            lines = node.end_lineno - node.lineno + 1
            assert lines <= MAX_CLASS_LINES, f"{path.name}: class {node.name} has {lines} lines"
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and method.name == "forward" and node.name in (
                        "MultiHeadAttention",):
                    lines = method.end_lineno - method.lineno + 1
                    assert lines <= MAX_FORWARD_LINES, f"{node.name}.forward has {lines} lines"


def test_the_exercise_registry_is_not_a_circle():
    """The chapter modules import checking.py to register their exercises; checking.py imports none of them (the
    package's __init__ does), so the imports run one way."""
    exercises = PACKAGE / "exercises"
    chapters = {f"attention_course.exercises.{p.stem}" for p in exercises.glob("chapter*.py")}
    assert len(chapters) == 7
    imported = {m for m, _ in _imports(exercises / "checking.py")}
    imported |= {f"{m}.{n}" for m, names in _imports(exercises / "checking.py") for n in names}
    assert not imported & chapters, imported & chapters
    for chapter in exercises.glob("chapter*.py"):
        assert "attention_course.exercises.checking" in {m for m, _ in _imports(chapter)}, chapter.name


def test_reading_the_package_names_what_exists():
    """book/reading_the_package.md: every function or class its chapter table tells a learner to read is found in
    one of the modules that row names, and every module of the library appears on the page."""
    import importlib
    import re

    page = (PACKAGE.parents[1] / "book" / "reading_the_package.md").read_text()
    rows = [line.split("|")[1:-1] for line in page.splitlines() if re.match(r"\| \d\. ", line)]
    assert len(rows) == 7
    for _, modules, names in rows:
        found = [importlib.import_module("attention_course." + m.removesuffix(".py").replace("/", "."))
                 for m in re.findall(r"`([\w/]+\.py)`", modules)]
        for name in re.findall(r"`([\w.]+)`", names):
            if name.endswith(".py"):
                continue
            head, *rest = name.split(".")
            owners = [getattr(m, head) for m in found if hasattr(m, head)]
            assert owners, f"{name} is in none of {modules.strip()}"
            obj = owners[0]
            for part in rest:
                obj = getattr(obj, part)
    named = set(re.findall(r"`([\w/]+\.py)`", page))
    missing = [p.name for p in LIBRARY if p.parent == PACKAGE and p.name not in named and p.name != "__init__.py"]
    assert not missing, f"modules the page does not place: {missing}"
