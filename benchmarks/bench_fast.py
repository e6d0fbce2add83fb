"""Attention at scale (chapter 6): the quadratic wall, tiled attention's memory, and naive vs tiled vs fused timings.

Three measurements, the runnable versions of the chapter's sections 6.1, 6.3 and 6.5:

* ``quadratic`` — time and peak memory of plain attention (``experiments.at_scale.plain_attention``,
  ``softmax(q kᵀ · scale) v``, which holds two n × n matrices: the honest baseline) and of the package's teaching
  version (``scaled_dot_product_attention``, four) for a range of n, with log–log fits of the growth (n ≥ 1024);
* ``memory``    — peak memory of plain vs tiled attention (``attention_course.tiled.tiled_attention``) vs n;
* ``compare``   — plain, naive (teaching), tiled and ``F.scaled_dot_product_attention`` timed *interleaved* in
  one process, each in the inputs' dtype, with their outputs checked equal first. On CUDA the fused call is
  also pinned to each backend (FlashAttention, memory-efficient, cuDNN), and the achieved TFLOP/s are compared
  with the device's 16-bit peak.

Peak memory is measured, not estimated: on the CPU by replaying the allocator's allocation/free stream that the
PyTorch profiler records (``attention_course.measure.peak_memory_bytes``), on CUDA with
``torch.cuda.max_memory_allocated``. Timings are ``attention_course.measure.time_interleaved``; CPU timings use
one thread by default (``--threads``): it compares the algorithms per core and is far less disturbed by other
processes. The race itself is chapter 6's experiment, ``attention_course.experiments.at_scale``.

The results, with their provenance (date, command, machine, threads, versions, commit), are written as JSON to
``benchmarks/results/bench_fast.json`` (``--out`` to write elsewhere).

Usage:  python benchmarks/bench_fast.py                          (all three, CPU, float32)
        python benchmarks/bench_fast.py quadratic --ns 256,512,1024,2048,4096,8192
        python benchmarks/bench_fast.py memory --block 512
        python benchmarks/bench_fast.py compare --device cuda --dtype bfloat16 --batch 4 --heads 16 --n 4096 --d 128
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch

from attention_course import scaled_dot_product_attention
from attention_course.experiments.at_scale import compare_implementations, plain_attention
from attention_course.measure import (
    device_name,
    device_peak_tflops,
    peak_memory_bytes,
    time_interleaved,
    write_results,
)
from attention_course.tiled import tiled_attention

RESULTS = Path(__file__).resolve().parent / "results" / "bench_fast.json"

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _inputs(batch: int, heads: int, n: int, d: int, dtype: torch.dtype, device: str, seed: int = 0):
    gen = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(batch, heads, n, d, generator=gen, device=device, dtype=dtype) for _ in range(3))


def _slope(ns, ys) -> float:
    """Least-squares slope of log y against log n: the exponent of the growth."""
    return float(np.polyfit(np.log(ns), np.log(ys), 1)[0])


def quadratic(ns: list[int], d: int, reps: int, threads: int) -> dict[str, object]:
    print(f"== plain and teaching (naive) attention, batch 1, 1 head, d = {d}, float32, CPU, {threads} thread(s)")
    print(f"{'n':>6} {'plain ms':>9} {'naive ms':>9} {'plain MiB':>10} {'naive MiB':>10} {'plain / (4 n^2 B)':>18}")
    out: dict[str, list[float]] = {"plain_s": [], "naive_s": [], "plain_peak_bytes": [], "naive_peak_bytes": []}
    for n in ns:
        q, k, v = _inputs(1, 1, n, d, torch.float32, "cpu")
        fns = {"plain": lambda: plain_attention(q, k, v),  # noqa: B023
               "naive": lambda: scaled_dot_product_attention(q, k, v)}  # noqa: B023
        t = time_interleaved(fns, reps=reps if n <= 4096 else 2, warmup=1, num_threads=threads)
        for name, fn in fns.items():
            out[f"{name}_s"].append(statistics.median(t[name]))
            out[f"{name}_peak_bytes"].append(peak_memory_bytes(fn))
        print(f"{n:>6} {1e3 * out['plain_s'][-1]:>9.1f} {1e3 * out['naive_s'][-1]:>9.1f} "
              f"{out['plain_peak_bytes'][-1] / 2**20:>10.1f} {out['naive_peak_bytes'][-1] / 2**20:>10.1f} "
              f"{out['plain_peak_bytes'][-1] / (4 * n * n):>18.2f}")
    big = [i for i, n in enumerate(ns) if n >= 1024] or list(range(len(ns)))
    fits = {f"{key}_exponent": _slope([ns[i] for i in big], [out[key][i] for i in big]) for key in out}
    print("growth exponents (log-log least squares, n >= 1024): "
          + ", ".join(f"{k.removesuffix('_exponent')} {v:.2f}" for k, v in fits.items()))
    return {"n": ns, **out, **fits}


def memory(ns: list[int], d: int, block: int) -> dict[str, object]:
    print(f"== peak memory, plain vs tiled (blocks {block} x {block}), batch 1, 1 head, d = {d}, float32, CPU")
    print(f"{'n':>6} {'plain (MiB)':>12} {'tiled (MiB)':>12} {'plain / tiled':>14}")
    plain, tiled = [], []
    for n in ns:
        q, k, v = _inputs(1, 1, n, d, torch.float32, "cpu")
        plain.append(peak_memory_bytes(lambda: plain_attention(q, k, v)))  # noqa: B023
        tiled.append(peak_memory_bytes(lambda: tiled_attention(q, k, v, block_q=block, block_k=block)))  # noqa: B023
        print(f"{n:>6} {plain[-1] / 2**20:>12.2f} {tiled[-1] / 2**20:>12.2f} {plain[-1] / tiled[-1]:>14.1f}")
    print(f"growth exponents: plain {_slope(ns, plain):.2f}, tiled {_slope(ns, tiled):.2f} "
          f"(tiled: a constant tile cost plus the n·d output, so its slope tends to 1)")
    return {"n": ns, "plain_peak_bytes": plain, "tiled_peak_bytes": tiled, "plain_exponent": _slope(ns, plain),
            "tiled_exponent": _slope(ns, tiled)}


def compare(device: str, dtype: torch.dtype, batch: int, heads: int, n: int, d: int, block: int, reps: int,
            causal: bool, threads: int) -> dict[str, dict[str, float]]:
    q, k, v = _inputs(batch, heads, n, d, dtype, device)
    res = compare_implementations(q, k, v, causal=causal, block=block, reps=reps, warmup=2, num_threads=threads)
    # the same numbers first (the tolerances of tests/test_tiled.py: float32 1e-5, 16-bit 1.6e-2)
    tol = 1e-5 if dtype in (torch.float32, torch.float64) else 2e-2
    bad = {name: r["max_abs_err"] for name, r in res.items() if not r["max_abs_err"] <= tol}
    if bad:
        raise AssertionError(f"outputs differ from naive attention by more than {tol}: {bad}")
    where = device_name(device) + ("" if device == "cuda" else f", {threads} thread(s)")
    peak_tf = device_peak_tflops(where) if device == "cuda" else None
    print(f"== {where}, torch {torch.__version__}: batch {batch}, heads {heads}, n {n}, d {d}, {dtype}, "
          f"{'causal' if causal else 'no mask'}, tiles {block} x {block}, {reps} interleaved reps")
    print(f"{'':22} {'median ms':>10} {'TFLOP/s':>9} {'% of peak':>10} {'peak mem (MiB)':>15} {'speed-up':>9} "
          f"{'max |err|':>10}")
    plain_s = res["plain"]["median_s"]
    for name, r in res.items():
        pct = f"{100 * r['tflops'] / peak_tf:9.1f}%" if peak_tf else f"{'n/a':>10}"
        print(f"{name:22} {1e3 * r['median_s']:>10.2f} {r['tflops']:>9.3g} {pct} {r['peak_bytes'] / 2**20:>15.1f} "
              f"{plain_s / r['median_s']:>8.2f}x {r['max_abs_err']:>10.1e}")
    if peak_tf:
        print(f"device peak (dense 16-bit tensor cores, data sheet): {peak_tf:.0f} TFLOP/s; speed-up = plain / it")
    return res


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="?", default="all", choices=["all", "quadratic", "memory", "compare"])
    p.add_argument("--ns", default="256,512,1024,2048,4096,8192", help="sequence lengths for quadratic/memory")
    p.add_argument("--d", type=int, default=64, help="head dimension d_k = d_v")
    p.add_argument("--block", type=int, default=None, help="tile size (default: 512 on the CPU, 128 on CUDA)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="PyTorch CPU threads while timing")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default=None, choices=list(DTYPES), help="default: float32 (CPU), bfloat16 (CUDA)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--n", type=int, default=2048, help="sequence length for compare")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON results")
    args = p.parse_args(argv)
    ns = [int(x) for x in args.ns.split(",")]
    block = args.block or (128 if args.device == "cuda" else 512)
    dtype = DTYPES[args.dtype or ("bfloat16" if args.device == "cuda" else "float32")]
    torch.manual_seed(0)
    results: dict[str, object] = {}
    if args.what in ("all", "quadratic"):
        results["quadratic"] = quadratic(ns, args.d, args.reps, args.threads)
    if args.what in ("all", "memory"):
        results["memory"] = memory(ns, args.d, block)
    if args.what in ("all", "compare"):
        results["compare"] = compare(args.device, dtype, args.batch, args.heads, args.n, args.d, block, args.reps,
                                     args.causal, args.threads)
    settings = {**{k: v for k, v in vars(args).items() if k != "out"}, "block_used": block, "dtype_used": str(dtype)}
    print(f"results written to {write_results(args.out, results, settings, device=args.device, code=[main])}")


if __name__ == "__main__":
    main()
