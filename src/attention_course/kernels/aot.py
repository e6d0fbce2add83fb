"""Compiling the Triton kernels for an NVIDIA GPU one does not have (chapter 6): Triton's compiler and NVIDIA's
``ptxas`` run on the CPU, so a machine without a GPU can check that :mod:`~attention_course.kernels.flash_triton`'s
kernels compile for a given architecture, read the PTX they become (``mma`` instructions are tensor cores), and
measure the shared memory a program's tiles take — which decides whether a launch fits a GPU at all.

* :func:`compile_for_gpu`: the kernels at given tiles, for one architecture.
* :func:`tiles_for_gpu`: the tiles a GPU of that architecture can launch — the default tiles, halved (as a launch
  that runs out of shared memory halves them, :func:`~attention_course.kernels.flash_triton._launch`) until a
  program fits :data:`SHARED_MEMORY`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import NamedTuple

import torch

from .._checks import check_choice, check_dtype, check_flag, check_int, describe
from .flash_triton import DTYPES, MAX_HEAD_DIM, check_tile, halve_tiles, kernels_for, tile_sizes

__all__ = ["SHARED_MEMORY", "GpuCompilation", "compile_for_gpu", "tiles_for_gpu"]

#: Shared memory one program (thread block) may use, in bytes, by compute capability × 10 (NVIDIA's CUDA C
#: Programming Guide, "Technical Specifications per Compute Capability": the opt-in maximum per block).
SHARED_MEMORY = {75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}

_TRITON_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_POINTERS = {"forward": ("Q", "K", "V", "O", "LSE*"), "dkdv": ("Q", "K", "V", "DO", "LSE*", "DELTA*", "DK", "DV"),
             "dq": ("Q", "K", "V", "DO", "LSE*", "DELTA*", "DQ")}  # *: float32 whatever the inputs' dtype


class GpuCompilation(NamedTuple):
    """One kernel compiled ahead of time for an NVIDIA architecture by :func:`compile_for_gpu`."""

    kernel: str  #: "forward", "dkdv" or "dq"
    arch: int  #: compute capability × 10: 80 for an A100, 90 for an H100
    block_m: int
    block_n: int
    block_d: int
    shared_bytes: int  #: shared memory one program needs (the GPU's limit per block: :data:`SHARED_MEMORY`)
    ptx: str  #: the PTX assembly Triton generated (``mma`` instructions are the tensor cores)


def compile_for_gpu(
    arch: int = 90,
    dtype: torch.dtype = torch.bfloat16,
    d: int = 64,
    *,
    causal: bool = False,
    kernels: tuple[str, ...] = ("forward", "dkdv", "dq"),
    block_q: int | None = None,
    block_k: int | None = None,
    windowed: bool = False,
) -> list[GpuCompilation]:
    """Compile the kernels for an NVIDIA GPU without one: Triton's compiler and ``ptxas`` run on the CPU, so a
    machine with no GPU can check that the code compiles for, say, an H100 and how much shared memory its tiles
    take (what decides whether a launch fits a smaller GPU). Runs in a fresh Python without ``TRITON_INTERPRET``
    (triton compiles for a GPU only if imported that way); takes a few seconds per kernel.

    Args:
        arch: compute capability × 10, one of 75 (T4, Colab's GPU), 80 (A100), 86, 89 (consumer Ampere, Ada),
            90 (H100).
        dtype: the inputs' dtype (float32, float16 or bfloat16).
        d: head size, 1 to 256; causal, block_q, block_k: as :func:`~attention_course.kernels.triton_attention`.
        kernels: which of "forward", "dkdv", "dq" to compile.
        windowed: compile the sliding-window variant (``triton_attention(..., window=...)``; needs ``causal``).

    Raises:
        TypeError, ValueError: bad arguments. ImportError: triton is not installed. RuntimeError: the compiler
            failed (its message attached).
    """
    arch = check_choice("arch", arch, tuple(SHARED_MEMORY))
    dtype = check_dtype("dtype", dtype)
    if dtype not in DTYPES:
        raise TypeError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
    d = check_int("d", d, high=MAX_HEAD_DIM)
    causal = check_flag("causal", causal)
    if check_flag("windowed", windowed) and not causal:
        raise ValueError("windowed must come with causal=True (a sliding window looks back from each query), got "
                         "windowed=True with causal=False")
    if isinstance(kernels, str) or not isinstance(kernels, (tuple, list)) or not kernels:
        raise TypeError(f"kernels must be a non-empty tuple of kernel names, got {describe(kernels)}")
    for name in kernels:
        check_choice("kernels", name, tuple(_POINTERS))
    block_m, block_n, block_d, warps = tile_sizes(d, dtype, check_tile("block_q", block_q),
                                               check_tile("block_k", block_k))
    # In a fresh Python without TRITON_INTERPRET: triton compiles for a GPU only if it was imported that way.
    request = {"arch": arch, "dtype": _TRITON_TYPES[dtype], "kernels": list(kernels), "warps": warps,
               "constants": {"CAUSAL": causal, "WINDOWED": windowed, "BLOCK_M": block_m, "BLOCK_N": block_n,
                             "BLOCK_D": block_d}}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # named through the function itself, so that a results file's fingerprint follows it into the kernels' code
    code = f"from {__name__} import {_compile_here.__name__} as run; run({json.dumps(request)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if done.returncode:
        if "must have triton" in done.stderr:
            raise ImportError(done.stderr.strip().splitlines()[-1].split(": ", 1)[-1])
        raise RuntimeError(f"compiling for sm_{arch} failed:\n{done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return [GpuCompilation(name, arch, block_m, block_n, block_d, shared, ptx) for name, shared, ptx in found]


def _compile_here(request: str) -> None:
    """compile_for_gpu's work, in the fresh process it starts: prints [(kernel, shared bytes, PTX)] as JSON."""
    request = json.loads(request)
    compiled = kernels_for(False)
    import triton  # after kernels_for, which explains a missing triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    pointer = f"*{request['dtype']}"
    constants = request["constants"]
    found = []
    for name in request["kernels"]:
        pointers = {p.rstrip("*"): "*fp32" if p.endswith("*") else pointer for p in _POINTERS[name]}
        kernel = getattr(compiled, name)
        # in the kernel's order: pointers, the scale (float32), sizes, heads, offset and window (int32), constants
        signature = {p.name: "constexpr" if p.is_constexpr else pointers.get(p.name) or
                     ("fp32" if "scale" in p.name else "i32") for p in kernel.params}
        kernel = triton.compile(ASTSource(kernel, signature, constants),
                                target=GPUTarget("cuda", request["arch"], 32), options={"num_warps": request["warps"]})
        found.append((name, kernel.metadata.shared, kernel.asm["ptx"]))
    print(json.dumps(found))


def tiles_for_gpu(
    arch: int,
    dtype: torch.dtype = torch.float16,
    d: int = 64,
    *,
    causal: bool = False,
    kernels: tuple[str, ...] = ("forward", "dkdv", "dq"),
) -> list[GpuCompilation]:
    """For each kernel, the largest tiles a GPU of ``arch`` can launch: :func:`compile_for_gpu` at the default
    tiles (:func:`~attention_course.kernels.flash_triton.tile_sizes`), then halved the way a launch that runs out of
    shared memory halves them, until a program needs at most :data:`SHARED_MEMORY` ``[arch]``. A few seconds per
    compilation.

    Raises:
        As :func:`compile_for_gpu`; RuntimeError: not even 16 × 16 tiles fit.
    """
    arch = check_choice("arch", arch, tuple(SHARED_MEMORY))
    if isinstance(kernels, str) or not isinstance(kernels, (tuple, list)) or not kernels:
        raise TypeError(f"kernels must be a non-empty tuple of kernel names, got {describe(kernels)}")
    dtype = check_dtype("dtype", dtype)
    if dtype not in DTYPES:
        raise TypeError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
    block_m, block_n, _, _ = tile_sizes(check_int("d", d, high=MAX_HEAD_DIM), dtype, None, None)
    fitted = []
    for name in kernels:
        m, n = block_m, block_n
        while True:
            (compiled,) = compile_for_gpu(arch, dtype, d, causal=causal, kernels=(name,), block_q=m, block_k=n)
            if compiled.shared_bytes <= SHARED_MEMORY[arch]:
                fitted.append(compiled)
                break
            if max(m, n) <= 16:
                raise RuntimeError(f"no tiles of the {name} kernel fit sm_{arch}'s {SHARED_MEMORY[arch]} bytes of "
                                   f"shared memory (16 x 16 needs {compiled.shared_bytes})")
            m, n = halve_tiles(m, n)
    return fitted
