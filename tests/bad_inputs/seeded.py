"""Bad inputs for seeded.py: the benchmarks' runner."""

from __future__ import annotations

from attention_course.seeded import mean_and_std, run_seeded, seeded_parser, summarise_arms
from bad_inputs import case

NOWHERE = "/tmp/never-written.json"

CASES = [
    case(seeded_parser, lambda: seeded_parser("x", out=NOWHERE, seeds="4-0"), ValueError, arg="text",
         says="FIRST <= LAST", id="seeded.seeded_parser-reversed-seeds"),
    case(seeded_parser, lambda: seeded_parser("x", out=3), TypeError, arg="out", id="seeded.seeded_parser-out-int"),
    case(seeded_parser, lambda: seeded_parser("x", out=None, workers=0), ValueError, arg="workers",
         id="seeded.seeded_parser-no-workers"),
    case(run_seeded, lambda: run_seeded(abs, [1], workers=0), ValueError, arg="workers",
         id="seeded.run_seeded-no-workers"),
    case(run_seeded, lambda: run_seeded("train", [1], workers=1), TypeError, arg="run",
         id="seeded.run_seeded-run-string"),
    case(run_seeded, lambda: run_seeded(abs, 3, workers=1), TypeError, arg="tasks", id="seeded.run_seeded-tasks-int"),
    case(mean_and_std, lambda: mean_and_std([]), ValueError, arg="values", id="seeded.mean_and_std-empty"),
    case(mean_and_std, lambda: mean_and_std([1.0, float("nan")]), ValueError, arg="values[1]",
         id="seeded.mean_and_std-nan"),
    case(mean_and_std, lambda: mean_and_std(2.0), TypeError, arg="values", id="seeded.mean_and_std-scalar"),
    case(mean_and_std, lambda: mean_and_std([1e308, 1e308]), ValueError, arg="values",
         id="seeded.mean_and_std-overflow"),
    case(summarise_arms, lambda: summarise_arms("runs", ["a"], "bpc"), TypeError, arg="runs",
         id="seeded.summarise_arms-string"),
    case(summarise_arms, lambda: summarise_arms([{"arm": "a", "bpc": 1.0}], ["a", "b"], "bpc"), ValueError,
         arg="runs", says="'b'", id="seeded.summarise_arms-arm-without-runs"),
    case(summarise_arms, lambda: summarise_arms([{"arm": "a", "loss": 1.0}], ["a"], "bpc"), ValueError,
         arg="runs", says="'bpc'", id="seeded.summarise_arms-missing-key"),
]
