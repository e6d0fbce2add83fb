"""seeded.py: the benchmarks' runner of arms over seeds (its command line, its processes, its summary)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attention_course.seeded import mean_and_std, run_seeded, seeded_parser, summarise_arms


def test_seeded_parser_reads_the_benchmarks_options(tmp_path):
    p = seeded_parser("a sweep", out=tmp_path / "r.json", seeds="0-4", steps=600, workers=2)
    args = p.parse_args([])
    assert (list(args.seeds), args.steps, args.workers, args.out) == ([0, 1, 2, 3, 4], 600, 2, tmp_path / "r.json")
    args = p.parse_args(["--seeds", "3", "--steps", "20", "--workers", "1", "--out", "/tmp/x.json"])
    assert (list(args.seeds), args.steps, args.workers, args.out) == ([3], 20, 1, Path("/tmp/x.json"))
    bare = seeded_parser("a part", out=None)  # no --steps or --workers; --out: the script chooses per part
    assert (list(bare.parse_args([]).seeds), bare.parse_args([]).out) == ([0, 1, 2, 3, 4], None)
    with pytest.raises(SystemExit):
        bare.parse_args(["--steps", "3"])


def _threads(_task: object) -> int:
    return torch.get_num_threads()


def test_run_seeded_keeps_the_tasks_order_and_runs_on_one_thread(monkeypatch):
    tasks = [[1.0, 3.0], [2.0], [5.0, 5.0, 8.0]]
    assert run_seeded(mean_and_std, tasks, workers=2) == [mean_and_std(t) for t in tasks]
    # a spawned process would start with OMP_NUM_THREADS threads: the runner sets one
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert run_seeded(_threads, range(3), workers=2) == [1, 1, 1]
    assert run_seeded(mean_and_std, [], workers=2) == []


def test_mean_and_std_is_the_mean_and_the_sample_deviation():
    mean, std = mean_and_std([1.0, 2.0, 4.0])
    assert mean == pytest.approx(7 / 3) and std == pytest.approx((((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2
                                                                   + (4 - 7 / 3) ** 2) / 2) ** 0.5)
    assert mean_and_std([2.5]) == (2.5, 0.0)
    assert mean_and_std(torch.tensor([1.0, 3.0])) == mean_and_std(np.array([1.0, 3.0])) == (2.0, 2**0.5)


def test_summarise_arms_takes_each_arm_over_its_own_seeds(capsys):
    runs = [{"arm": "a", "seed": 0, "bpc": 1.0}, {"arm": "b", "seed": 0, "bpc": 5.0},
            {"arm": "a", "seed": 1, "bpc": 3.0}]
    summary = summarise_arms(runs, ["a", "b"], "bpc")
    assert summary == {"a": {"mean_bpc": 2.0, "std_bpc": pytest.approx(2**0.5)}, "b": {"mean_bpc": 5.0, "std_bpc": 0.0}}
    assert capsys.readouterr().out == "a: 2.0000 ± 1.4142 bits/char\nb: 5.0000 ± 0.0000 bits/char\n"
