"""exercises/: every exercise's check passes its solution (solutions/chNN.py) over several seeds, rejects each of its
plausible wrong answers (tests/exercise_mutants.py) and reports a stub as not attempted — and every exercise in the
registry is posed in its chapter, and every exercise cell in a chapter passes when its solution is filled in."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from pathlib import Path

import pytest
from exercise_alternatives import ALTERNATIVES
from exercise_mutants import MUTANTS

from attention_course.exercises import check, exercises, run_checks
from attention_course.exercises.checking import ExerciseFailed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
from notebook_links import SOLUTION_LINK  # noqa: E402 -- the site's own grammar for a solution link

EXERCISES = exercises()
SEEDS = range(5)
PROJECT_SEEDS = range(2)  # a project's checks take seconds, not milliseconds


def _project_answers() -> None:
    """Each chapter's project keeps its wrong and other right answers in tests/project_answers_chN.py."""
    for path in sorted(Path(__file__).parent.glob("project_answers_ch*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        MUTANTS.update(module.MUTANTS)
        ALTERNATIVES.update(module.ALTERNATIVES)


_project_answers()


def _is_project(key: str) -> bool:
    return EXERCISES[key].kind == "project"


def _seeds(key: str) -> range:
    return PROJECT_SEEDS if _is_project(key) else SEEDS


def _limit(key: str) -> float:
    """Seconds an exercise's checks may take: 2 for an exercise, 30 for a project (issue #41)."""
    return 30.0 if _is_project(key) else 2.0


def solution(key: str):
    """The solution function of exercise ``key`` from solutions/chNN.py."""
    chapter, name = int(key.split(".")[0]), EXERCISES[key].name
    path = ROOT / "solutions" / f"ch{chapter:02d}.py"
    spec = importlib.util.spec_from_file_location(f"solutions_ch{chapter:02d}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_every_chapter_has_at_least_four_exercises_and_the_kinds_mix():
    per_chapter = {}
    for key, exercise in EXERCISES.items():
        per_chapter.setdefault(int(key.split(".")[0]), []).append(exercise.kind)
    assert sorted(per_chapter) == list(range(1, 8))
    assert all(len(kinds) >= 4 for kinds in per_chapter.values()) and len(EXERCISES) >= 28
    assert {"derive", "build", "measure"} <= {k for kinds in per_chapter.values() for k in kinds}
    assert all(kinds.count("project") <= 1 for kinds in per_chapter.values())


@pytest.mark.parametrize("key", list(EXERCISES))
def test_the_solution_passes_over_seeds_within_its_time(key):
    answer = solution(key)
    for seed in _seeds(key):
        result = run_checks(key, answer, seed=seed)
        assert result.passed, f"seed {seed}:\n{result}"
        # the first run may pay one-time imports (4.3's FlopCounterMode loads torch._dynamo: 2.5 s cold, alone)
        assert seed == 0 or result.seconds < _limit(key), f"exercise {key}'s checks took {result.seconds:.2f} s"


@pytest.mark.parametrize("key", list(EXERCISES))
def test_a_stub_is_not_attempted_and_fails_in_strict_mode(key, capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError

    result = run_checks(key, stub)
    assert not result.attempted and not result.passed
    check(key, stub, strict=False)
    assert "not attempted" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed):
        check(key, stub, strict=True)


@pytest.mark.parametrize(("key", "mistake"), [(k, m) for k, ms in MUTANTS.items() for m in ms])
def test_each_plausible_wrong_answer_is_rejected(key, mistake):
    result = run_checks(key, MUTANTS[key][mistake])
    assert result.attempted and not result.passed, f"{key} accepts the mistake '{mistake}':\n{result}"


@pytest.mark.parametrize(("key", "way"), [(k, w) for k, ws in ALTERNATIVES.items() for w in ws])
def test_each_correct_answer_written_another_way_is_accepted(key, way):
    """No correct answer refused: another algorithm, einsum, loops, float64, a NumPy number, query tiles."""
    for seed in _seeds(key)[:1] if _is_project(key) else _seeds(key):  # a project's own solution takes two seeds
        result = run_checks(key, ALTERNATIVES[key][way], seed=seed)
        assert result.passed, f"{key} refuses the correct answer '{way}' (seed {seed}):\n{result}"


def test_every_exercise_has_three_wrong_answers_and_one_other_right_one():
    """Issue #41's bar: at least three mutants of different kinds and at least one correct answer written
    differently, per exercise."""
    for key in EXERCISES:
        assert len(MUTANTS[key]) >= 3 and len(ALTERNATIVES[key]) >= 1, key


def _code_lines(function) -> int:
    """Lines of code in a solution function's body: no blank lines, comments or docstring."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant) \
        else tree.body
    lines = set()
    for node in body:
        lines.update(range(node.lineno, node.end_lineno + 1))
    source = textwrap.dedent(inspect.getsource(function)).splitlines()
    return sum(1 for n in lines if source[n - 1].strip() and not source[n - 1].strip().startswith("#"))


def test_every_chapter_ends_its_lab_with_one_project_of_twenty_lines_or_more():
    """Issue #41, point 4: one real build per chapter, posed in its lab, with a solution of >= 20 lines of code."""
    projects = {key: e for key, e in EXERCISES.items() if e.kind == "project"}
    assert sorted(int(key.split(".")[0]) for key in projects) == list(range(1, 8))
    for key in projects:
        posed_in = [path.stem for path in NOTEBOOKS for k, *_ in _posed(path) if k == key]
        assert len(posed_in) == 1 and posed_in[0].endswith("_lab"), (key, posed_in)
        assert _code_lines(solution(key)) >= 20, f"project {key}'s solution has {_code_lines(solution(key))} lines"


def test_every_exercise_has_its_wrong_and_right_answers_and_no_stray_one():
    assert set(MUTANTS) == set(EXERCISES) == set(ALTERNATIVES)


def test_a_failure_shows_where_not_the_answer(capsys):
    check("1.1", MUTANTS["1.1"]["no 1/√d"])
    out = capsys.readouterr().out
    assert "✗" in out and "largest error" in out and "at index" in out and "softmax(" not in out.split("\n", 2)[2]


def test_the_checks_leave_the_learners_random_state_alone():
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    run_checks("1.1", solution("1.1"))
    assert torch.equal(torch.rand(3), expected)


NOTEBOOKS = sorted((ROOT / "book").glob("0*.ipynb"))


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _posed(path: Path) -> list[tuple[str, str, str]]:
    """(key, the exercise cell's code, the markdown cell after it) for each exercise cell of a chapter."""
    cells = json.loads(path.read_text())["cells"]
    return [(c["metadata"]["attention_course"]["exercise"], _source(c), _source(cells[i + 1]))
            for i, c in enumerate(cells) if "exercise" in c["metadata"].get("tags", [])]


def test_every_registered_exercise_is_posed_in_its_chapter_once_with_its_solution_below():
    posed = [(key, path.stem, code, after) for path in NOTEBOOKS for key, code, after in _posed(path)]
    keys = [key for key, *_ in posed]
    assert sorted(keys) == sorted(EXERCISES) and len(set(keys)) == len(keys)
    for key, stem, code, after in posed:
        chapter, name = int(key.split(".")[0]), EXERCISES[key].name
        assert stem.startswith(f"{chapter:02d}_"), f"exercise {key} is posed in {stem}"
        assert re.search(rf"^def {name}\(", code, re.M) and f'check("{key}", {name})' in code
        assert "raise NotImplementedError" in code
        # a plain link in a notebook; on the website, a closed dropdown holding the solution (_ext/notebook_links.py)
        link = SOLUTION_LINK.fullmatch(after)
        assert link and link.groups() == (key, name, f"ch{chapter:02d}.py"), after


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_exercise_cell_in_its_chapter_fails_as_shipped_and_passes_with_its_solution(path, monkeypatch):
    """The chapter's setup and import cells (an exercise depends on nothing else), then each exercise cell: as
    shipped (the stub) it fails in strict mode; with the solution put in the stub's place, it passes."""
    monkeypatch.setenv("ATTENTION_COURSE_STRICT_EXERCISES", "1")
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    namespace: dict = {}
    for cell in cells[:2]:  # the setup cell and the imports
        exec(_source(cell), namespace)  # noqa: S102 -- the chapter's own code
    for key, code, _ in _posed(path):
        with pytest.raises(ExerciseFailed, match="not attempted"):
            exec(code, namespace)  # noqa: S102
        definition, call = code.split(f'check("{key}"')
        exec(definition, namespace)  # noqa: S102
        namespace[EXERCISES[key].name] = solution(key)
        start = time.perf_counter()
        exec(f'check("{key}"{call}', namespace)  # noqa: S102 -- raises ExerciseFailed unless every check passes
        assert time.perf_counter() - start < _limit(key)
