"""The fingerprint of the code and settings behind a results file (chapters 2–7; ``EVIDENCE.md`` rule 11).

The benchmark scripts pass the functions they ran to :func:`attention_course.measure.write_results`, which stores
:func:`code_fingerprint`; ``tests/test_results_files.py`` recomputes it from today's code
(:func:`recompute_fingerprint`), so a file the code no longer produces fails on any machine, in seconds, without
training anything. ``tools/restamp_results.py`` records a reviewed change that cannot move the stored numbers.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import json
import sys
import textwrap
import types
from collections.abc import Iterable, Mapping
from pathlib import Path

from ._checks import describe

__all__ = ["code_closure", "code_fingerprint", "fingerprint_names", "recompute_fingerprint"]

PACKAGE = __name__.split(".")[0]


_CONSTANT_TYPES = (int, float, complex, str, bytes, bool, type(None))
_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, type)


def _is_constant(value: object, depth: int = 0) -> bool:
    """A plain value whose repr is its content (numbers, strings, and tuples/lists/dicts/sets of them, where a
    function inside a container, such as ``{"gelu": F.gelu}``, counts by its qualified name)."""
    if isinstance(value, _CONSTANT_TYPES) or (depth and isinstance(value, _CALLABLES)):
        return True
    if depth > 4:
        return False
    if isinstance(value, (tuple, list, set, frozenset)):
        return all(_is_constant(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_is_constant(k, depth + 1) and _is_constant(v, depth + 1) for k, v in value.items())
    return False


def _functions_in(value: object, depth: int = 0) -> list[object]:
    """The functions and classes inside a constant's containers (as :func:`_is_constant` walks them)."""
    if isinstance(value, (types.FunctionType, type)):
        return [value] if depth else []
    if depth > 4:
        return []
    if isinstance(value, dict):
        parts = [part for pair in value.items() for part in pair]
    else:
        parts = list(value) if isinstance(value, (tuple, list)) else []
    return [f for part in parts for f in _functions_in(part, depth + 1)]


def _stable_repr(value: object) -> str:
    """repr, with sets sorted (a set's order changes with the process's string hashing, PYTHONHASHSEED) and a
    function named by its module and qualified name (its repr holds a memory address)."""
    if isinstance(value, _CALLABLES):
        return f"<{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}>"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(map(_stable_repr, value))})"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({[_stable_repr(v) for v in value]})"
    if isinstance(value, dict):
        return f"dict({[(_stable_repr(k), _stable_repr(v)) for k, v in value.items()]})"
    return repr(value)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    """Drop every docstring: a fingerprint follows what code does, not how it is documented."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _portable_dump(node: object) -> str:
    """A syntax tree as text that reads the same under every Python from 3.11: node types and their fields by name,
    empty ones left out (a later Python's new fields, such as 3.12's ``type_params``, are empty where code does not
    use them; ``ast.dump`` writes them, so a fingerprint made under 3.12 differed from one made under 3.11)."""
    if isinstance(node, ast.AST):
        fields = ", ".join(f"{f}={_portable_dump(v)}" for f in node._fields
                           if (v := getattr(node, f, None)) not in (None, []))
        return f"{type(node).__name__}({fields})"
    if isinstance(node, list):
        return f"[{', '.join(_portable_dump(v) for v in node)}]"
    return repr(node)


def _source_tree(obj: object) -> ast.AST:
    source = textwrap.dedent(inspect.getsource(obj))
    return _strip_docstrings(ast.parse(source))


def _references(tree: ast.AST) -> set[tuple[str, ...]]:
    """Every dotted name the code reads: ``x`` as ("x",), ``hd.fit`` as ("hd", "fit")."""
    found = set()
    for node in ast.walk(tree):
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            chain.append(node.id)
            chain.reverse()
            for i in range(1, len(chain) + 1):
                found.add(tuple(chain[:i]))
    return found


#: Code a fingerprint does not follow, with the reason: the input checks (``check_*``, which validate an argument
#: and return it as given or as the plain Python value it stands for) compute nothing a result depends on — the
#: other helpers of ``_checks`` (default scales, upcasting, broadcasting) are followed; recording (provenance,
#: writing and reading files) and this module describe a result without making it; figures draw it. Editing them
#: leaves every stored result as true as it was.
UNFOLLOWED = (
    f"{PACKAGE}._checks.check_",
    f"{PACKAGE}._checks.describe",
    f"{PACKAGE}.evidence.",
    f"{PACKAGE}.machines.",
    f"{PACKAGE}.fingerprint.",
    f"{PACKAGE}.plots.",
    f"{PACKAGE}._files.",
    f"{PACKAGE}.measure.provenance",
    f"{PACKAGE}.measure.write_results",
    f"{PACKAGE}.measure.read_results",
    f"{PACKAGE}.measure.device_name",
    f"{PACKAGE}.measure._git_commit",
)


#: Module-level names that hold a process's state, not code: their values depend on what ran earlier in the
#: process (triton imported lazily, the tile sizes that fitted the GPU at hand), so a fingerprint that read them
#: would change with the order of the tests.
RUNTIME_STATE = (
    f"{PACKAGE}.kernels.flash_kernels:tl",
    f"{PACKAGE}.kernels.flash_triton:_FITTED",
    f"{PACKAGE}.kernels.flash_triton:_TUNED",
    "<script>:_CORPORA",  # gpt_tokens.py's cache of the corpora it tokenised: empty on import, full after a run
)


def _owned(obj: object, roots: set[str]) -> bool:
    """Code of the course's package or of a file the fingerprint was started from (a benchmark script), unless
    it is :data:`UNFOLLOWED`."""
    module = getattr(obj, "__module__", None) or ""
    name = f"{module}.{getattr(obj, '__qualname__', '')}"
    if any(name == skip or (skip.endswith((".", "_")) and name.startswith(skip)) for skip in UNFOLLOWED):
        return False
    return module.split(".")[0] == PACKAGE or module in roots


def _owned_module(module: str, roots: set[str]) -> bool:
    """Whether a module's constants count: the package's (less :data:`UNFOLLOWED`) and the starting script's."""
    if any(skip.endswith(".") and module + "." == skip for skip in UNFOLLOWED):
        return False
    return module.split(".")[0] == PACKAGE or module in roots


def _local_imports(tree: ast.AST, module: str) -> dict[str, object]:
    """Names bound by ``from … import …`` inside a function's body (a late import, to avoid a cycle), resolved."""
    found = {}
    package = module.rpartition(".")[0] if module.count(".") else module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == PACKAGE):
            try:
                source = importlib.import_module(importlib.util.resolve_name("." * node.level + (node.module or ""),
                                                                             package))
            except (ImportError, ValueError):
                continue
            for alias in node.names:
                found[alias.asname or alias.name] = getattr(source, alias.name, None)
    return found


def _unwrap(obj: object) -> object:
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return getattr(obj, "fn", obj) if type(obj).__name__ == "JITFunction" else obj  # a Triton kernel's Python


def _namespace(obj: object) -> dict:
    if isinstance(obj, types.FunctionType):
        return obj.__globals__
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    return vars(module) if module is not None else {}


def code_fingerprint(code: Iterable[object], settings: Mapping[str, object] | None = None) -> str:
    """SHA-256 (hex) of the code that produced a result, and of the settings it ran with.

    ``code`` holds the functions (or classes) that were run, typically a benchmark script's entry point; files
    (:class:`pathlib.Path`) may be added, such as a corpus, and count by their bytes. From each function the hash
    follows, transitively, every name its code reads that resolves to a function, class or module-level constant of
    the course's package or of the starting function's own module: the experiment, the models it builds, the
    training loop, the script's constants. Each is hashed by its syntax tree without docstrings or comments, so
    documentation and formatting do not change the fingerprint and a changed line of code does. Code outside the
    package (PyTorch, NumPy) is not followed: its version is in the results file's provenance.

    What it cannot see: methods reached only through an object whose class no followed code names, and code
    chosen by a string at run time. Start from enough entry points to name them.

    Raises:
        TypeError: an entry of ``code`` is not a function, class or path, or ``settings`` is not JSON-ready.
    """
    seen, files = code_closure(code)
    try:
        settings_text = json.dumps(dict(settings or {}), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"settings must be JSON-ready, got {err}") from None
    payload = json.dumps({"code": sorted(seen.items()), "files": files, "settings": settings_text}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _entry(obj: object) -> types.FunctionType | type:
    """A starting point of a fingerprint: a function or class (a Triton kernel counts by its Python function)."""
    obj = _unwrap(obj)
    if not isinstance(obj, (types.FunctionType, type)):
        raise TypeError(f"code must hold functions, classes or paths, got {describe(obj)}")
    return obj


def code_closure(code: Iterable[object]) -> tuple[dict[str, str], dict[str, str]]:
    """What :func:`code_fingerprint` hashes: {qualified name: syntax tree or value} for every piece of code
    followed from ``code``, and {file name: SHA-256} for its paths. The starting functions' module is named
    ``<script>`` (it is ``__main__`` when a script runs, another name when a test imports it)."""
    roots = set()
    todo: list[tuple[str, object]] = []
    files: dict[str, str] = {}
    for obj in code:
        if isinstance(obj, Path):
            files[obj.name] = hashlib.sha256(obj.read_bytes()).hexdigest()
            continue
        obj = _entry(obj)
        roots.add(obj.__module__)
        todo.append((f"{obj.__module__}.{obj.__qualname__}", obj))
    seen: dict[str, str] = {}
    while todo:
        name, obj = todo.pop()
        if name in seen:
            continue
        if not isinstance(obj, (types.FunctionType, type)):  # a constant, or a dataclass instance and its class
            seen[name] = _stable_repr(obj)
            if dataclasses.is_dataclass(obj):
                todo.append((f"{type(obj).__module__}.{type(obj).__qualname__}", type(obj)))
            for fn in _functions_in(obj):  # a table of the package's functions: their code counts too
                if _owned(fn, roots):
                    todo.append((f"{fn.__module__}.{fn.__qualname__}", fn))
            continue
        tree = _source_tree(obj)
        seen[name] = _portable_dump(tree)
        namespace = dict(_namespace(obj))
        namespace.update(_local_imports(tree, getattr(obj, "__module__", "")))
        for chain in _references(tree):
            if chain[0] not in namespace:
                continue
            if chain[0].startswith("__"):
                continue  # __file__, __name__: where the code is, not what it does
            target, owner = namespace[chain[0]], getattr(obj, "__module__", "")
            for attr in chain[1:]:  # only through modules: hd.fit, not x.shape
                if not isinstance(target, types.ModuleType):
                    break
                owner, target = target.__name__, getattr(target, attr, None)
            else:
                target = _unwrap(target)
                if isinstance(target, (types.FunctionType, type)):
                    if _owned(target, roots):
                        todo.append((f"{target.__module__}.{target.__qualname__}", target))
                elif ((_is_constant(target) or dataclasses.is_dataclass(target)) and _owned_module(owner, roots)
                      and f"{owner}:{chain[-1]}" not in RUNTIME_STATE
                      and not (owner in roots and f"<script>:{chain[-1]}" in RUNTIME_STATE)):
                    todo.append((f"{owner}:{chain[-1]}", target))

    def portable(key: str) -> str:
        for root in roots:
            if key.startswith(root + ".") or key.startswith(root + ":"):
                return "<script>" + key[len(root):]
        return key

    return {portable(k): v for k, v in seen.items()}, files


def fingerprint_names(code: Iterable[object]) -> list[str]:
    """How a results file names the entry points of :func:`code_fingerprint`, so a test can find them again:
    ``"<script>.fn"`` for a function of the benchmark script, ``"package.module.fn"`` for the package's, and
    ``"path:<relative path>"`` for a file (relative to the checkout)."""
    names = []
    checkout = Path(__file__).resolve().parents[2]
    for obj in code:
        if isinstance(obj, Path):
            path = obj.resolve()
            names.append(f"path:{path.relative_to(checkout) if path.is_relative_to(checkout) else path}")
            continue
        obj = _entry(obj)
        module = getattr(obj, "__module__", "")
        script = "<script>" if module.split(".")[0] != PACKAGE else module
        names.append(f"{script}.{getattr(obj, '__qualname__', describe(obj))}")
    return names


def _script_of(record: Mapping[str, object], checkout: Path) -> Path:
    command = str(record["provenance"].get("command", ""))
    scripts = [word for word in command.split() if word.endswith(".py")]
    if not scripts:
        raise ValueError(f"record must name the script that wrote it in provenance.command, got {command!r}")
    return checkout / scripts[0]


def _load_script(path: Path) -> types.ModuleType:
    name = f"_results_script_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def recompute_fingerprint(record: Mapping[str, object], checkout: str | Path) -> str:
    """The fingerprint today's code gives a results record: its script (``provenance.command``, under
    ``checkout``) is imported, the entry points its ``provenance.fingerprint.code`` names are found again, and
    :func:`code_fingerprint` runs on them with the record's settings. Equal to the stored one: the file is what the
    code would write.

    Raises:
        ValueError: the record has no fingerprint, or names an entry point the script no longer has.
    """
    if not isinstance(record, Mapping) or not isinstance(record.get("provenance"), Mapping):
        raise TypeError(f"record must be a results record (read_results), got {describe(record)}")
    if not isinstance(checkout, (str, Path)):
        raise TypeError(f"checkout must be the course checkout's folder, got {describe(checkout)}")
    checkout = Path(checkout)
    stored = record["provenance"].get("fingerprint")
    if not isinstance(stored, Mapping):
        raise ValueError("record must carry provenance.fingerprint (written by write_results); got none")
    script = None
    code: list[object] = []
    for name in stored["code"]:
        if name.startswith("path:"):
            code.append(checkout / name[len("path:"):])
            continue
        owner, _, qualname = name.rpartition(".")
        if owner == "<script>":
            script = script or _load_script(_script_of(record, checkout))
            module = script
        else:
            module = importlib.import_module(owner)
        obj = module
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"record names {name!r} as the code that wrote it; today's code has no such function")
        code.append(obj)
    return code_fingerprint(code, record["settings"])
