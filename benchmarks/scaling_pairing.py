"""Chapter 2, §2.7: what training does to q and k, over five seeds — the pairing control and the score's factors.

The chapter's live runs (seeds 0-2 at d_k = 256, AdamW at 3e-3 with clipping at 1, 300 steps) show the
independence ratio growing. Two measures say why, and this script stores them for seeds 0-4 of the scaled and the
unscaled head, so that the page asserts on stored runs and compares its live ones with them:

- ``pairing_ratios``: the ratio of a query with its target key, the other keys of its example, and another
  example's keys (which it has no reason to match: their ratio measures the lined-up subspaces alone);
- ``score_factors``: the means of ``scale · ‖q‖ ‖k‖`` and of ``|cos θ|`` over the probe's pairs.

Each at the start (the seed's initial head) and after 300 steps, on the 256 probe examples of the runs, with the
run's mean training loss (to match it with the live run). Results and provenance go to
``benchmarks/results/scaling_pairing.json``.

Usage:  python benchmarks/scaling_pairing.py          (about two minutes on one CPU core)
        python benchmarks/scaling_pairing.py --seeds 0-1 --out /tmp/env2/scaling_pairing.json
                                              (another numeric environment over fewer seeds: tools/add_machine.py)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attention_course.experiments.retrieval import (
    arm_settings,
    initial_retrieval_head,
    pairing_ratios,
    recall_test_set,
    score_factors,
    train_retrieval,
)
from attention_course.measure import write_results
from attention_course.seeded import seeded_parser

RESULTS = Path(__file__).resolve().parent / "results" / "scaling_pairing.json"
ARMS_HERE = ("scaled", "unscaled")
D_K, SEEDS, STEPS, LR, CLIP = 256, (0, 1, 2, 3, 4), 300, 3e-3, 1.0


def measure(arm: str, seeds: tuple[int, ...]) -> list[dict]:
    test = recall_test_set()
    probe = tuple(x[:256] for x in test[0])
    runs = train_retrieval(seeds=seeds, steps=STEPS, test=test, lr=LR, clip=CLIP, track=True,
                           **arm_settings(arm, D_K, "adamw"))
    out = []
    for r in runs:
        start = initial_retrieval_head(arm == "scaled", r.seed, d_k=D_K)
        out.append({"seed": r.seed, "mean_loss": float(np.mean(r.history.loss)),
                    "pairing_start": list(pairing_ratios(start, probe)),
                    "pairing_end": list(pairing_ratios(r.model, probe)),
                    "factors_start": list(score_factors(start, probe)),
                    "factors_end": list(score_factors(r.model, probe))})
    return out


def main(argv: list[str] | None = None) -> dict:
    args = seeded_parser(__doc__.splitlines()[0], out=RESULTS, seeds=f"{SEEDS[0]}-{SEEDS[-1]}").parse_args(argv)
    seeds = tuple(args.seeds)
    results = {arm: measure(arm, seeds) for arm in ARMS_HERE}
    for arm, rs in results.items():
        for r in rs:
            print(arm, r, flush=True)
    settings = {"d_k": D_K, "seeds": list(seeds), "steps": STEPS, "optimizer": "adamw", "lr": LR, "clip": CLIP,
                "threads": 1, "probe": "the first 256 of recall_test_set()",
                "pairing": ["target", "others", "other_example"], "factors": ["length", "cos"]}
    write_results(args.out, results, settings, code=[main])
    return results


if __name__ == "__main__":
    main()
