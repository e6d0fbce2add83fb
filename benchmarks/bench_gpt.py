"""The package's GPT against transformers' GPT2LMHeadModel, side by side: training and cached generation (chapter 7).

Both models have one configuration and identical weights (transformers' model is built from a random
``GPT2Config``, offline, and the package's is loaded from its state dict with
``attention_course.interop.from_gpt2_state_dict``); before timing, the script checks that they give the same logits
and the same greedy tokens. Then, in one process and interleaved (``attention_course.measure.time_interleaved``:
A, B, B, A, … so that a change in the machine's load hits both alike):

* **training**: one AdamW step on a batch of random token windows (cross-entropy of next-token logits), tokens per
  second = batch × length / step time;
* **generation**: greedy decoding of ``--new`` tokens after a prompt with each library's key/value cache
  (``attention_course.gpt.generate`` vs ``GPT2LMHeadModel.generate(use_cache=True, do_sample=False)``), tokens per
  second = batch × new tokens / call time.

It prints the medians and the median over repetitions of speed(package) / speed(transformers) for each (above 1:
the package is faster) and writes them, with their provenance, to ``benchmarks/results/bench_gpt.json``
(``--out`` to write elsewhere). Transformers runs its attention with PyTorch's fused kernel (``sdpa``).

Usage:  python benchmarks/bench_gpt.py --threads 2                 (d_model 128, 4 heads, 4 layers, vocab 512)
        python benchmarks/bench_gpt.py --threads 2 --steps 10 --reps 3 --out /tmp/bench_gpt.json   (a quick run)
        python benchmarks/bench_gpt.py --device cuda --autocast bfloat16 --d-model 768 --heads 12 --layers 12 \
            --vocab 50257 --batch 8 --length 1024 --out benchmarks/results/bench_gpt_cuda.json   (GPT-2 small)
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from attention_course.gpt import generate
from attention_course.interop import from_gpt2_state_dict, gpt2_config
from attention_course.measure import cpu_threads, time_interleaved, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "bench_gpt.json"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=16, help="training batch")
    p.add_argument("--length", type=int, default=128, help="training window length")
    p.add_argument("--steps", type=int, default=30, help="timed training steps of each model")
    p.add_argument("--gen-batch", type=int, default=4, help="sequences generated at once")
    p.add_argument("--prompt", type=int, default=16, help="prompt length")
    p.add_argument("--new", type=int, default=64, help="tokens generated after the prompt")
    p.add_argument("--reps", type=int, default=10, help="timed generate calls of each model")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads (default: PyTorch's choice)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--autocast", default=None, choices=["bfloat16", "float16"],
                   help="time both models under torch.autocast in this dtype (they are checked in float32)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON results")
    args = p.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"  # never the network: the model is built from a config
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    n_positions = max(args.length, args.prompt + args.new)
    config = transformers.GPT2Config(n_layer=args.layers, n_head=args.heads, n_embd=args.d_model,
                                     vocab_size=args.vocab, n_positions=n_positions, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    config._attn_implementation = "sdpa"  # PyTorch's fused attention, as the package uses
    theirs = transformers.GPT2LMHeadModel(config)
    ours = from_gpt2_state_dict(theirs.state_dict(), gpt2_config(config))
    theirs, ours = theirs.to(args.device), ours.to(args.device)

    gen = torch.Generator().manual_seed(1)
    windows = torch.randint(0, args.vocab, (args.batch, args.length + 1), generator=gen).to(args.device)
    x, y = windows[:, :-1], windows[:, 1:]
    prompt = torch.randint(0, args.vocab, (args.gen_batch, args.prompt), generator=gen).to(args.device)
    mask = torch.ones_like(prompt)
    amp = torch.autocast(args.device, dtype=getattr(torch, args.autocast or "bfloat16"),
                         enabled=args.autocast is not None)

    theirs.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x).logits, rtol=0, atol=1e-4)
        want = theirs.generate(prompt, attention_mask=mask, max_new_tokens=args.new, do_sample=False, use_cache=True)
    assert torch.equal(generate(ours, prompt, args.new, temperature=0.0), want), "greedy tokens differ"

    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=1e-4)
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-4)

    def train_theirs() -> None:
        with amp:
            loss = F.cross_entropy(theirs(x).logits.flatten(0, 1).float(), y.flatten())
        opt_theirs.zero_grad(set_to_none=True)
        loss.backward()
        opt_theirs.step()

    def train_ours() -> None:
        with amp:
            loss = F.cross_entropy(ours(x).flatten(0, 1).float(), y.flatten())
        opt_ours.zero_grad(set_to_none=True)
        loss.backward()
        opt_ours.step()

    def generate_theirs() -> None:
        with torch.no_grad(), amp:
            theirs.generate(prompt, attention_mask=mask, max_new_tokens=args.new, do_sample=False, use_cache=True)

    def generate_ours() -> None:
        with amp:
            generate(ours, prompt, args.new, temperature=0.0)

    sync = args.device if args.device == "cuda" else None
    with cpu_threads(args.threads):
        threads = torch.get_num_threads()
        theirs.train()
        ours.train()
        train = time_interleaved({"transformers": train_theirs, "package": train_ours}, reps=args.steps,
                                 warmup=args.warmup, device=sync)
        theirs.eval()
        ours.eval()
        decode = time_interleaved({"transformers": generate_theirs, "package": generate_ours}, reps=args.reps,
                                  warmup=args.warmup, device=sync)

    results = {}
    for name, times, tokens in (("training", train, args.batch * args.length),
                                ("generation", decode, args.gen_batch * args.new)):
        ratios = [t / o for t, o in zip(times["transformers"], times["package"], strict=True)]
        results[name] = {
            "median_ratio_package_speed_over_transformers": statistics.median(ratios),
            "transformers_median_tokens_per_s": tokens / statistics.median(times["transformers"]),
            "package_median_tokens_per_s": tokens / statistics.median(times["package"]),
            "ratios": ratios,
        }
        print(f"{name:10s}: transformers {results[name]['transformers_median_tokens_per_s']:9.0f} tokens/s, "
              f"package {results[name]['package_median_tokens_per_s']:9.0f} tokens/s, median ratio "
              f"{results[name]['median_ratio_package_speed_over_transformers']:.3f} (target >= 1.0)")
    settings = {**{k: v for k, v in vars(args).items() if k != "out"}, "threads_used": threads,
                "dtype": args.autocast and f"float32 weights, {args.autocast} autocast" or "float32",
                "transformers": transformers.__version__, "attn_implementation": "sdpa", "dropout": 0.0}
    print(f"config: d_model {args.d_model}, {args.heads} heads, {args.layers} layers, vocab {args.vocab}, "
          f"{threads} thread(s)")
    print(f"results written to {write_results(args.out, results, settings, device=args.device, code=[main])}")
    return results


if __name__ == "__main__":
    main()
