"""Chapter 7's training runs on the King James Bible, over seeds, with the counting baselines and the head scores.

For each seed, ``attention_course.experiments.gpt.train_gpt`` trains the chapter's CPU configuration
(``CPU_CONFIG``: 2 pre-LN layers, d_model 64, 4 heads, rotary positions, 600 steps of 32 windows of 64 characters,
one CPU thread, so the numbers are the same on every machine) and scores it on 1024 windows spread over the
validation split. The unigram and bigram baselines are scored on the same windows. Each trained model's heads are
measured (previous-token and first-token scores on 64 validation windows) beside their shuffled control.

Writes ``benchmarks/results/gpt_corpus.json`` with its provenance (``--out`` to write elsewhere). The chapter
renders it and re-runs one seed live, asserting that it reproduces the stored entry.

Usage:  python benchmarks/gpt_corpus.py                  (seeds 0-4, about 30-60 s each)
        python benchmarks/gpt_corpus.py --seeds 0-1 --steps 50 --out /tmp/gpt_corpus.json    (a quick check)
        python benchmarks/gpt_corpus.py --seeds 0-1 --out /tmp/env2/gpt_corpus.json
                                       (another numeric environment over fewer seeds: tools/add_machine.py)
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from attention_course.data import load_corpus
from attention_course.experiments.gpt import (
    CPU_CONFIG,
    head_scores,
    ngram_bits_per_char,
    shuffled_scores,
    train_gpt,
    validation_windows,
)
from attention_course.measure import write_results
from attention_course.seeded import mean_and_std, seeded_parser

RESULTS = Path(__file__).resolve().parent / "results" / "gpt_corpus.json"
CORPUS = Path(__file__).resolve().parents[1] / "data" / "kjv.txt"  # load_corpus()'s default, fingerprinted by its bytes
EVAL_WINDOWS = 1024  # 65,600 validation characters, spread over the whole split
HEAD_WINDOWS = 64


def main(argv: list[str] | None = None) -> dict:
    args = seeded_parser(__doc__.splitlines()[0], out=RESULTS, steps=CPU_CONFIG["steps"]).parse_args(argv)
    seeds = list(args.seeds)
    corpus = load_corpus()
    config = {**CPU_CONFIG, "steps": args.steps}
    windows = validation_windows(corpus.validation, config["length"], EVAL_WINDOWS)
    baselines = {f"{name}_bpc": ngram_bits_per_char(corpus.train, windows, corpus.vocab_size, order)
                 for name, order in (("unigram", 1), ("bigram", 2))}
    head_tokens = validation_windows(corpus.validation, config["length"] - 1, HEAD_WINDOWS)
    runs = []
    for seed in seeds:
        start = time.perf_counter()
        run = train_gpt(corpus, seed, **config, eval_windows=EVAL_WINDOWS)
        seconds = time.perf_counter() - start
        scores = head_scores(run.model, head_tokens)
        control = shuffled_scores(run.model, head_tokens, torch.Generator().manual_seed(seed))
        runs.append({
            "seed": seed,
            "validation_bpc": run.validation_bpc,
            "final_train_loss_nats": run.history.loss[-1],
            "loss_every_10_steps": run.history.loss[::10],
            "seconds": seconds,
            "previous_token": scores.previous.tolist(),
            "first_token": scores.first.tolist(),
            "previous_token_shuffled": control.previous.tolist(),
            "first_token_shuffled": control.first.tolist(),
        })
        print(f"seed {seed}: validation {run.validation_bpc:.4f} bits/char ({seconds:.0f} s); best previous-token "
              f"head {scores.previous.max():.3f} (shuffled {control.previous.max():.3f}); best first-token head "
              f"{scores.first.max():.3f} (shuffled {control.first.max():.3f})")
    bpcs = [r["validation_bpc"] for r in runs]
    mean, std = mean_and_std(bpcs)
    summary = {"mean_bpc": mean, "std_bpc": std}
    print(f"baselines: unigram {baselines['unigram_bpc']:.4f}, bigram {baselines['bigram_bpc']:.4f} bits/char; "
          f"GPT {summary['mean_bpc']:.4f} ± {summary['std_bpc']:.4f} over {len(bpcs)} seeds")
    results = {**baselines, **summary, "runs": runs}
    settings = {"config": config, "seeds": seeds, "eval_windows": EVAL_WINDOWS, "head_windows": HEAD_WINDOWS,
                "threads": 1, "corpus": "data/kjv.txt", "vocab_size": corpus.vocab_size}
    print(f"results written to {write_results(args.out, results, settings, code=[main, CORPUS])}")
    return results


if __name__ == "__main__":
    main()
