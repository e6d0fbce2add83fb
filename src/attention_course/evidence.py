"""Stored evidence that stays true on every reader's machine (chapters 2–7; ``EVIDENCE.md`` rules 11 and 14–16).

Three things, one owner each:

* :func:`code_fingerprint` — a hash of the code and settings that produced a results file. The benchmark scripts
  pass the functions they ran to :func:`attention_course.measure.write_results`, which stores the hash; a unit test
  (``tests/test_results_files.py``) recomputes it from today's code, so a file the code no longer produces fails
  on any machine, in seconds, without training anything.
* :func:`numeric_environment` / :func:`same_environment` — what decides the last bits of a training run: the
  PyTorch version, the device, the CPU's vendor, model and PyTorch's kernel level (``ATEN_CPU_CAPABILITY``), and
  the thread count. Seeds fix a run on one such environment only.
* :class:`LiveCheck` — compares a live re-run with the stored runs as another machine would: per seed to the
  stored precision where this environment matches the stored one, otherwise statistically (the live mean within
  the stored seeds' spread, or the same sign of a difference the stored interval resolves). Its ``report`` says
  which check ran (a cell nbval ignores); its ``verdict`` is the same sentence on every machine.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import platform
import statistics
import sys
import textwrap
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

from ._checks import check_device, check_int, check_real, describe

__all__ = [
    "Comparison",
    "LiveCheck",
    "code_fingerprint",
    "fingerprint_names",
    "numeric_environment",
    "recompute_fingerprint",
    "same_environment",
]

PACKAGE = __name__.split(".")[0]


# ---------------------------------------------------------------------------------------------------------------
# The fingerprint of the code behind a results file
# ---------------------------------------------------------------------------------------------------------------

_CONSTANT_TYPES = (int, float, complex, str, bytes, bool, type(None))


def _is_constant(value: object, depth: int = 0) -> bool:
    """A plain value whose repr is its content (numbers, strings, and tuples/lists/dicts/sets of them)."""
    if isinstance(value, _CONSTANT_TYPES):
        return True
    if depth > 4:
        return False
    if isinstance(value, (tuple, list, set, frozenset)):
        return all(_is_constant(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_is_constant(k, depth + 1) and _is_constant(v, depth + 1) for k, v in value.items())
    return False


def _stable_repr(value: object) -> str:
    """repr, with sets sorted: a set's order changes with the process's string hashing (PYTHONHASHSEED)."""
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


#: Code a fingerprint does not follow, with the reason: input checks validate arguments and compute nothing a
#: result depends on; recording (provenance, writing and reading files) and this module describe a result
#: without making it; figures draw it. Editing them leaves every stored result as true as it was.
UNFOLLOWED = (
    f"{PACKAGE}._checks.",
    f"{PACKAGE}.evidence.",
    f"{PACKAGE}.plots.",
    f"{PACKAGE}._files.",
    f"{PACKAGE}.measure.provenance",
    f"{PACKAGE}.measure.write_results",
    f"{PACKAGE}.measure.read_results",
    f"{PACKAGE}.measure.device_name",
    f"{PACKAGE}.measure._git_commit",
)


def _owned(obj: object, roots: set[str]) -> bool:
    """Code of the course's package or of a file the fingerprint was started from (a benchmark script), unless
    it is :data:`UNFOLLOWED`."""
    module = getattr(obj, "__module__", None) or ""
    name = f"{module}.{getattr(obj, '__qualname__', '')}"
    if any(name == skip or (skip.endswith(".") and name.startswith(skip)) for skip in UNFOLLOWED):
        return False
    return module.split(".")[0] == PACKAGE or module in roots


def _owned_module(module: str, roots: set[str]) -> bool:
    """Whether a module's constants count: the package's (less :data:`UNFOLLOWED`) and the starting script's."""
    if any(skip.endswith(".") and module + "." == skip for skip in UNFOLLOWED):
        return False
    return module.split(".")[0] == PACKAGE or module in roots


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
        obj = _unwrap(obj)
        if not isinstance(obj, (types.FunctionType, type)):
            raise TypeError(f"code must hold functions, classes or paths, got {describe(obj)}")
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
            continue
        tree = _source_tree(obj)
        seen[name] = ast.dump(tree, annotate_fields=False, include_attributes=False)
        namespace = _namespace(obj)
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
                elif (_is_constant(target) or dataclasses.is_dataclass(target)) and _owned_module(owner, roots):
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
    code_closure([c for c in code if not isinstance(c, Path)])  # refuses what is not code, as the fingerprint does
    for obj in code:
        if isinstance(obj, Path):
            path = obj.resolve()
            names.append(f"path:{path.relative_to(checkout) if path.is_relative_to(checkout) else path}")
            continue
        obj = _unwrap(obj)
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


# ---------------------------------------------------------------------------------------------------------------
# The numeric environment: what decides the last bits of a run
# ---------------------------------------------------------------------------------------------------------------


def _cpu_field(field: str) -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith(field):
                return line.split(":", 1)[1].strip()
    return ""


def numeric_environment(device: str | torch.device = "cpu", threads: int | None = None) -> dict[str, object]:
    """What decides a training run's last bits besides its seed, as a JSON-ready dict.

    Keys: ``torch`` (version), ``device`` (``cpu`` or the GPU's name), ``cpu_vendor`` and ``cpu_model`` (from
    ``/proc/cpuinfo``, else :mod:`platform`), ``cpu_capability`` (the vector kernels PyTorch runs, which
    ``ATEN_CPU_CAPABILITY`` changes: ``DEFAULT``, ``AVX2``, ``AVX512``...) and ``threads`` (``threads`` if
    given, else PyTorch's current CPU threads).
    """
    device = check_device("device", device)
    threads = None if threads is None else check_int("threads", threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {
        "torch": torch.__version__,
        "device": name,
        "cpu_vendor": _cpu_field("vendor_id") or platform.machine(),
        "cpu_model": _cpu_field("model name") or platform.processor(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads() if threads is None else int(threads),
    }


def same_environment(stored: Mapping[str, object] | None, device: str | torch.device = "cpu",
                     threads: int | None = None) -> bool:
    """Whether this process would repeat the stored runs bit for bit: every key of :func:`numeric_environment`
    equal. A record without that information (written before it was kept) never matches."""
    here = numeric_environment(device, threads)  # checks device and threads
    if not isinstance(stored, Mapping):
        return False
    return all(stored.get(key) == value for key, value in here.items())


# ---------------------------------------------------------------------------------------------------------------
# A live re-run against the stored runs
# ---------------------------------------------------------------------------------------------------------------

#: How many standard errors apart two means of the same experiment may lie on two machines. Four keeps a false
#: alarm rare (about 1 in 15,000 for normal spreads) while a broken experiment, which moves a result by many
#: seed spreads, still fails.
Z_AGREE = 4.0
#: How many standard errors a stored difference must exceed for its sign to count as resolved (about 95 %).
Z_RESOLVED = 2.0


def _floats(name: str, values: object) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of numbers, got {describe(values)}")
    out = tuple(float(v) for v in values)
    if not out or not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} must hold at least one finite number, got {list(out)}")
    return out


def _standard_error(a: Sequence[float], b: Sequence[float]) -> float:
    """Welch's standard error of mean(a) − mean(b); a single value borrows the other side's spread."""
    sa = statistics.stdev(a) if len(a) > 1 else None
    sb = statistics.stdev(b) if len(b) > 1 else None
    sa = sb if sa is None else sa
    sb = sa if sb is None else sb
    if sa is None:
        return 0.0
    return math.sqrt(sa**2 / len(a) + sb**2 / len(b))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One quantity of a live re-run against its stored runs (see :class:`LiveCheck`)."""

    name: str
    check: str  # "per seed" (this environment matches the stored one) or "spread" / "sign"
    agrees: bool
    live: tuple[float, ...]
    stored: tuple[float, ...]
    allowed: float  # the largest difference of means (spread), or the stored difference (sign)
    difference: float  # mean(live) − mean(stored) (spread, per seed) or the live difference (sign)

    def detail(self) -> str:
        def show(xs: Sequence[float]) -> str:
            return f"mean {statistics.fmean(xs):.4g} over {len(xs)}"
        if self.check == "sign":
            return (f"{self.name}: stored difference {self.allowed:+.4g}, live {self.difference:+.4g} "
                    f"({'same sign' if self.agrees else 'SIGN DIFFERS'})")
        return (f"{self.name}: live {show(self.live)}, stored {show(self.stored)}; "
                f"difference {self.difference:+.3g}, allowed ±{self.allowed:.3g} ({self.check})"
                + ("" if self.agrees else "  DISAGREES"))


class LiveCheck:
    """Compares runs re-made live on this machine with the stored runs of a results file.

    Give it the record (:func:`attention_course.measure.read_results`) and the thread count the live runs used.
    Where this process's :func:`numeric_environment` equals the record's, every live seed must equal its stored
    entry (to ``stored_rtol``, the precision the file keeps); elsewhere the machine counts as one more seed:
    :meth:`compare` asks that the live mean lie within :data:`Z_AGREE` standard errors of the stored mean (the
    stored seeds' spread, and the live seeds' where there are several) plus ``atol``, a floor the caller states
    (a metric's resolution, say); :meth:`same_sign` asks a difference the stored runs resolve to keep its sign.

    Print :meth:`report` in a cell whose output nbval ignores (it names the check and shows live numbers); then
    :meth:`verdict` in a compared cell: it raises ``AssertionError`` with the report when anything disagrees, and
    returns one sentence that is the same on every machine.
    """

    def __init__(self, record: Mapping[str, object], *, threads: int | None = None,
                 device: str | torch.device = "cpu"):
        if not isinstance(record, Mapping) or "provenance" not in record:
            raise TypeError(f"record must be a results record (read_results), got {describe(record)}")
        stored = record["provenance"].get("environment")
        self.same_machine = same_environment(stored, device, threads)
        self.comparisons: list[Comparison] = []

    def compare(self, name: str, live: Sequence[float], stored: Sequence[float], *,
                atol: float = 0.0, stored_rtol: float = 1e-9,
                live_seeds: Sequence[int] | None = None, stored_seeds: Sequence[int] | None = None) -> Comparison:
        """Live values of one quantity against the stored ones. On a matching machine, per seed: ``live_seeds``
        (default: the first ``len(live)`` of ``stored_seeds``, default 0, 1, ...) picks each live run's entry."""
        live, stored = _floats("live", live), _floats("stored", stored)
        atol = check_real("atol", atol, low=0.0)
        difference = statistics.fmean(live) - statistics.fmean(stored)
        allowed = Z_AGREE * _standard_error(live, stored) + atol
        agrees = abs(difference) <= allowed
        check = "spread"
        if self.same_machine:
            check = "per seed"
            seeds = list(stored_seeds) if stored_seeds is not None else list(range(len(stored)))
            mine = list(live_seeds) if live_seeds is not None else seeds[: len(live)]
            pairs = [(v, stored[seeds.index(s)]) for v, s in zip(live, mine, strict=True)]
            agrees = agrees and all(math.isclose(a, b, rel_tol=stored_rtol, abs_tol=1e-12) for a, b in pairs)
        result = Comparison(name, check, agrees, live, stored, allowed, difference)
        self.comparisons.append(result)
        return result

    def same_sign(self, name: str, live: tuple[Sequence[float], Sequence[float]],
                  stored: tuple[Sequence[float], Sequence[float]]) -> Comparison:
        """Whether the live runs reproduce the sign of mean(a) − mean(b), which the stored runs resolve.

        Raises:
            ValueError: the stored runs do not resolve the difference (within :data:`Z_RESOLVED` standard errors
                of zero): there is no sign to reproduce.
        """
        for what, pair in (("live", live), ("stored", stored)):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"{what} must be a pair (values of a, values of b), got {describe(pair)}")
        la, lb = (_floats("live", x) for x in live)
        sa, sb = (_floats("stored", x) for x in stored)
        stored_diff = statistics.fmean(sa) - statistics.fmean(sb)
        if abs(stored_diff) <= Z_RESOLVED * _standard_error(sa, sb):
            raise ValueError(f"stored must resolve the difference to have a sign, got {stored_diff:+.4g} within "
                             f"{Z_RESOLVED:g} standard errors of zero")
        live_diff = statistics.fmean(la) - statistics.fmean(lb)
        result = Comparison(name, "sign", live_diff * stored_diff > 0, la + lb, sa + sb, stored_diff, live_diff)
        self.comparisons.append(result)
        return result

    @property
    def check(self) -> str:
        return ("per seed: this machine matches the stored runs' environment" if self.same_machine else
                "statistical: this machine differs from the stored runs' environment (or the file predates it)")

    def report(self) -> str:
        """Which check ran, and every comparison with its numbers (machine-dependent: print it where nbval
        ignores the output)."""
        return "\n".join([self.check, *("  " + c.detail() for c in self.comparisons)])

    def verdict(self, what: str = "the live runs") -> str:
        """One machine-independent sentence; raises ``AssertionError`` (with :meth:`report`) if any comparison
        disagrees, or if nothing was compared."""
        if not self.comparisons:
            raise AssertionError("nothing was compared")
        if not all(c.agrees for c in self.comparisons):
            raise AssertionError(f"{what} disagree with the stored evidence:\n{self.report()}")
        n = len(self.comparisons)
        return f"{what} agree with the stored evidence ({n} comparison{'s' * (n != 1)})"

