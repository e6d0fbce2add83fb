"""benchmarks/bench_gpt.py runs end to end at a tiny size and writes its results with provenance (chapter 7)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpt.py"


def test_bench_gpt_runs_at_a_tiny_size(tmp_path):
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("bench_gpt", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench_gpt.json"
    results = bench.main(["--d-model", "16", "--heads", "2", "--layers", "1", "--vocab", "20", "--batch", "2",
                          "--length", "8", "--steps", "2", "--gen-batch", "2", "--prompt", "3", "--new", "4",
                          "--reps", "2", "--warmup", "1", "--threads", "1", "--out", str(out)])
    record = json.loads(out.read_text())
    assert set(record) == {"provenance", "settings", "results"}
    assert record["settings"]["transformers"] and record["provenance"]["torch_threads"] >= 1
    for name in ("training", "generation"):
        assert results[name]["median_ratio_package_speed_over_transformers"] > 0
        assert len(record["results"][name]["ratios"]) == 2
