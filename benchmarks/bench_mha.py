"""Time forward + backward of the package's MultiHeadAttention against torch.nn.MultiheadAttention (chapter 4).

Both modules hold identical weights (``MultiHeadAttention.from_torch``), run self-attention in training mode with
``need_weights=False`` (PyTorch's fast setting; the package then uses its fused path), and are timed
*interleaved* in one process — A, B, B, A, A, B, … — so that a change in the machine's load hits both alike.
The script checks that the outputs agree, then prints the median over repetitions of
time(package) / time(PyTorch): below 1 means the package is faster. It also counts, with ``torch.profiler``, the data
copies each module makes in one step (both run the same matrix products and the same attention kernel).

Usage:  python benchmarks/bench_mha.py                  (batch 8, n 256, d_model 256, h 8, float32, CPU)
        python benchmarks/bench_mha.py --reps 50 --threads 2 --seq-first
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from torch import nn

from attention_course.multihead import MultiHeadAttention


def step_time(module: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> float:
    """Seconds for one forward + backward pass of self-attention on ``x``."""
    start = time.perf_counter()
    out, _ = module(x, x, x, need_weights=False)
    out.backward(grad)
    return time.perf_counter() - start


def copy_ops(module: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> int:
    """Data copies (``aten::copy_`` and ``aten::clone`` calls, counted by ``torch.profiler``) in one forward +
    backward pass: the data movement in which the two modules differ."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step_time(module, x, grad)
    return sum(e.name in ("aten::copy_", "aten::clone") for e in prof.events())


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--n", type=int, default=256, help="sequence length")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--reps", type=int, default=30, help="timed repetitions of each module")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: PyTorch's choice)")
    p.add_argument("--seq-first", action="store_true", help="use (n, batch, d) inputs instead of batch_first")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch_first = not args.seq_first
    ref = nn.MultiheadAttention(args.d_model, args.heads, batch_first=batch_first).train()
    ours = MultiHeadAttention.from_torch(ref).train()
    shape = (args.batch, args.n, args.d_model) if batch_first else (args.n, args.batch, args.d_model)
    x_ref = torch.randn(shape, requires_grad=True)
    x_ours = x_ref.detach().clone().requires_grad_(True)
    grad = torch.randn(shape)

    # Same weights, same inputs: same outputs and input gradients (float32 tolerance).
    a, _ = ref(x_ref, x_ref, x_ref, need_weights=False)
    b, _ = ours(x_ours, x_ours, x_ours, need_weights=False)
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    a.backward(grad)
    b.backward(grad)
    torch.testing.assert_close(x_ours.grad, x_ref.grad, atol=1e-5, rtol=1e-4)

    for _ in range(args.warmup):
        step_time(ref, x_ref, grad)
        step_time(ours, x_ours, grad)
    t_ref, t_ours, ratios = [], [], []
    for rep in range(args.reps):
        pair = [(ref, x_ref), (ours, x_ours)] if rep % 2 == 0 else [(ours, x_ours), (ref, x_ref)]
        times = {}
        for module, x in pair:
            module.zero_grad(set_to_none=True)
            x.grad = None
            times[module is ours] = step_time(module, x, grad)
        t_ours.append(times[True])
        t_ref.append(times[False])
        ratios.append(times[True] / times[False])

    ratio = statistics.median(ratios)
    copies = {name: copy_ops(module, x, grad) for name, module, x in (("ref", ref, x_ref), ("ours", ours, x_ours))}
    print(f"machine: {platform.machine()} {platform.processor() or ''}".rstrip()
          + f", torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"shape: batch {args.batch}, n {args.n}, d_model {args.d_model}, heads {args.heads}, float32, "
          f"{'batch_first' if batch_first else 'sequence-first'}, forward+backward, {args.reps} interleaved reps")
    print(f"nn.MultiheadAttention : median {1e3 * statistics.median(t_ref):7.2f} ms")
    print(f"MultiHeadAttention    : median {1e3 * statistics.median(t_ours):7.2f} ms")
    print(f"data copies per step (aten::copy_ + aten::clone): nn.MultiheadAttention {copies['ref']}, "
          f"MultiHeadAttention {copies['ours']}")
    print(f"median ratio (package / PyTorch): {ratio:.3f}  (target <= 0.95)")
    return ratio


if __name__ == "__main__":
    main()
