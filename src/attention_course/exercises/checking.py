"""Checking a learner's answer to an exercise: the learner's function goes in, a checklist comes out.

Every chapter ends with exercises (a few also sit inside a section). Each names a function the learner writes in a
notebook cell and a key such as ``"1.1"``; :func:`check` runs that exercise's checks on it and prints one line per
property, ✓ or ✗, and for a ✗ the counterexample's shapes and where the largest error is — never the reference
answer. A function that still raises ``NotImplementedError`` (the stub the chapter ships) is "not attempted", so
the chapter runs from top to bottom before anyone has solved anything.

How the checks are built, so that a correct answer passes on every machine and a wrong one fails:

* inputs come from the check's own seeded generator (the learner's global random state is saved and restored);
* values are compared with a float64 oracle computed live, not with stored numbers, at a tolerance that a float32
  answer on any CPU or GPU meets;
* an exercise's cases come in named **families** — typical inputs, extreme ones (scores in the hundreds, rows
  whose maxima differ by thousands, scores that rise from block to block) and unusual shapes (a batch and heads,
  n_q ≠ n_k, a single key, odd widths) — and a failure names the family, so that an answer exact only on small
  tame inputs does not pass;
* properties are checked as well as values (rows sum to one, the future does not leak), in the answer's own
  dtype, and a value is compared by value whatever its type (a Python or NumPy number, a NumPy array, a tensor);
* one rule on in-place edits, for every exercise: an answer must leave its inputs as they were (every call a
  check makes compares the tensor arguments with copies taken before it);
* each exercise's checks take well under 2 s on a CPU; a chapter's **project** (kind ``"project"``, the last
  exercise of its lab: a real build of twenty lines or more) well under 30 s on two cores.

``ATTENTION_COURSE_STRICT_EXERCISES=1`` (or ``check(..., strict=True)``) turns a failed or unattempted exercise
into an :class:`ExerciseFailed` error: the course's tests run every solution that way, and every stub and every
plausible wrong answer (``tests/test_exercises.py``).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._checks import check_callable, check_choice, check_int, describe

__all__ = ["check", "exercises", "run_checks"]

#: What a check reports: None when the property holds, else what went wrong (shapes, where, how far off).
Verdict = str | None
KINDS = ("derive", "build", "measure", "project")


@dataclass(frozen=True)
class Check:
    """One property of an answer: ``run(answer, generator)`` returns None if it holds, else what went wrong."""

    description: str
    run: Callable[[Callable, torch.Generator], Verdict]


@dataclass(frozen=True)
class Exercise:
    """An exercise: its key (``"1.1"``), title, kind (derive, build or measure), the name of the function the
    learner writes, and its checks."""

    key: str
    title: str
    kind: str
    name: str
    checks: tuple[Check, ...]


@dataclass
class Checklist:
    """The outcome of :func:`run_checks`: one ``(description, passed, detail)`` line per check."""

    exercise: Exercise
    attempted: bool
    lines: list[tuple[str, bool, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.attempted and all(ok for _, ok, _ in self.lines)

    def __str__(self) -> str:
        head = f"Exercise {self.exercise.key} ({self.exercise.kind}): {self.exercise.title}"
        if not self.attempted:
            return (f"{head}\n  not attempted: {self.exercise.name} still raises NotImplementedError; "
                    "write it above and run the cell again")
        body = [f"  {'✓' if ok else '✗'} {text}" + (f"\n      {detail}" if detail else "")
                for text, ok, detail in self.lines]
        verdict = "all checks pass" if self.passed else f"{sum(not ok for _, ok, _ in self.lines)} check(s) fail"
        return "\n".join([head, *body, f"  {verdict}"])


class ExerciseFailed(AssertionError):
    """Strict mode: an exercise's answer failed a check or was not attempted."""


_REGISTRY: dict[str, Exercise] = {}


def register(key: str, title: str, kind: str, name: str, checks: Sequence[Check]) -> Exercise:
    """Add an exercise to the registry (the chapter modules do, at import)."""
    if key in _REGISTRY:
        raise ValueError(f"key must be new, got {key!r}, registered twice")
    check_choice("kind", kind, KINDS)
    found = Exercise(key, title, kind, name, tuple(checks))
    _REGISTRY[key] = found
    return found


def exercises() -> dict[str, Exercise]:
    """Every registered exercise by key, in chapter order. The chapter modules register theirs when the package
    :mod:`attention_course.exercises` imports them (this module imports none of them: they import it)."""
    return dict(sorted(_REGISTRY.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))))


def _exercise(key: object) -> Exercise:
    if not isinstance(key, str):
        raise TypeError(f"key must be an exercise's key such as '1.1', got {describe(key)}")
    found = exercises()
    if key not in found:
        raise ValueError(f"key must be one of the course's exercises ({', '.join(found)}), got {key!r}")
    return found[key]


class ChangedInputs(RuntimeError):
    """An answer changed one of its tensor inputs in place (the one rule on in-place edits, for every exercise)."""


def _tensors(values: Any) -> list[torch.Tensor]:
    """The tensors among an answer's arguments, one level into lists, tuples and dicts (3.5's params)."""
    found = []
    for value in values:
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        found.extend(t for t in inner if isinstance(t, torch.Tensor))
    return found


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | (a != a) & (b != b)).all())


def _leaves_its_inputs(answer: Callable) -> Callable:
    """``answer`` with the one rule on in-place edits enforced at every call a check makes: each tensor argument is
    compared after the call with a copy taken before it, and a change raises :class:`ChangedInputs`."""

    @functools.wraps(answer)
    def call(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            kept = [(t, t.detach().clone()) for t in _tensors([*args, *kwargs.values()])]
        out = answer(*args, **kwargs)
        with torch.no_grad():
            if not all(_same(t.detach(), copy) for t, copy in kept):
                raise ChangedInputs("the answer changed its inputs in place; it must leave them as they were")
        return out

    return call


def run_checks(key: str, answer: Callable, *, seed: int = 0) -> Checklist:
    """Run exercise ``key``'s checks on ``answer``, the learner's function; nothing printed.

    Args:
        key: the exercise, such as ``"1.1"``. answer: the function the exercise asks for.
        seed: seeds the checks' own generator (the learner's random state is saved and restored).

    Raises:
        TypeError, ValueError: an unknown key, an answer that is not callable, a bad seed.
    """
    exercise = _exercise(key)
    answer = _leaves_its_inputs(check_callable("answer", answer, f"the function {exercise.name} the exercise asks for"))
    seed = check_int("seed", seed, low=0)
    result = Checklist(exercise, attempted=True)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        for item in exercise.checks:
            generator = torch.Generator().manual_seed(seed)
            try:
                detail = item.run(answer, generator)
            except NotImplementedError:
                if not result.lines:  # the first call: the stub as shipped
                    return Checklist(exercise, attempted=False, seconds=time.perf_counter() - start)
                detail = "raised NotImplementedError"
            except Exception as error:  # noqa: BLE001 -- the learner's error is the check's finding
                detail = f"raised {type(error).__name__}: {str(error)[:200]}"
            result.lines.append((item.description, detail is None, detail or ""))
    result.seconds = time.perf_counter() - start
    return result


def check(key: str, answer: Callable, *, strict: bool | None = None, seed: int = 0) -> None:
    """Run exercise ``key``'s checks on ``answer`` and print the checklist (the chapters' exercise cells).

    Args:
        key, answer, seed: as :func:`run_checks`.
        strict: raise :class:`ExerciseFailed` unless every check passes; default: whether the environment sets
            ``ATTENTION_COURSE_STRICT_EXERCISES=1`` (the course's tests do).
    """
    if strict is None:
        strict = os.environ.get("ATTENTION_COURSE_STRICT_EXERCISES", "") == "1"
    elif not isinstance(strict, bool):
        raise TypeError(f"strict must be True, False or None, got {describe(strict)}")
    result = run_checks(key, answer, seed=seed)
    print(result)
    if strict and not result.passed:
        raise ExerciseFailed(f"exercise {key} must pass every check in strict mode, got:\n{result}")


# ------------------------------------------------------------------------------------------ building checks
def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Standard-normal float32 inputs from a check's own generator."""
    return torch.randn(*shape, generator=g)


def where_off(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two same-shaped tensors differ most, and by how much."""
    diff = (got.double() - want.double()).abs().nan_to_num(float("inf"))
    diff[got.double() == want.double()] = 0.0  # equal infinities
    flat = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.ndim else ()
    return (f"largest error {float(diff.flatten()[flat]):.2e} at index {index}"
            + (" (NaN or inf in the answer)" if not torch.isfinite(got).all() else ""))


def as_values(got: Any, want: torch.Tensor) -> Any:
    """``got`` as a tensor when it is a number or a NumPy array (an answer is judged by its values, whatever their
    type); anything else unchanged, for :func:`compare` to name."""
    if isinstance(got, bool):
        return got
    if isinstance(got, (int, float, np.integer, np.floating)):
        return torch.tensor(float(got), dtype=torch.float64)
    if isinstance(got, np.ndarray) and got.dtype.kind in "biuf":
        return torch.from_numpy(np.asarray(got, dtype=np.float64))
    return got


def compare(got: Any, want: torch.Tensor, *, atol: float, rtol: float = 0.0, what: str = "the output") -> Verdict:
    """None if ``got`` has ``want``'s shape and values within ``atol + rtol·|want|``, else why not. ``got`` may be a
    tensor of any dtype, a NumPy array, or (where one number is wanted) a Python or NumPy number."""
    got = as_values(got, want)
    if not isinstance(got, torch.Tensor):
        return f"{what} must be a torch tensor, got {describe(got)}"
    if tuple(got.shape) != tuple(want.shape):
        return f"{what} should have shape {tuple(want.shape)}, got {tuple(got.shape)}"
    g64, w64 = got.double(), want.double()
    ok = (g64 == w64) | ((g64 - w64).abs() <= atol + rtol * w64.abs())  # equal infinities (an empty row's −inf) agree
    return None if bool(ok.all()) else f"{where_off(got, want)} (tolerance {atol:.0e})"


def compare_count(got: Any, want: int, *, what: str, where: str) -> Verdict:
    """None if ``got`` is the integer ``want`` (a count: FLOPs, bytes), else why not, without giving ``want`` away:
    an answer of another kind, or a count too small or too large. An integer tensor of one element counts by its
    value."""
    value = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 and not (
        got.is_floating_point() or got.dtype == torch.bool) else got
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return f"{where}: the answer should be an integer {what}, got {describe(got)}"
    if int(value) != want:
        return f"{where}: {got} is too {'small' if int(value) < want else 'large'}"
    return None


#: What a cases function returns: a list of argument tuples, or families of them by name ("typical", "extreme",
#: "unusual shapes"), each checked in turn.
Cases = list[tuple] | dict[str, list[tuple]]


def autograd_saves(answer: Callable, args: Sequence[Any]) -> tuple[int, Any]:
    """``answer(*args)`` with grad mode on and a hook that counts the tensors autograd saves for a backward pass:
    (that count, the answer's result). Inputs that do not require grad save nothing unless the answer asks
    autograd for a gradient, so a nonzero count shows that an answer meant to be written by hand used autograd."""
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += 1
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = answer(*args)
    return saved, result


def changed_inputs(args: Sequence[Any], kept: Sequence[Any]) -> bool:
    """Whether an answer changed any of its tensor inputs in place (``kept``: clones taken before the call)."""
    return any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(args, kept, strict=True))


def agrees(description: str, cases: Callable[[torch.Generator], Cases], oracle: Callable, *,
           atol: float = 1e-5, rtol: float = 1e-5) -> Check:
    """A check that the answer equals ``oracle`` (float64) on every case ``cases(generator)`` makes, and leaves
    its tensor inputs as they were. A failure names the family, the case and its inputs' shapes."""

    def run(answer: Callable, generator: torch.Generator) -> Verdict:
        made = cases(generator)
        for family, family_cases in (made.items() if isinstance(made, dict) else [("", made)]):
            for number, args in enumerate(family_cases, 1):
                kept = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
                got = answer(*args)
                want = oracle(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                                for a in kept])
                shapes = ", ".join(str(tuple(a.shape)) if isinstance(a, torch.Tensor) else repr(a) for a in kept)
                verdict = compare(got, want, atol=atol, rtol=rtol)
                if verdict is None and changed_inputs(args, kept):
                    verdict = "the answer changed its inputs in place"
                if verdict:
                    where = f"{family} inputs, case {number}" if family else f"case {number}"
                    return f"{where} (shapes {shapes}): {verdict}"
        return None

    return Check(description, run)
