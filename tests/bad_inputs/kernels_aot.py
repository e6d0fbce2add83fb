"""Bad inputs for kernels/aot.py: compiling for a GPU one does not have. Every check runs before triton is
imported or a compiler is started, so these cases run (and pass) on machines without triton too."""

from __future__ import annotations

import torch

from attention_course.kernels.aot import SHARED_MEMORY, GpuCompilation, compile_for_gpu, stores_in_loops, tiles_for_gpu

from . import case

#: compile_for_gpu's records, which no function takes back.
RESULTS = [GpuCompilation]

CASES = [
    case(compile_for_gpu, lambda: compile_for_gpu(70), ValueError, arg="arch", says="75",
         id="kernels.compile_for_gpu-arch"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, torch.float64), TypeError, arg="dtype", says="bfloat16",
         id="kernels.compile_for_gpu-dtype"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, "bf16"), TypeError, arg="dtype",
         id="kernels.compile_for_gpu-dtype-string"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, d=512), ValueError, arg="d", id="kernels.compile_for_gpu-d"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, kernels="forward"), TypeError, arg="kernels",
         id="kernels.compile_for_gpu-kernels-string"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, kernels=("backward",)), ValueError, arg="kernels",
         says="'dq'", id="kernels.compile_for_gpu-kernels-name"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, block_k=48), ValueError, arg="block_k",
         id="kernels.compile_for_gpu-block"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, int64_offsets=1), TypeError, arg="int64_offsets",
         id="kernels.compile_for_gpu-int64-offsets"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, negative_scale="yes"), TypeError, arg="negative_scale",
         id="kernels.compile_for_gpu-negative-scale"),
    case((tiles_for_gpu, SHARED_MEMORY), lambda: tiles_for_gpu(70), ValueError, arg="arch", says="75",
         id="kernels.tiles_for_gpu-arch"),
    case(tiles_for_gpu, lambda: tiles_for_gpu(75, torch.float64), TypeError, arg="dtype",
         id="kernels.tiles_for_gpu-dtype"),
    case(tiles_for_gpu, lambda: tiles_for_gpu(75, d=0), ValueError, arg="d", id="kernels.tiles_for_gpu-d"),
    case(tiles_for_gpu, lambda: tiles_for_gpu(75, kernels="dq"), TypeError, arg="kernels",
         id="kernels.tiles_for_gpu-kernels"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, windowed="yes"), TypeError, arg="windowed",
         id="kernels.compile_for_gpu-windowed-type"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, windowed=True), ValueError, arg="windowed", says="causal",
         id="kernels.compile_for_gpu-windowed-not-causal"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, deterministic="no"), TypeError, arg="deterministic",
         id="kernels.compile_for_gpu-deterministic"),
    case(compile_for_gpu, lambda: compile_for_gpu(90, n=0), ValueError, arg="n", id="kernels.compile_for_gpu-n"),
    case(stores_in_loops, lambda: stores_in_loops(b"scf.for"), TypeError, arg="ttgir", says="string",
         id="kernels.stores_in_loops-bytes"),
]
