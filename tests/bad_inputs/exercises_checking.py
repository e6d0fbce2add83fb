"""Bad inputs for exercises/checking.py: the key, the answer, the seed and the strict flag of check and
run_checks."""

from __future__ import annotations

from attention_course.exercises import check, run_checks

from . import case


def _answer(q, k, v):  # noqa: ANN001, ANN202
    return q


CASES = [
    case((check, run_checks), lambda: run_checks(1.1, _answer), TypeError, arg="key", says="'1.1'",
         id="exercises.run_checks-key-float"),
    case((check, run_checks), lambda: check("9.9", _answer), ValueError, arg="key", says="1.1",
         id="exercises.check-unknown-key"),
    case((check, run_checks), lambda: check("1.1", "attention"), TypeError, arg="answer", says="attention",
         id="exercises.check-answer-not-callable"),
    case(run_checks, lambda: run_checks("1.1", _answer, seed=-1), ValueError, arg="seed",
         id="exercises.run_checks-seed"),
    case(check, lambda: check("1.1", _answer, strict="yes"), TypeError, arg="strict",
         id="exercises.check-strict"),
]
