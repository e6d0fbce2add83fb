"""measure.py (chapter 6): thread control, interleaved timing, peak memory, FLOP counts, provenance of results."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest
import torch

from attention_course import scaled_dot_product_attention
from attention_course.fingerprint import code_fingerprint
from attention_course.machines import numeric_environment
from attention_course.masks import causal_mask
from attention_course.measure import (
    _git_commit,
    attention_flops,
    count_copies,
    cpu_threads,
    device_name,
    device_peak_tflops,
    op_counts,
    peak_memory_bytes,
    provenance,
    seed_range,
    time_interleaved,
    write_results,
)

ROOT = Path(__file__).resolve().parents[1]


# --- timing, memory, FLOPs ---------------------------------------------------------------------------------------


def test_peak_memory_replays_allocations_and_frees():
    mib = 2**20

    def pattern():
        a = torch.empty(mib, dtype=torch.uint8)
        b = torch.empty(2 * mib, dtype=torch.uint8)
        del a
        c = torch.empty(mib // 2, dtype=torch.uint8)
        return b, c

    assert peak_memory_bytes(pattern) == 3 * mib
    # the quadratic intermediates of naive attention are seen: at least the n × n weights (float32, n = 512)
    q = torch.randn(512, 16)
    assert peak_memory_bytes(lambda: scaled_dot_product_attention(q, q, q)) >= 512 * 512 * 4
    with pytest.raises(ValueError, match="cpu"):
        peak_memory_bytes(lambda: None, device="meta")


def test_attention_flops_counts_pairs():
    assert attention_flops(2, 8, 8, 4) == 2 * 64 * 2 * 8
    for n_q, n_k in ((7, 7), (5, 9), (9, 5)):
        pairs = int(causal_mask(n_q, n_k, alignment="upper_left").sum())
        assert attention_flops(3, n_q, n_k, 4, 6, causal=True) == 3 * pairs * 2 * (4 + 6)


def test_device_peak_lookup():
    assert device_peak_tflops("NVIDIA H100 80GB HBM3") == pytest.approx(989.4)
    assert device_peak_tflops("NVIDIA H100 PCIe") == pytest.approx(756.0)
    assert device_peak_tflops("NVIDIA A100-SXM4-40GB") == pytest.approx(312.0)
    assert device_peak_tflops("NVIDIA L4") == pytest.approx(121.0)
    # a PCIe or NVL card is not its SXM module, however the name is spelled
    assert device_peak_tflops("NVIDIA H200 NVL") == pytest.approx(835.0)
    assert device_peak_tflops("NVIDIA H200") == pytest.approx(989.4)
    assert device_peak_tflops("NVIDIA H800 PCIe") == pytest.approx(756.0)
    assert device_peak_tflops("Tesla V100-PCIE-16GB") == pytest.approx(112.0)
    assert device_peak_tflops("Tesla V100-SXM2-16GB") == pytest.approx(125.0)
    assert device_peak_tflops("Some CPU") is None


def test_time_interleaved_rotates_order():
    calls: list[str] = []
    times = time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, reps=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert {k: len(t) for k, t in times.items()} == {"a": 3, "b": 3}
    for bad, error in ((0, ValueError), (-1, ValueError), (True, TypeError), (2.5, TypeError)):
        with pytest.raises(error, match="reps must be"):
            time_interleaved({"a": lambda: None}, reps=bad)
    with pytest.raises(ValueError, match="warmup must be a non-negative integer, got -1"):
        time_interleaved({"a": lambda: None}, warmup=-1)
    with pytest.raises(ValueError, match="fns"):
        time_interleaved({})
    with pytest.raises(TypeError, match=r"fns\['a'\] must be a function"):
        time_interleaved({"a": 3})
    with pytest.raises(ValueError, match="num_threads must be a positive integer"):
        time_interleaved({"a": lambda: None}, num_threads=0)
    before, seen = torch.get_num_threads(), []
    time_interleaved({"a": lambda: seen.append(torch.get_num_threads())}, reps=2, warmup=0, num_threads=1)
    assert seen == [1, 1] and torch.get_num_threads() == before


def test_time_interleaved_restores_threads_after_an_error():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2

    def boom():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        time_interleaved({"a": boom}, reps=1, warmup=0, num_threads=target)
    assert torch.get_num_threads() == before


# --- thread control -------------------------------------------------------------------------------------------


def test_cpu_threads_sets_then_restores():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with cpu_threads(target):
        assert torch.get_num_threads() == target
    assert torch.get_num_threads() == before
    with cpu_threads(None):  # None: leave the setting alone
        assert torch.get_num_threads() == before
    assert torch.get_num_threads() == before


def test_cpu_threads_restores_after_an_error():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with pytest.raises(KeyError), cpu_threads(target):
        assert torch.get_num_threads() == target
        raise KeyError("inside the block")
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(("bad", "error"), [(0, ValueError), (-1, ValueError), (True, TypeError), (2.5, TypeError),
                                            ("2", TypeError)])
def test_cpu_threads_rejects_what_is_not_a_positive_integer(bad, error):
    before = torch.get_num_threads()
    with pytest.raises(error, match=r"n must be a"), cpu_threads(bad):
        pass
    assert torch.get_num_threads() == before


# --- provenance and results files -----------------------------------------------------------------------------


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def test_provenance_names_machine_versions_and_commit():
    p = provenance()
    assert set(p) == {"date", "command", "device", "cpu_count", "torch_threads", "python", "torch", "platform",
                      "git_commit"}
    assert p["torch"] == torch.__version__ and p["torch_threads"] == torch.get_num_threads()
    assert p["device"].startswith("cpu") and p["device"] == device_name("cpu")
    assert isinstance(p["cpu_count"], int) and p["cpu_count"] >= 1
    assert p["date"][:2] == "20" and p["date"].endswith("+00:00")  # ISO 8601, UTC
    head = _git("rev-parse", "HEAD")
    if head is None:  # this checkout is not a git repository (e.g. an sdist): then there is no commit to name
        assert p["git_commit"] is None
    else:
        assert p["git_commit"] in (head, f"{head}+dirty")


def test_provenance_names_the_commit_the_process_started_with(monkeypatch):
    from attention_course import measure
    monkeypatch.setattr(measure, "_COMMIT_AT_IMPORT", "0" * 40)  # the checkout moved on during a long run
    assert provenance()["git_commit"] == "0" * 40


def test_git_commit_outside_a_repository_is_none(tmp_path):
    assert _git_commit(tmp_path) is None


def test_write_results_round_trips_with_provenance(tmp_path):
    path = write_results(tmp_path / "results" / "bench_x.json", {"ratio": 0.9, "times": [1.0, 2.0]},
                         {"reps": 3, "threads": 1}, code=[time_interleaved])
    assert path == tmp_path / "results" / "bench_x.json"
    record = json.loads(path.read_text())
    assert record["results"] == {"ratio": 0.9, "times": [1.0, 2.0]}
    assert record["settings"] == {"reps": 3, "threads": 1}
    assert set(record["provenance"]) == set(provenance()) | {"environment", "fingerprint"}
    # the runs' environment takes the settings' thread count; the fingerprint names the code and hashes it
    assert record["provenance"]["environment"] == numeric_environment(threads=1)
    stamp = record["provenance"]["fingerprint"]
    assert stamp["code"] == ["attention_course.measure.time_interleaved"]
    assert stamp["sha256"] == code_fingerprint([time_interleaved], {"reps": 3, "threads": 1})
    with pytest.raises(TypeError, match="results must be a mapping"):
        write_results(tmp_path / "y.json", [1, 2], {}, code=[time_interleaved])
    with pytest.raises(TypeError, match="settings must be a mapping"):
        write_results(tmp_path / "y.json", {}, None, code=[time_interleaved])
    with pytest.raises(TypeError, match="JSON-serialisable"):
        write_results(tmp_path / "y.json", {"t": torch.ones(2)}, {}, code=[time_interleaved])
    assert not (tmp_path / "y.json").exists()


def test_count_copies_counts_copy_and_clone_calls_and_prints_nothing(capfd):
    x = torch.randn(4, 4)
    one = count_copies(lambda: x.clone())
    assert one >= 1  # a clone, and the copy_ it runs inside, are both counted
    assert count_copies(lambda: (x.clone(), x.clone(), x.clone(), x @ x)) == 3 * one
    assert count_copies(lambda: x @ x) == 0
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_attention_flops_at_the_edges():
    assert attention_flops(0, 4, 4, 8) == attention_flops(2, 0, 4, 8) == attention_flops(2, 4, 0, 8, causal=True) == 0
    assert attention_flops(2, 4, 4, 0, 0) == 0


def test_device_peak_tflops_matches_whole_names_only():
    from attention_course.measure import device_peak_tflops

    assert device_peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert device_peak_tflops("NVIDIA L4") == 121.0
    assert device_peak_tflops("NVIDIA L40") is None  # not the L4's figure
    assert device_peak_tflops("NVIDIA RTX A1000") is None  # not the A100's
    assert device_peak_tflops("NVIDIA H100 PCIe") == 756.0


def test_read_results_finds_the_checkout_and_falls_back_to_the_repository(tmp_path, monkeypatch):
    """A results file is read from the checkout; a reader with only the package (Colab) downloads it from the
    course's repository (here a file:// stand-in with GitHub's /raw/main/ layout)."""
    import json

    from attention_course.measure import read_results

    assert set(read_results("bench_mha")) == {"provenance", "settings", "results"}
    remote = tmp_path / "repo" / "raw" / "main" / "benchmarks" / "results"
    remote.mkdir(parents=True)
    (remote / "only_remote.json").write_text(json.dumps({"results": {"x": 1}}))
    monkeypatch.chdir(tmp_path)
    assert read_results("only_remote", repository=f"git+file://{tmp_path / 'repo'}.git") == {"results": {"x": 1}}
    with pytest.raises(ValueError, match="repository="):
        read_results("only_remote")


def test_op_counts_counts_each_call():
    x = torch.ones(3)
    counts = op_counts(lambda: (x.clone(), x.clone(), torch.exp(x)))
    assert counts["aten::clone"] == 2 and counts["aten::exp"] == 1
    assert op_counts(lambda: (x.clone(), x.clone(), torch.exp(x))) == counts  # the same every time


# --- the benchmarks' --seeds option -------------------------------------------------------------------------------


def test_seed_range_reads_first_last_inclusive_or_one_seed():
    assert seed_range("0-4") == range(5)
    assert seed_range("0-1") == range(2)
    assert seed_range("5-9") == range(5, 10)
    assert seed_range("3") == range(3, 4)
    assert seed_range("2-2") == range(2, 3)
    assert seed_range(" 0 - 1 ") == range(2)  # as a shell or a Makefile may space it
    assert list(seed_range("0-4")) == [0, 1, 2, 3, 4]  # a script's settings["seeds"] as before


@pytest.mark.parametrize("bad", ["3-1", "a-b", "", "-", "0-", "-2", "-1-2", "1-2-3", "0,1", "1.0-2", "0..4", "٣"])
def test_seed_range_rejects_what_is_not_first_last(bad):
    with pytest.raises(ValueError, match=r"text must be seeds 'FIRST-LAST'.*got") as info:
        seed_range(bad)
    assert repr(bad) in str(info.value)


def test_seed_range_says_first_must_not_exceed_last():
    with pytest.raises(ValueError, match="FIRST <= LAST"):
        seed_range("3-1")


def test_seed_range_is_the_benchmarks_argparse_type():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=seed_range, default="0-4")
    assert parser.parse_args([]).seeds == range(5)  # argparse converts a string default too
    assert parser.parse_args(["--seeds", "0-1"]).seeds == range(2)
    with pytest.raises(SystemExit):
        parser.parse_args(["--seeds", "3-1"])


def test_seed_range_wants_a_string():
    with pytest.raises(TypeError, match="text must be"):
        seed_range(3)


def test_measured_on_names_a_records_device():
    from attention_course.measure import measured_on, read_results

    assert measured_on(read_results("bench_kernel_cuda_v1", history=True)) == "NVIDIA H200"
    assert measured_on({"provenance": {"device": "cpu"}}) == "cpu"
    with pytest.raises(TypeError, match="record must be a dict"):
        measured_on([("provenance", {})])
    with pytest.raises(ValueError, match=r"record must hold provenance\.device.*\['results'\]"):
        measured_on({"results": {}})
