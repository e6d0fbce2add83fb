"""Chapter 5's reversal model trained without gradient clipping, without warm-up, and without both (chapter 5, §5.7).

The chapter trains with the paper's recipe plus gradient-norm clipping at 1.0 (``train.fit_seq2seq``'s default),
a departure from the paper. This script trains the chapter's CPU configuration (the same model, seed, batches and
steps as the notebook's cell) four ways — as in the chapter; ``clip=None``; ``warmup=1`` (no warm-up: the
learning rate starts at its peak); both — and records for each the mean training loss over the last 50 steps, the
largest loss after step 50, and exact match on the chapter's 1000 held-out strings. The first arm is the
notebook's own run: the chapter asserts that its live run reproduces it, so a stale file fails nbval.

One seed per arm (the chapter's): an observation about this run, not an estimate of a rate.

Usage:  python benchmarks/transformer_recipe.py        (writes benchmarks/results/transformer_recipe.json)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from attention_course import data
from attention_course.measure import write_results
from attention_course.seq2seq import Seq2SeqTransformer
from attention_course.train import exact_match, fit_seq2seq

RESULTS = Path(__file__).resolve().parent / "results" / "transformer_recipe.json"
CFG = dict(d_model=64, nhead=4, layers=2, d_ff=128, batch=64, steps=2500, warmup=300, factor=0.5)
ARMS = {"as in the chapter": dict(clip=1.0, warmup=CFG["warmup"]),
        "no clipping": dict(clip=None, warmup=CFG["warmup"]),
        "no warm-up": dict(clip=1.0, warmup=1),
        "no warm-up, no clipping": dict(clip=None, warmup=1)}


def train_arm(clip: float | None, warmup: int) -> dict[str, float]:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(13, d_model=CFG["d_model"], nhead=CFG["nhead"],
                               num_encoder_layers=CFG["layers"], num_decoder_layers=CFG["layers"],
                               dim_feedforward=CFG["d_ff"], dropout=0.0, max_len=32)
    train_gen = torch.Generator().manual_seed(1)

    def sample_batch(step):
        batch = data.reverse_digits(CFG["batch"], 1, 10, train_gen)
        return batch.src, batch.tgt

    hist = fit_seq2seq(model, sample_batch, CFG["steps"], warmup=warmup, factor=CFG["factor"],
                       label_smoothing=0.1, clip=clip)
    held_out = data.reverse_digits(1000, 1, 10, torch.Generator().manual_seed(2), split="test")
    em = exact_match(model, held_out.src, held_out.tgt, bos_id=data.BOS_ID, eos_id=data.EOS_ID)
    loss = np.array(hist.loss)
    finite = bool(np.isfinite(loss).all())
    return {"final_loss": float(loss[-50:].mean()) if finite else None,
            "max_loss_after_50": float(loss[50:].max()) if finite else None,
            "exact_match": float(em), "finite": finite}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # as the notebook: the same arithmetic on every CPU
    results = {}
    for name, arm in ARMS.items():
        results[name] = {**arm, **train_arm(**arm)}
        print(name, results[name], flush=True)
    write_results(args.out, {"arms": results}, {**CFG, "seed": 0, "threads": 1, "held_out": 1000})
    return results


if __name__ == "__main__":
    main()
