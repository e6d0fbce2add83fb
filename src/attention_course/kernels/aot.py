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

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import NamedTuple

import torch

from .._checks import check_choice, check_dtype, check_flag, check_int, describe
from .flash_triton import DTYPES, MAX_HEAD_DIM, check_tile, halve_tiles, kernels_for, tile_sizes, wide_buffers

__all__ = ["SHARED_MEMORY", "VARIANTS", "GpuCompilation", "compile_for_gpu", "stores_in_loops", "tiles_for_gpu"]

#: Shared memory one program (thread block) may use, in bytes, by compute capability × 10 (NVIDIA's CUDA C
#: Programming Guide, "Technical Specifications per Compute Capability": the opt-in maximum per block).
SHARED_MEMORY = {75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}

#: The variants of the kernels a model launches: name → (the kernels it applies to, :func:`compile_for_gpu`'s
#: options). ``benchmarks/kernel_tiles.py`` compiles each at the default tiles; a test holds every one to no spill.
VARIANTS = {
    "no mask": (("forward", "dkdv", "dq"), {}),
    "causal": (("forward", "dkdv", "dq"), {"causal": True}),
    "window": (("forward", "dkdv", "dq"), {"causal": True, "windowed": True}),
    "atomic dQ": (("dkdv",), {"deterministic": False}),
    "atomic dQ, causal": (("dkdv",), {"causal": True, "deterministic": False}),
    "int64 offsets, causal": (("forward", "dkdv", "dq"), {"causal": True, "int64_offsets": True}),
    "negative scale": (("forward",), {"negative_scale": True}),
}

_POINTERS = {"forward": ("Q", "K", "V", "O", "LSE*"), "dkdv": ("Q", "K", "V", "DO", "LSE*", "DELTA*", "DK", "DV", "DQ"),
             "dq": ("Q", "K", "V", "DO", "LSE*", "DELTA*", "DQ")}  # *: float32 whatever the inputs' dtype


class GpuCompilation(NamedTuple):
    """One kernel compiled ahead of time for an NVIDIA architecture by :func:`compile_for_gpu`, with what ``ptxas``
    reports of it."""

    kernel: str  #: "forward", "dkdv" or "dq"
    arch: int  #: compute capability × 10: 80 for an A100, 90 for an H100
    block_m: int  #: queries per tile
    block_n: int  #: keys per tile
    block_d: int
    warps: int
    stages: int
    shared_bytes: int  #: shared memory one program needs (the GPU's limit per block: :data:`SHARED_MEMORY`)
    registers: int  #: 32-bit registers per thread (at most 255)
    spill_bytes: int  #: bytes per thread stored to local memory because the registers ran out (0: no spill)
    loop_stores: int  #: tiles a loop iteration writes from registers into shared memory (Triton's TTGIR)
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
    deterministic: bool = True,
    n: int = 4096,
    int64_offsets: bool = False,
    negative_scale: bool = False,
) -> list[GpuCompilation]:
    """Compile the kernels for an NVIDIA GPU without one, as a launch of
    :func:`~attention_course.kernels.triton_attention` would compile them: Triton's compiler and ``ptxas`` run on
    the CPU, so a machine with no GPU can check that the code compiles for, say, an H100, how much shared memory
    its tiles take (what decides whether a launch fits a smaller GPU), and how many registers a thread uses and
    whether any spill to memory. The arguments are specialised as a launch specialises them — 16-byte aligned
    tensors, sizes divisible by 16 where they are, a group of 1 as a constant — which decides the vectorised
    loads and the software pipelining, and so the registers and shared memory. Runs in a fresh Python without
    ``TRITON_INTERPRET`` (triton compiles for a GPU only if imported that way); a few seconds per kernel.

    Args:
        arch: compute capability × 10, one of 75 (T4, Colab's GPU), 80 (A100), 86, 89 (consumer Ampere, Ada),
            90 (H100).
        dtype: the inputs' dtype (float32, float16 or bfloat16).
        d: head size, 1 to 256; causal, block_q, block_k, deterministic: as
            :func:`~attention_course.kernels.triton_attention` (the tiles by default those it launches on ``arch``).
        kernels: which of "forward", "dkdv", "dq" to compile.
        windowed: compile the sliding-window variant (``triton_attention(..., window=...)``; needs ``causal``).
        n: the sequence length the launch is for (its divisibility by 16 is what the code depends on).
        int64_offsets: the variant a launch takes past 2³¹ elements in one head (``LONG``: offsets within a head in
            int64; :func:`~attention_course.kernels.flash_triton.needs_int64`), here without so long an ``n``.
        negative_scale: the forward kernel's variant for a negative ``scale`` (``NEGATIVE``: each row's maximum
            score is its smallest product).

    Raises:
        TypeError, ValueError: bad arguments. ImportError: triton is not installed. RuntimeError: the compiler
            failed (its message attached).
    """
    arch = check_choice("arch", arch, tuple(SHARED_MEMORY))
    dtype = check_dtype("dtype", dtype)
    if dtype not in DTYPES:
        raise TypeError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
    d = check_int("d", d, high=MAX_HEAD_DIM)
    n = check_int("n", n, high=2**30)
    causal = check_flag("causal", causal)
    deterministic = check_flag("deterministic", deterministic)
    int64_offsets, negative_scale = check_flag("int64_offsets", int64_offsets), check_flag("negative_scale",
                                                                                          negative_scale)
    if check_flag("windowed", windowed) and not causal:
        raise ValueError("windowed must come with causal=True (a sliding window looks back from each query), got "
                         "windowed=True with causal=False")
    if isinstance(kernels, str) or not isinstance(kernels, (tuple, list)) or not kernels:
        raise TypeError(f"kernels must be a non-empty tuple of kernel names, got {describe(kernels)}")
    for name in kernels:
        check_choice("kernels", name, tuple(_POINTERS))
    sides = check_tile("block_q", block_q), check_tile("block_k", block_k)
    tiles = {name: tile_sizes(name, d, dtype, arch, *sides) for name in kernels}
    # In a fresh Python without TRITON_INTERPRET: triton compiles for a GPU only if it was imported that way.
    request = {"arch": arch, "dtype": str(dtype).removeprefix("torch."), "d": d, "n": n,
               "kernels": {name: [*t, block_d] for name, (t, block_d) in tiles.items()},
               "flags": {"CAUSAL": causal, "WINDOWED": windowed, "NEGATIVE": negative_scale, "LONG": int64_offsets,
                         "ATOMIC_DQ": not deterministic}}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when it is unset; 1 is its default
    env["TRITON_DUMP_PTXAS_LOG"] = "1"  # ptxas -v's report of registers and spills, as triton runs it
    # named through the function itself, so that a results file's fingerprint follows it into the kernels' code
    code = f"from {__name__} import {_compile_here.__name__} as run; run({json.dumps(request)!r})"
    with tempfile.TemporaryDirectory() as cache:  # a cache of its own: compilations in parallel never share files
        env["TRITON_CACHE_DIR"] = cache
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if done.returncode:
        if "must have triton" in done.stderr:
            raise ImportError(done.stderr.strip().splitlines()[-1].split(": ", 1)[-1])
        raise RuntimeError(f"compiling for sm_{arch} failed:\n{done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return [GpuCompilation(name, arch, *tiles[name][0][:2], tiles[name][1], *tiles[name][0][2:], *rest)
            for name, *rest in found]


def _compile_here(request: str) -> None:
    """compile_for_gpu's work, in the fresh process it starts: prints [(kernel, shared bytes, registers, spilled
    bytes, stores in loops, PTX)] as JSON."""
    request = json.loads(request)
    compiled = kernels_for(False)
    import triton  # after kernels_for, which explains a missing triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import MockTensor, create_function_from_signature

    target = GPUTarget("cuda", request["arch"], 32)
    backend = make_backend(target)
    dtype, n, d = getattr(torch, request["dtype"]), request["n"], request["d"]
    found = []
    for name, (block_m, block_n, warps, stages, block_d) in request["kernels"].items():
        kernel = getattr(compiled, name)
        # the arguments of a launch on (batch, 16 heads, n, d) tensors, the tensors as triton's stand-ins (an
        # aligned address and a dtype): triton's own binder specialises them as a launch does
        # float32 where the launcher passes float32: lse and D always, the gradient buffers by the launcher's own
        # rule (one key-value head per query head here: group 1 in the arguments below)
        wide = {p.rstrip("*") for p in _POINTERS[name] if p.endswith("*")}
        wide |= wide_buffers(atomic_dq=request["flags"]["ATOMIC_DQ"], grouped=False)
        tensors = [MockTensor(torch.float32 if p.rstrip("*") in wide else dtype) for p in _POINTERS[name]]
        args = (*tensors, 0.125, n, n, d, 16, 1, 0, 0)  # scale, n_q, n_k, d, heads, group, offset, window
        flags = {p.name: request["flags"][p.name] for p in kernel.params if p.name in request["flags"]}
        options = {**flags, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_D": block_d, "num_warps": warps,
                   "num_stages": stages}
        binder = create_function_from_signature(kernel.signature, kernel.params, backend)
        bound, specialization, parsed = binder(*args, **options)
        opts, signature, constants, attrs = kernel._pack_args(backend, options, bound, specialization, parsed)
        log = io.StringIO()
        with contextlib.redirect_stdout(log):  # TRITON_DUMP_PTXAS_LOG: triton prints the log of its own ptxas run
            binary = triton.compile(ASTSource(kernel, signature, constants, attrs), target=target,
                                    options=opts.__dict__)
        registers, spilled = _ptxas_report(log.getvalue(), request["arch"])
        found.append((name, binary.metadata.shared, registers, spilled, stores_in_loops(binary.asm["ttgir"]),
                      binary.asm["ptx"]))
    print(json.dumps(found))


def stores_in_loops(ttgir: str) -> int:
    """How many operations inside a loop (``scf.for``) of Triton's GPU IR write a tile from registers into shared
    memory (``ttg.local_alloc`` of a value, ``ttg.local_store``): a tensor-core product on Hopper reads its right
    operand from shared memory, so a tile computed in the loop and multiplied there, or a loop-invariant tile
    stored again each time, costs such a write every iteration. Tiles the loop loads from global memory go to
    shared memory by asynchronous copies instead, and are not counted.

    Raises:
        TypeError: ``ttgir`` is not a string.
    """
    if not isinstance(ttgir, str):
        raise TypeError(f"ttgir must be Triton's GPU IR as a string (a compiled kernel's asm['ttgir']), got "
                        f"{describe(ttgir)}")
    depth, loops, count = 0, [], 0
    for line in ttgir.splitlines():
        code = line.split("//")[0]
        if loops and ("ttg.local_store" in code or re.search(r"ttg\.local_alloc %", code)):
            count += 1
        if "scf.for" in code and code.rstrip().endswith("{"):
            loops.append(depth)
        depth += code.count("{") - code.count("}")
        while loops and depth <= loops[-1]:
            loops.pop()
    return count


def _ptxas_report(log: str, arch: int) -> tuple[int, int]:
    """(registers per thread, bytes spilled per thread) from the ``ptxas -v`` log of triton's own assembly of a
    kernel (the options a launch uses, ``--regAllocOptLevel`` included)."""
    registers = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores", log)
    if registers is None or spills is None:
        raise RuntimeError(f"ptxas -v reported no registers or spills for sm_{arch}:\n{log[-2000:]}")
    return int(registers.group(1)), int(spills.group(1))


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
    d = check_int("d", d, high=MAX_HEAD_DIM)
    fitted = []
    for name in kernels:
        m, n = tile_sizes(name, d, dtype, arch)[0][:2]
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
