"""Chapter 5's reversal model opened up over five seeds, and its label smoothing over the ids that can be targets.

Two parts, each over seeds 0-4 of the chapter's recipe (``experiments.transformer.train_reversal``: seed s
initialises with ``torch.manual_seed(s)`` and draws batches from ``Generator().manual_seed(1 + s)``; seed 0 is the
chapter's own run, which the page re-trains live and compares with its stored entry):

- ``heads``      the chapter's recipe (label smoothing 0.1 over all 13 ids, as ``F.cross_entropy`` does). Per seed:
                 the last-50 training loss, exact match and unsmoothed cross-entropy on the 1000 held-out strings,
                 the anti-diagonal shares of every cross-attention head on the 500 probe strings (exactly on it
                 and within one position; ``anti_diagonal_shares``), and the ablation table (``ablation_study``:
                 every head zeroed and mean-ablated, the heads above 0.9 together, and as many others).
- ``smoothing``  the same recipe with label smoothing spread over the 11 ids that can be targets (EOS and the ten
                 digits), not PAD and BOS, which never are: the last-50 loss, exact match and the held-out
                 cross-entropy, to compare with ``heads`` seed by seed.

Usage:  python benchmarks/transformer_heads.py [--part heads|smoothing] [--workers 2] [--seeds 0-9]
        (writes benchmarks/results/transformer_heads.json and transformer_smoothing.json)

Another numeric environment's runs (``ATEN_CPU_CAPABILITY=default``, another CPU) are written with ``--out`` to a
file of their own and then added to the chapter's file with ``tools/add_machine.py`` (``machines.environments``
reads them back; chapter 5 judges its live run against every environment stored).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attention_course import data
from attention_course.experiments.transformer import (
    ablation_study,
    anti_diagonal_shares,
    held_out_loss,
    train_reversal,
)
from attention_course.measure import write_results
from attention_course.seeded import run_seeded, seeded_parser
from attention_course.train import exact_match

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = range(5)
TARGET_IDS = list(range(data.EOS_ID, 13))  # EOS and the ten digits: every id a target can be


def _held_out():
    return data.reverse_digits(1000, 1, 10, torch.Generator().manual_seed(2), split="test")


def _probe():
    return data.reverse_digits(500, 1, 10, torch.Generator().manual_seed(3), split="test")


def _scores(model, hist) -> dict:
    held = _held_out()
    return {"final_loss": float(np.mean(hist.loss[-50:])),
            "exact_match": float(exact_match(model, held.src, held.tgt, bos_id=data.BOS_ID, eos_id=data.EOS_ID)),
            "held_out_loss": held_out_loss(model, held.src, held.tgt)}


def run_heads(seed: int) -> dict:
    torch.set_num_threads(1)  # as the notebook: one thread, the same arithmetic on a machine like this one
    model, hist = train_reversal(seed)
    probe, held = _probe(), _held_out()
    ad = anti_diagonal_shares(model, probe.src, probe.tgt, probe.lengths)
    study = ablation_study(model, held.src, held.tgt, ad.exact)
    return {"seed": seed, **_scores(model, hist),
            "exact_share": ad.exact.tolist(), "near_share": ad.near.tolist(),
            "uniform_exact": ad.uniform_exact, "uniform_near": ad.uniform_near,
            "best": list(ad.best), "by_length": {str(m): list(v) for m, v in ad.by_length.items()},
            "ablation": {name: {k: list(v) for k, v in row.items()} for name, row in study.table.items()},
            "anti_diagonal": [list(k) for k in study.anti_diagonal], "control": [list(k) for k in study.control],
            "needed": list(study.needed)}


def run_smoothing(seed: int) -> dict:
    torch.set_num_threads(1)
    model, hist = train_reversal(seed, smooth_over=TARGET_IDS)
    return {"seed": seed, **_scores(model, hist)}


PARTS = {"heads": run_heads, "smoothing": run_smoothing}
FILES = {"heads": "transformer_heads.json", "smoothing": "transformer_smoothing.json"}


def main(argv: list[str] | None = None) -> list[dict]:
    p = seeded_parser(__doc__.splitlines()[0], out=None, seeds=f"{SEEDS[0]}-{SEEDS[-1]}", workers=2)
    p.add_argument("--part", choices=list(PARTS), default="heads")
    args = p.parse_args(argv)
    seeds = args.seeds
    runs = sorted(run_seeded(PARTS[args.part], seeds, args.workers), key=lambda r: r["seed"])
    for r in runs:
        print(args.part, {k: v for k, v in r.items() if not isinstance(v, (list, dict))}, flush=True)
    settings = {"part": args.part, "seeds": list(seeds), "threads": 1, "held_out": "1000 strings, seed 2",
                "probe": "500 strings, seed 3", "label_smoothing": 0.1,
                "smooth_over": "all 13 ids" if args.part == "heads" else TARGET_IDS,
                "workers": args.workers, "ablation_threshold": 0.9}
    write_results(args.out or RESULTS / FILES[args.part], {"runs": runs}, settings,
                  code=[run_heads if args.part == "heads" else run_smoothing])
    return runs


if __name__ == "__main__":
    main()
