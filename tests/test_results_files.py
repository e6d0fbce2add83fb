"""Every results file in benchmarks/results/ is what today's code would write: its stored fingerprint of the code
and settings that produced it (attention_course.fingerprint.code_fingerprint) is recomputed from the code as it
stands. A change to an experiment, a model it trains or a script's constants fails here, on any machine, in
seconds — before a chapter renders numbers the code no longer makes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attention_course.fingerprint import recompute_fingerprint
from attention_course.machines import DECIDING_KEYS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


def test_there_are_results_files():
    assert len(RESULTS) >= 10


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_results_file_is_what_todays_code_would_write(path):
    record = json.loads(path.read_text())
    stamp = record["provenance"].get("fingerprint")
    assert stamp, f"{path.name} has no fingerprint: re-run `{record['provenance']['command']}`"
    assert recompute_fingerprint(record, ROOT) == stamp["sha256"], (
        f"{path.name} is stale: the code or settings that wrote it have changed since. Re-run "
        f"`{record['provenance']['command']}` (or, if a reviewed diff shows the numbers cannot change, "
        "tools/restamp_results.py records that review)"
    )
    # Another numeric environment's runs of the same experiment (tools/add_machine.py): each what today's code
    # would write with its own settings, each of an environment the file holds once
    seen = [_deciding(record["provenance"].get("environment") or {})]
    for machine in record.get("machines", []):
        assert recompute_fingerprint(machine, ROOT) == machine["provenance"]["fingerprint"]["sha256"], (
            f"{path.name}: the runs of {machine['provenance']['environment']} are stale: re-run "
            f"`{machine['provenance']['command']}` and add them again with tools/add_machine.py")
        assert _deciding(machine["provenance"]["environment"]) not in seen, f"{path.name}: an environment twice"
        seen.append(_deciding(machine["provenance"]["environment"]))


def _deciding(environment: dict) -> list:
    return [environment.get(key) for key in DECIDING_KEYS]


HISTORY = sorted((ROOT / "benchmarks" / "results" / "history").glob("*.json"))


@pytest.mark.parametrize("path", HISTORY, ids=lambda p: p.stem)
def test_a_history_file_is_of_earlier_code_and_says_which(path):
    """benchmarks/results/history/ holds records of code that has changed since (a GPU timing that no lease has yet
    repeated): each names the commit that ran it, and is truly superseded — a record today's code would still
    write belongs in results/, where the test above holds it to the code."""
    record = json.loads(path.read_text())
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", record["provenance"]["git_commit"])
    assert recompute_fingerprint(record, ROOT) != record["provenance"]["fingerprint"]["sha256"], (
        f"{path.name} is what today's code would write: move it back to benchmarks/results/")
