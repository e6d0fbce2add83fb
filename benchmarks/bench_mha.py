"""Time forward + backward of the package's MultiHeadAttention against torch.nn.MultiheadAttention (chapter 4).

Both modules hold identical weights (``interop.from_torch``) and run self-attention in training mode,
in both settings of ``need_weights``: ``False`` (PyTorch's fused path; the package then calls
``F.scaled_dot_product_attention``) and ``True`` (PyTorch's default, which also returns the head-averaged
weights). The script first checks that outputs, weights and input gradients agree; then it times the four calls
*interleaved* in one process (``attention_course.measure.time_interleaved``: every repetition runs all four, in
a rotating order, so a change in the machine's load hits them alike) and reports, for each setting, the median
over repetitions of time(package) / time(PyTorch): below 1 means the package is faster. It also counts, with
``torch.profiler``, the data copies each module makes in one step.

The results, with their provenance (date, command, machine, threads, versions, commit), are written as JSON to
``benchmarks/results/bench_mha.json`` (``--out`` to write elsewhere).

Usage:  python benchmarks/bench_mha.py                  (batch 8, n 256, d_model 256, h 8, float32, CPU)
        python benchmarks/bench_mha.py --reps 50 --threads 2 --seq-first
        python benchmarks/bench_mha.py --device cuda --batch 16 --n 1024 --d-model 1024 --heads 16 \
            --out benchmarks/results/bench_mha_cuda.json
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from attention_course.interop import from_torch
from attention_course.measure import count_copies, cpu_threads, time_interleaved, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "bench_mha.json"
SETTINGS = (False, True)  # need_weights


def step_fn(module: nn.Module, x: torch.Tensor, grad: torch.Tensor, need_weights: bool) -> Callable[[], None]:
    """One forward + backward pass of self-attention on ``x``, gradients cleared first."""

    def step() -> None:
        module.zero_grad(set_to_none=True)
        x.grad = None
        out, _ = module(x, x, x, need_weights=need_weights)
        out.backward(grad)

    return step


def check_same(ref: nn.Module, ours: nn.Module, x_ref: torch.Tensor, x_ours: torch.Tensor, grad: torch.Tensor,
               need_weights: bool) -> None:
    """Same weights, same inputs: same outputs, weights and input gradients (float32 tolerance)."""
    x_ref.grad = x_ours.grad = None
    a, wa = ref(x_ref, x_ref, x_ref, need_weights=need_weights)
    b, wb = ours(x_ours, x_ours, x_ours, need_weights=need_weights)
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    if need_weights:
        torch.testing.assert_close(wb, wa, atol=1e-6, rtol=1e-4)
    else:
        assert wa is None and wb is None
    a.backward(grad)
    b.backward(grad)
    torch.testing.assert_close(x_ours.grad, x_ref.grad, atol=1e-5, rtol=1e-4)


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--n", type=int, default=256, help="sequence length")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--reps", type=int, default=30, help="timed repetitions of each module and setting")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads (default: PyTorch's choice)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seq-first", action="store_true", help="use (n, batch, d) inputs instead of batch_first")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON results")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    batch_first = not args.seq_first
    ref = nn.MultiheadAttention(args.d_model, args.heads, batch_first=batch_first).train()
    ours = from_torch(ref).train()
    ref, ours = ref.to(args.device), ours.to(args.device)
    shape = (args.batch, args.n, args.d_model) if batch_first else (args.n, args.batch, args.d_model)
    x_ref = torch.randn(shape).to(args.device).requires_grad_(True)
    x_ours = x_ref.detach().clone().requires_grad_(True)
    grad = torch.randn(shape).to(args.device)

    steps: dict[str, Callable[[], None]] = {}
    for nw in SETTINGS:
        check_same(ref, ours, x_ref, x_ours, grad, nw)
        steps[f"torch need_weights={nw}"] = step_fn(ref, x_ref, grad, nw)
        steps[f"package need_weights={nw}"] = step_fn(ours, x_ours, grad, nw)
    with cpu_threads(args.threads):
        threads = torch.get_num_threads()
        times = time_interleaved(steps, reps=args.reps, warmup=args.warmup,
                                 device=args.device if args.device == "cuda" else None)
        copies = {name: count_copies(step) for name, step in steps.items()}

    print(f"shape: batch {args.batch}, n {args.n}, d_model {args.d_model}, heads {args.heads}, float32, "
          f"{'batch_first' if batch_first else 'sequence-first'}, forward+backward, {threads} thread(s), "
          f"{args.reps} interleaved reps")
    results: dict[str, dict[str, object]] = {}
    ratios_out: dict[str, float] = {}
    for nw in SETTINGS:
        t_ref, t_ours = times[f"torch need_weights={nw}"], times[f"package need_weights={nw}"]
        ratios = [a / b for a, b in zip(t_ours, t_ref, strict=True)]  # same repetition, moments apart
        ratio = statistics.median(ratios)
        key = f"need_weights={nw}"
        ratios_out[key] = ratio
        results[key] = {
            "median_ratio_package_over_torch": ratio,
            "torch_median_ms": 1e3 * statistics.median(t_ref),
            "package_median_ms": 1e3 * statistics.median(t_ours),
            "copies_torch": copies[f"torch need_weights={nw}"],
            "copies_package": copies[f"package need_weights={nw}"],
            "ratios": ratios,
        }
        print(f"{key}:  nn.MultiheadAttention {1e3 * statistics.median(t_ref):7.2f} ms, "
              f"MultiHeadAttention {1e3 * statistics.median(t_ours):7.2f} ms; "
              f"data copies per step {results[key]['copies_torch']} vs {results[key]['copies_package']}; "
              f"median ratio (package / PyTorch) {ratio:.3f}  (target <= 0.95)")
    settings = {**{k: v for k, v in vars(args).items() if k != "out"}, "threads_used": threads,
                "dtype": "float32", "pass": "forward+backward, training mode, self-attention"}
    print(f"results written to {write_results(args.out, results, settings, device=args.device, code=[main])}")
    return ratios_out


if __name__ == "__main__":
    main()
