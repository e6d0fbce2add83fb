"""Chapter 2's training sweep: the recall head with and without 1/√d_k, across widths, optimisers and seeds.

For each width ``d_k`` and each *arm* — ``scaled`` (the paper), ``unscaled``, ``control`` (unscaled, with W^Q
divided by √d_k at initialisation: the scaled head's function at step 0, whose score steps are the unscaled
head's) and ``slowed`` (unscaled, with the learning rate of W^Q and W^K divided by √d_k under AdamW and by d_k
under SGD: the unscaled head's saturated start, with score steps of the scaled head's size) — it trains
:func:`attention_course.experiments.retrieval.train_retrieval` for 5 seeds under three optimiser settings:
AdamW with the gradient-norm clipping at 1 that ``train.fit`` applies by default, AdamW without clipping, and
plain SGD without clipping. Every run records, on the same fixed test set: the steps until the 10-step mean
training loss leaves chance level (< 0.9 log 32) and reaches 0.5 (None: not within the budget), the mean training
loss over the run (the area under its loss curve, divided by the steps), the test accuracy and loss, the score
std and the independence ratio of the trained head on the probe batch. (The loss curves are not kept: the
chapter plots the live runs' curves at d_k = 256, and 240 stored curves made the file 400 KB.)

The results, with their provenance (date, command, machine, versions, commit) and the settings, go to
``benchmarks/results/scaling_sweep.json``; chapter 2 renders them and re-runs the AdamW entries at d_k = 256 live.

Usage:  python benchmarks/scaling_sweep.py          (about 7 minutes on one CPU core)
        python benchmarks/scaling_sweep.py --seeds 0-1 --out /tmp/env2/scaling_sweep.json
                                            (another numeric environment over fewer seeds: tools/add_machine.py)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from attention_course.experiments.retrieval import (
    independence_ratio,
    logit_std,
    recall_test_set,
    steps_to,
    sweep_arms,
    sweep_settings,
)
from attention_course.measure import write_results
from attention_course.seeded import seeded_parser

RESULTS = Path(__file__).resolve().parent / "results" / "scaling_sweep.json"
D_KS = (16, 64, 256, 1024)
SEEDS = (0, 1, 2, 3, 4)
STEPS = 300
#: name -> (optimizer, lr, clip)
OPTIMISERS = {"adamw": ("adamw", 3e-3, 1.0), "adamw_noclip": ("adamw", 3e-3, None), "sgd": ("sgd", 0.3, None)}
CHANCE = math.log(32)


def summarise(run, probe) -> dict[str, object]:
    """What the results file keeps of one run (a ``SeedRun``)."""
    loss = run.history.loss
    finite = all(math.isfinite(x) for x in loss)
    return {
        "seed": run.seed,
        "steps_to_leave_chance": steps_to(loss, 0.9 * CHANCE),
        "steps_to_loss_0.5": steps_to(loss, 0.5),
        "mean_loss": float(np.mean(loss)) if finite else None,
        "accuracy": run.accuracy,
        "test_loss": run.test_loss if math.isfinite(run.test_loss) else None,
        "logit_std": logit_std(run.model, probe),
        "independence_ratio": independence_ratio(run.model, probe),
    }


def main() -> None:
    args = seeded_parser(__doc__.splitlines()[0], out=RESULTS, seeds=f"{SEEDS[0]}-{SEEDS[-1]}").parse_args()
    seeds = tuple(args.seeds)
    test = recall_test_set()
    probe = tuple(x[:256] for x in test[0])
    results = sweep_arms(lambda run: summarise(run, probe), OPTIMISERS, D_KS, seeds, STEPS, test=test)
    settings = {
        **sweep_settings(OPTIMISERS, D_KS, seeds, STEPS),
        "test": "1024 examples, associative_recall seed 10000; probe: its first 256",
    }
    path = write_results(args.out, results, settings, code=[main])
    print("wrote", path)


if __name__ == "__main__":
    main()
