"""Give a results file the fingerprint of today's code, after a change a person has checked leaves its results as
they were (a refactor, a new option whose default is the old behaviour, a renamed helper).

Usage: python tools/restamp_results.py heads_sweep --code table3a --why "MultiHeadAttention: only the cached
       single-query path changed; these runs use no cache"

A results file records the fingerprint of the code and settings that wrote it (``write_results``), and
``tests/test_results_files.py`` fails once the code has changed since. The usual answer is to re-run the script.
Where a reviewed diff shows the change cannot touch the stored numbers, this records that review instead, in the
file itself (``provenance.fingerprint.restamped``: the commit, the date and the reason), for a reader to judge;
the runs' own provenance (commit, date, machine) is left as it was. ``--code`` names the script's entry points
for a file written before fingerprints were kept (later files name their own).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

from attention_course.fingerprint import recompute_fingerprint

ROOT = Path(__file__).resolve().parents[1]


def restamp(name: str, why: str, code: list[str] | None = None) -> str:
    path = ROOT / "benchmarks" / "results" / f"{name}.json"
    record = json.loads(path.read_text())
    stamp = dict(record["provenance"].get("fingerprint") or {})
    if code:
        stamp["code"] = [c if "." in c or c.startswith("path:") else f"<script>.{c}" for c in code]
    if "code" not in stamp:
        raise SystemExit(f"{name}: the file names no entry points; pass --code")
    record["provenance"]["fingerprint"] = stamp
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    restamped = {"commit": commit, "date": datetime.date.today().isoformat(), "why": why}
    stamp["sha256"] = recompute_fingerprint(record, ROOT)
    stamp["restamped"] = restamped
    for machine in record.get("machines", []):  # other environments' runs of the same code (add_machine.py)
        theirs = machine["provenance"]["fingerprint"]
        theirs["sha256"] = recompute_fingerprint(machine, ROOT)
        theirs["restamped"] = restamped
    path.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
    return stamp["sha256"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="+", help="results files, without folder or .json")
    p.add_argument("--why", required=True, help="the reviewed change, and why it leaves the results as they were")
    p.add_argument("--code", nargs="+", help="entry points (a script's function names, or path:<file>)")
    args = p.parse_args(argv)
    for name in args.names:
        print(name, restamp(name, args.why, args.code)[:12])
    return 0


if __name__ == "__main__":
    sys.exit(main())
