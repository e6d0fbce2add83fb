"""The course's Triton kernel against PyTorch's fused attention backends on a GPU, forward and backward (chapter 6).

``attention_course.kernels.triton_attention`` (FlashAttention-2's algorithm, written in Triton for chapter 6) is raced
against ``F.scaled_dot_product_attention`` pinned to each of PyTorch's CUDA backends: FlashAttention-2
(``flash``), memory-efficient (xFormers' kernel) and cuDNN. For each shape the script first checks every
implementation against float32 attention (PyTorch's ``math`` backend, inputs upcast) on the first batch
element — outputs and the gradients of q, k and v — and asserts that the kernel's error is at most twice
FlashAttention-2's own (plus 1e-3); then it times forward and forward+backward *interleaved*
(``attention_course.measure.time_interleaved``) and reports TFLOP/s: ``4·n²·d`` per head for the forward pass
(half of it under a causal mask), and 2.5 times that again for the backward pass (FlashAttention's convention).

The results, with their provenance, are written as JSON to ``benchmarks/results/bench_kernel_cuda.json``
(``--out`` to write elsewhere). A GPU is required: on a machine without one the script says so and exits.

Usage:  python benchmarks/bench_kernel.py                       (bfloat16, the twelve shapes of SHAPES)
        python benchmarks/bench_kernel.py --dtype float16 --reps 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from attention_course.measure import attention_flops, device_name, device_peak_tflops, time_interleaved, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "bench_kernel_cuda.json"
# (batch, heads, n, d, causal): n from 1,024 to 16,384 at 65,536 tokens a batch, d 64 and 128, causal and not
SHAPES = tuple((65_536 // n, 16, n, d, causal) for d in (64, 128) for causal in (False, True)
               for n in (1024, 4096, 16_384))
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
BACKWARD_FACTOR = 2.5  # backward FLOPs / forward FLOPs (FlashAttention's convention: five matrix products vs two)


def implementations(causal: bool) -> dict[str, Callable[..., torch.Tensor]]:
    """name → f(q, k, v) returning the attention output: the course's kernel and each pinned PyTorch backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attention_course.kernels import triton_attention

    def pinned(backend: SDPBackend) -> Callable[..., torch.Tensor]:
        def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    def course(**options: bool) -> Callable[..., torch.Tensor]:
        return lambda q, k, v: triton_attention(q, k, v, causal=causal, **options).output

    # the default tiles and the tuned ones (CANDIDATES, timed at the first call), each with the deterministic
    # two-pass dQ and with FlashAttention-2's atomic one
    return {"triton (course)": course(),
            "triton (course, atomic dQ)": course(deterministic=False),
            "triton (course, autotuned)": course(autotune=True),
            "triton (course, autotuned, atomic dQ)": course(autotune=True, deterministic=False),
            "F.sdpa[flash]": pinned(SDPBackend.FLASH_ATTENTION),
            "F.sdpa[mem-efficient]": pinned(SDPBackend.EFFICIENT_ATTENTION),
            "F.sdpa[cuDNN]": pinned(SDPBackend.CUDNN_ATTENTION)}


def errors(fns: dict[str, Callable[..., torch.Tensor]], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           causal: bool) -> dict[str, float]:
    """Largest |difference| from float32 attention over the output and the three input gradients, per name."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dout = torch.randn_like(q)
    ref_in = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(*ref_in, is_causal=causal)
    ref.backward(dout.float())
    want = [ref.detach(), *(t.grad for t in ref_in)]
    out: dict[str, float] = {}
    for name, fn in list(fns.items()):
        inputs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        try:
            got = fn(*inputs)
            got.backward(dout)
        except RuntimeError as err:  # a backend this GPU, dtype or shape lacks: left out of the race, said why
            print(f"   {name} left out: {str(err).splitlines()[0][:120]}")
            del fns[name]
            continue
        out[name] = max((g.float() - w).abs().max().item()
                        for g, w in zip([got.detach(), *(t.grad for t in inputs)], want, strict=True))
    return out


def race(batch: int, heads: int, n: int, d: int, causal: bool, dtype: torch.dtype, reps: int) -> dict[str, object]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, d, generator=gen, device="cuda", dtype=dtype) for _ in range(3))
    fns = implementations(causal)
    err = errors(fns, q[:1], k[:1], v[:1], causal)
    for name in (n for n in err if n.startswith("triton")):
        if not err[name] <= 2 * err["F.sdpa[flash]"] + 1e-3:
            raise AssertionError(f"{name}: the kernel's error {err[name]:.3g} is more than twice "
                                 f"FlashAttention-2's ({err['F.sdpa[flash]']:.3g})")
    leaves = [t.requires_grad_(True) for t in (q, k, v)]
    dout = torch.randn_like(q)

    def forward(fn: Callable[..., torch.Tensor]) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return fn(*leaves)
        return run

    def both(fn: Callable[..., torch.Tensor]) -> Callable[[], object]:
        def run() -> None:
            for t in leaves:
                t.grad = None
            fn(*leaves).backward(dout)
        return run

    flops = attention_flops(batch * heads, n, n, d, causal=causal)
    fwd = time_interleaved({name: forward(fn) for name, fn in fns.items()}, reps=reps, warmup=3, device="cuda")
    fb = time_interleaved({name: both(fn) for name, fn in fns.items()}, reps=reps, warmup=3, device="cuda")
    rows = {}
    for name in fns:
        f_s, b_s = statistics.median(fwd[name]), statistics.median(fb[name])
        rows[name] = {"max_abs_err": err[name], "forward_ms": 1e3 * f_s, "forward_tflops": flops / f_s / 1e12,
                      "fwd_bwd_ms": 1e3 * b_s, "fwd_bwd_tflops": (1 + BACKWARD_FACTOR) * flops / b_s / 1e12}
    return rows


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    p.add_argument("--reps", type=int, default=10, help="timed repetitions of each implementation and pass")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON results")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_kernel.py races GPU kernels: no CUDA device here")
    name = device_name("cuda")
    peak = device_peak_tflops(name)
    print(f"== {name}, torch {torch.__version__}, {args.dtype}, {args.reps} interleaved reps; TFLOP/s "
          f"(forward 4·n²·d per head, halved when causal; forward+backward 3.5 times that)"
          + (f"; dense 16-bit peak {peak:.0f}" if peak else ""))
    results: dict[str, object] = {}
    for batch, heads, n, d, causal in SHAPES:
        key = f"batch {batch}, heads {heads}, n {n}, d {d}" + (", causal" if causal else "")
        rows = race(batch, heads, n, d, causal, DTYPES[args.dtype], args.reps)
        results[key] = rows
        print(f"-- {key}")
        for impl, r in rows.items():
            print(f"   {impl:22} fwd {r['forward_tflops']:6.1f}  fwd+bwd {r['fwd_bwd_tflops']:6.1f} TFLOP/s  "
                  f"max |err| {r['max_abs_err']:.1e}")
    settings = {"dtype": args.dtype, "reps": args.reps, "shapes": [list(s) for s in SHAPES],
                "backward_factor": BACKWARD_FACTOR, "reference": "float32 math backend, first batch element"}
    print(f"results written to {write_results(args.out, results, settings, device='cuda', code=[main])}")
    return results


if __name__ == "__main__":
    main()
