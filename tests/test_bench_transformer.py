"""benchmarks/bench_transformer.py runs end to end at a tiny size, in float32 and under autocast, and writes its
results with provenance (chapter 5; on a GPU the same script runs with --device cuda)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_transformer.py"


@pytest.mark.parametrize("autocast", [None, "bfloat16"])
def test_bench_transformer_runs_at_a_tiny_size(tmp_path, autocast):
    spec = importlib.util.spec_from_file_location("bench_transformer", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench_transformer.json"
    args = ["--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--batch", "2", "--n", "8",
            "--steps", "2", "--warmup", "1", "--threads", "1", "--out", str(out)]
    ratio = bench.main(args + (["--autocast", autocast] if autocast else []))
    record = json.loads(out.read_text())
    assert set(record) == {"provenance", "settings", "results"} and ratio > 0
    assert record["settings"]["device"] == "cpu" and len(record["results"]["ratios"]) == 2
    assert record["settings"]["dtype"] == (f"float32 weights, {autocast} autocast" if autocast else "float32")
