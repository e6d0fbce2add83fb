"""Chapter 6's kernels on every GPU a reader has, as a launch compiles them: registers, spills, shared memory and
tensor cores per kernel — measured by compiling, so it needs no GPU.

For the A100 (sm_80) and the H100/H200 (sm_90), in float16, bfloat16 and float32, at head sizes 64, 128 and 256, each
kernel of ``attention_course.kernels.flash_triton`` is compiled at its default tiles (``flash_triton.DEFAULT_TILES``)
with the specialisation a launch gives it (``kernels.aot.compile_for_gpu``), in each variant a model launches: no
mask, causal, a sliding window, the dK, dV kernel adding into dQ atomically (``deterministic=False``), offsets in
int64 (a head past 2³¹ elements, causal) and a negative scale (forward). Recorded per kernel and variant: the tiles,
warps and pipeline depth, the 32-bit registers a thread uses and the bytes it spills to memory (``ptxas -v``), the
shared memory a program needs, and whether the PTX holds tensor-core (``mma``) instructions. For the T4 (sm_75,
Colab's free GPU), whose 64 KiB of shared memory is smaller than some default tiles need, the tiles a launch halves
them to (``tiles_for_gpu``).

Writes ``benchmarks/results/kernel_tiles.json`` with its provenance, the Triton version included (another Triton
may choose other layouts and registers); ``tests/test_kernels.py`` fails if any kernel there spills but the one
it names (float32, d = 128, int64 offsets, on sm_90).
About 2-5 s per kernel compiled, 10-15 minutes in all on two cores.

Usage:  python benchmarks/kernel_tiles.py
        python benchmarks/kernel_tiles.py --archs 90 --dtypes float16 --heads 64 --out /tmp/kernel_tiles.json
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from attention_course.kernels.aot import SHARED_MEMORY, VARIANTS, compile_for_gpu, tiles_for_gpu
from attention_course.measure import write_results

RESULTS = Path(__file__).resolve().parent / "results" / "kernel_tiles.json"
KERNELS = ("forward", "dkdv", "dq")
def _row(compiled, dtype: str, d: int, variant: str) -> dict:
    return {"arch": compiled.arch, "dtype": dtype, "d": d, "kernel": compiled.kernel, "variant": variant,
            "tiles": [compiled.block_m, compiled.block_n], "warps": compiled.warps, "stages": compiled.stages,
            "registers": compiled.registers, "spill_bytes": compiled.spill_bytes, "loop_stores": compiled.loop_stores,
            "shared_bytes": compiled.shared_bytes, "fits": compiled.shared_bytes <= SHARED_MEMORY[compiled.arch],
            "tensor_cores": "mma" in compiled.ptx}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", type=int, nargs="+", default=[80, 90])
    p.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16", "float32"])
    p.add_argument("--heads", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--small", type=int, nargs="*", default=[75], help="architectures whose fitted tiles to record")
    p.add_argument("--jobs", type=int, default=2, help="compilations at once (each a fresh Python)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    import triton

    def compile_one(job: tuple) -> list[dict]:
        arch, name, d, variant = job
        kernels, options = VARIANTS[variant]
        start = time.perf_counter()
        rows = [_row(c, name, d, variant) for c in compile_for_gpu(arch, getattr(torch, name), d, kernels=kernels,
                                                                  **options)]
        print(f"sm_{arch} {name} d={d} {variant}: " + "; ".join(
            f"{r['kernel']} {r['tiles']} {r['warps']}w {r['registers']} regs, {r['spill_bytes']} B spilled, "
            f"{r['shared_bytes'] // 1024} KiB" for r in rows) + f" ({time.perf_counter() - start:.0f} s)", flush=True)
        return rows

    jobs = [(arch, name, d, variant) for arch in args.archs for name in args.dtypes for d in args.heads
            for variant in VARIANTS]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = [row for found in pool.map(compile_one, jobs) for row in found]
    fitted = []
    for arch in args.small:
        for name in args.dtypes:
            for d in args.heads:
                for kernel in KERNELS:
                    try:
                        (c,) = tiles_for_gpu(arch, getattr(torch, name), d, kernels=(kernel,))
                    except RuntimeError as error:  # not even 16 × 16 tiles fit: recorded, as a launch refuses it
                        fitted.append({"arch": arch, "dtype": name, "d": d, "kernel": kernel, "variant": "no mask",
                                       "fits": False, "why": str(error)})
                        print(f"sm_{arch} {name} d={d}: {error}", flush=True)
                        continue
                    fitted.append(_row(c, name, d, "no mask"))
                    print(f"sm_{arch} {name} d={d}: {c.kernel} fits at {c.block_m}×{c.block_n}, "
                          f"{c.shared_bytes // 1024} KiB", flush=True)
    results = {"rows": rows, "fitted": fitted,
               "shared_memory_limits": {str(a): SHARED_MEMORY[a] for a in (*args.archs, *args.small)}}
    settings = {"archs": args.archs, "small": args.small, "dtypes": args.dtypes, "heads": args.heads,
                "kernels": list(KERNELS), "variants": list(VARIANTS), "triton": triton.__version__}
    print(f"results written to {write_results(args.out, results, settings, code=[main])}")
    return results


if __name__ == "__main__":
    main()
