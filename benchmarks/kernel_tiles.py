"""Chapter 6's kernels on every GPU a reader has: which tiles fit each architecture's shared memory, and whether
Triton's code for it uses the tensor cores — measured by compiling, so it needs no GPU.

For the T4 (sm_75, Colab's free GPU), the A100 (sm_80) and the H100 (sm_90), in float16, bfloat16 and float32, at
head sizes 64 and 128, each of the three kernels of ``attention_course.kernels.flash_triton`` is compiled at its
default tiles and, where a program needs more shared memory than the architecture allows
(``attention_course.kernels.aot.SHARED_MEMORY``), at the halved tiles a launch would try next
(``tiles_for_gpu``). Recorded per kernel: the default and the fitting tiles with their shared memory, and whether
the PTX holds ``mma`` (tensor-core) instructions.

Writes ``benchmarks/results/kernel_tiles.json`` with its provenance, the Triton version included (another Triton
may choose other layouts). About 3-10 s per compilation.

Usage:  python benchmarks/kernel_tiles.py
        python benchmarks/kernel_tiles.py --archs 75 --dtypes float16 --heads 64 --out /tmp/kernel_tiles.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from attention_course.kernels.aot import SHARED_MEMORY, compile_for_gpu, tiles_for_gpu
from attention_course.measure import write_results

RESULTS = Path(__file__).resolve().parent / "results" / "kernel_tiles.json"
KERNELS = ("forward", "dkdv", "dq")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", type=int, nargs="+", default=[75, 80, 90])
    p.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16", "float32"])
    p.add_argument("--heads", type=int, nargs="+", default=[64, 128])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    import triton

    rows = []
    for arch in args.archs:
        for name in args.dtypes:
            dtype = getattr(torch, name)
            for d in args.heads:
                start = time.perf_counter()
                default = compile_for_gpu(arch, dtype, d, kernels=KERNELS)
                fitted = [a if a.shared_bytes <= SHARED_MEMORY[arch] else  # what tiles_for_gpu would compile first
                          tiles_for_gpu(arch, dtype, d, kernels=(a.kernel,))[0] for a in default]
                for a, b in zip(default, fitted, strict=True):
                    rows.append({"arch": arch, "dtype": name, "d": d, "kernel": a.kernel,
                                 "default_tiles": [a.block_m, a.block_n], "default_shared_bytes": a.shared_bytes,
                                 "fitted_tiles": [b.block_m, b.block_n], "fitted_shared_bytes": b.shared_bytes,
                                 "tensor_cores": "mma" in b.ptx})
                print(f"sm_{arch} {name} d={d}: " + "; ".join(
                    f"{r['kernel']} {r['default_tiles']} {r['default_shared_bytes'] // 1024} KiB -> "
                    f"{r['fitted_tiles']} {r['fitted_shared_bytes'] // 1024} KiB, mma {r['tensor_cores']}"
                    for r in rows[-len(KERNELS):]) + f" ({time.perf_counter() - start:.0f} s)", flush=True)
    results = {"rows": rows, "shared_memory_limits": {str(a): SHARED_MEMORY[a] for a in args.archs}}
    settings = {"archs": args.archs, "dtypes": args.dtypes, "heads": args.heads, "kernels": list(KERNELS),
                "causal": False, "triton": triton.__version__}
    print(f"results written to {write_results(args.out, results, settings, code=[main])}")
    return results


if __name__ == "__main__":
    main()
