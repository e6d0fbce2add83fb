"""Add another numeric environment's runs of an experiment to its results file (#38, ``EVIDENCE.md`` rule 14).

Usage:
    ATEN_CPU_CAPABILITY=default python benchmarks/transformer_heads.py --seeds 0-9 --out /tmp/heads_default.json
    python tools/add_machine.py transformer_heads /tmp/heads_default.json

The run's own record (provenance, settings, results, as ``write_results`` wrote it) goes into the file's
``machines`` list, replacing an earlier entry of the same environment; the file's own runs are left as they were.
``machines.environments`` reads them all back, and ``LiveCheck`` estimates from them how far a run on a machine it
has never seen may lie from the stored ones. The two records must be of the same experiment: the same script and
entry points, today's fingerprint for their settings (``tests/test_results_files.py`` checks every entry), and a
numeric environment the file does not already hold.

``--identify SEEDS`` instead records the file's *own* environment where it was not kept (files written before
``numeric_environment`` existed, or before it named the processor's family and features): the given record must
have been made on this kind of machine and equal the file's runs for those seeds bit for bit — the same numbers
can only come from the same kernels — and its environment is then written into the file's provenance with a note
of how it was identified.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attention_course.machines import DECIDING_KEYS
from attention_course.measure import seed_range

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _same_experiment(record: dict, other: dict) -> None:
    script = lambda r: r["provenance"]["command"].split()[1]  # noqa: E731 - "python benchmarks/x.py ..."
    a, b = record["provenance"]["fingerprint"]["code"], other["provenance"]["fingerprint"]["code"]
    if script(record) != script(other) or a != b:
        raise SystemExit(f"not the same experiment: {script(record)} {a} vs {script(other)} {b}")
    def strip(settings: dict) -> dict:  # seeds and workers aside; a list of names in any order is one setting
        return {k: sorted(v) if isinstance(v, list) and all(isinstance(x, str) for x in v) else v
                for k, v in settings.items() if k not in ("seeds", "workers")}
    if strip(record["settings"]) != strip(other["settings"]):
        raise SystemExit("not the same settings (seeds and workers aside)")


def add_machine(name: str, other_path: Path) -> int:
    path = ROOT / "benchmarks" / "results" / f"{name}.json"
    record, other = _load(path), _load(other_path)
    _same_experiment(record, other)
    env = other["provenance"]["environment"]
    key = lambda e: [e.get(k) for k in DECIDING_KEYS]  # noqa: E731
    if key(record["provenance"].get("environment") or {}) == key(env):
        raise SystemExit(f"{name}: its own runs are of this environment already")
    machines = [m for m in record.get("machines", []) if key(m["provenance"]["environment"]) != key(env)]
    record["machines"] = [*machines, other]
    path.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
    return len(record["machines"]) + 1


def _runs_by_seed(results: object, seeds: list[int]) -> object:
    """The results restricted to ``seeds`` where they are lists of per-seed entries (``{"seed": s, ...}``); other
    values (arrays over seeds in settings order, summaries) are compared whole."""
    if isinstance(results, dict):
        return {k: _runs_by_seed(v, seeds) for k, v in results.items()}
    if isinstance(results, list) and results and isinstance(results[0], dict) and "seed" in results[0]:
        return [r for r in results if r["seed"] in seeds]
    return results


def identify(name: str, other_path: Path, seeds: list[int]) -> None:
    path = ROOT / "benchmarks" / "results" / f"{name}.json"
    record, other = _load(path), _load(other_path)
    _same_experiment(record, other)
    mine, theirs = _runs_by_seed(record["results"], seeds), _runs_by_seed(other["results"], seeds)
    if mine != theirs or list(other["settings"]["seeds"]) != seeds:
        raise SystemExit(f"{name}: the re-run of seeds {seeds} is not the stored runs bit for bit: another "
                         "environment (add it with add_machine instead)")
    env = dict(other["provenance"]["environment"])
    record["provenance"]["environment"] = env
    record["provenance"]["environment_identified"] = (
        f"seeds {seeds} re-run by `{other['provenance']['command']}` on {other['provenance']['date'][:10]} "
        f"(commit {other['provenance']['git_commit'][:7]}) reproduce the stored runs bit for bit")
    path.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", help="the results file, without folder or .json")
    p.add_argument("record", type=Path, help="the other environment's record (a script's --out)")
    p.add_argument("--identify", metavar="FIRST-LAST", help="record the file's own environment instead")
    args = p.parse_args(argv)
    if args.identify:
        identify(args.name, args.record, list(seed_range(args.identify)))
        print(f"{args.name}: environment identified")
    else:
        print(f"{args.name}: {add_machine(args.name, args.record)} environments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
