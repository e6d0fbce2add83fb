"""Train the package's Transformer and torch.nn.Transformer side by side and compare their speed (chapter 5).

Both models have the same configuration and identical initial weights (``interop.from_torch``), get the same
batches (random source and target embeddings, padding masks on both sides, the causal mask on the target) and
the same optimiser (Adam), and take training steps *interleaved* in one process — A, B, B, A, A, B, … — so that
a change in the machine's load hits both alike (``attention_course.measure.time_interleaved``). Before timing,
the script checks that both models give the same output. It prints each model's median throughput in tokens per
second (source + target tokens) and the median over steps of speed(package) / speed(PyTorch): above 1 means the
package is faster. The results, with their provenance (date, command, machine, threads, versions, commit), are
written as JSON to ``benchmarks/results/bench_transformer.json`` (``--out`` to write elsewhere).

The package's model runs attention through PyTorch's fused ``F.scaled_dot_product_attention``
(``need_weights=False``), its masks in the package convention (True = may attend).

Usage:  python benchmarks/bench_transformer.py                 (d_model 128, 4 heads, 2+2 layers, batch 32, n 32)
        python benchmarks/bench_transformer.py --steps 60 --threads 2 --norm-first
        python benchmarks/bench_transformer.py --device cuda --autocast bfloat16 --d-model 512 --heads 8 --layers 6 \
            --ff 2048 --batch 64 --n 128 --out benchmarks/results/bench_transformer_cuda.json
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.interop import from_torch
from attention_course.measure import cpu_threads, time_interleaved, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "bench_transformer.json"


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2, help="encoder layers = decoder layers")
    p.add_argument("--ff", type=int, default=512, help="dim_feedforward")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--n", type=int, default=32, help="source and target length")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=40, help="timed training steps of each model")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads (default: PyTorch's choice)")
    p.add_argument("--norm-first", action="store_true", help="pre-LN layers")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--autocast", default=None, choices=["bfloat16", "float16"],
                   help="time both models under torch.autocast in this dtype (they are checked in float32)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON results")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")  # nested-tensor / mask-type notices
    torch.manual_seed(0)
    cfg = dict(d_model=args.d_model, nhead=args.heads, num_encoder_layers=args.layers,
               num_decoder_layers=args.layers, dim_feedforward=args.ff, dropout=args.dropout, batch_first=True,
               norm_first=args.norm_first)
    ref = nn.Transformer(**cfg)
    ours = from_torch(ref)
    ref, ours = ref.to(args.device), ours.to(args.device)
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-4)
    opt_ours = torch.optim.Adam(ours.parameters(), lr=1e-4)

    gen = torch.Generator().manual_seed(1)
    b, n, d = args.batch, args.n, args.d_model
    src, tgt, target = (torch.randn(b, n, d, generator=gen).to(args.device) for _ in range(3))
    lengths = torch.randint(n // 2, n + 1, (b,), generator=gen)
    lengths[0] = n
    key_mask = (torch.arange(n)[None, :] < lengths[:, None]).to(args.device)  # package convention: True = real
    causal = nn.Transformer.generate_square_subsequent_mask(n, device=args.device)  # PyTorch's: -inf above
    weight = key_mask[..., None].float()  # the loss ignores padded target positions
    amp = torch.autocast(args.device, dtype=getattr(torch, args.autocast or "bfloat16"),
                         enabled=args.autocast is not None)

    def step_ref() -> torch.Tensor:
        with amp:
            out = ref(src, tgt, tgt_mask=causal, tgt_is_causal=True, src_key_padding_mask=~key_mask,
                      tgt_key_padding_mask=~key_mask, memory_key_padding_mask=~key_mask)
            loss = F.mse_loss(out.float() * weight, target * weight)
        opt_ref.zero_grad(set_to_none=True)
        loss.backward()
        opt_ref.step()
        return loss

    def step_ours() -> torch.Tensor:
        with amp:
            out = ours(src, tgt, tgt_is_causal=True, src_key_mask=key_mask, tgt_key_mask=key_mask,
                       memory_key_mask=key_mask)
            loss = F.mse_loss(out.float() * weight, target * weight)
        opt_ours.zero_grad(set_to_none=True)
        loss.backward()
        opt_ours.step()
        return loss

    # Same weights, same batch: the same loss (evaluation mode, no dropout), before any step.
    ref.eval()
    ours.eval()
    with torch.no_grad():
        a = ref(src, tgt, tgt_mask=causal, src_key_padding_mask=~key_mask, tgt_key_padding_mask=~key_mask,
                memory_key_padding_mask=~key_mask)
        c = ours(src, tgt, tgt_is_causal=True, src_key_mask=key_mask, tgt_key_mask=key_mask,
                 memory_key_mask=key_mask)
    # a GPU's attention kernels round otherwise than its CPU's: a looser float32 tolerance there
    tol = 1e-5 if args.device == "cpu" else 1e-4
    torch.testing.assert_close(c[key_mask], a[key_mask], atol=tol, rtol=1e-4)
    ref.train()
    ours.train()

    tokens = 2 * b * n
    dtype = f"float32 weights, {args.autocast} autocast" if args.autocast else "float32"
    with cpu_threads(args.threads):
        threads = torch.get_num_threads()
        times = time_interleaved({"nn.Transformer": step_ref, "Transformer": step_ours}, reps=args.steps,
                                 warmup=args.warmup, device=args.device if args.device == "cuda" else None)
    t_ref, t_ours = times["nn.Transformer"], times["Transformer"]
    ratios = [a / c for a, c in zip(t_ref, t_ours, strict=True)]  # = speed(ours) / speed(ref), per step pair
    ratio = statistics.median(ratios)
    print(f"config: d_model {d}, heads {args.heads}, {args.layers}+{args.layers} layers, d_ff {args.ff}, "
          f"dropout {args.dropout}, {'pre' if args.norm_first else 'post'}-LN, batch {b}, n_src = n_tgt = {n}, "
          f"{dtype}, padding + causal masks, Adam, {args.steps} interleaved training steps each, "
          f"{threads} thread(s)")
    print(f"nn.Transformer : median {tokens / statistics.median(t_ref):9.0f} tokens/s")
    print(f"Transformer    : median {tokens / statistics.median(t_ours):9.0f} tokens/s")
    print(f"median ratio (package speed / PyTorch speed): {ratio:.3f}  (target >= 1.0)")
    results = {
        "median_ratio_package_speed_over_torch": ratio,
        "torch_median_tokens_per_s": tokens / statistics.median(t_ref),
        "package_median_tokens_per_s": tokens / statistics.median(t_ours),
        "ratios": ratios,
    }
    settings = {**{k: v for k, v in vars(args).items() if k != "out"}, "threads_used": threads,
                "dtype": dtype, "tokens_per_step": tokens}
    print(f"results written to {write_results(args.out, results, settings, device=args.device, code=[main])}")
    return ratio


if __name__ == "__main__":
    main()
