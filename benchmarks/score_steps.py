"""Chapter 2's score steps: how far each training step moves the recall head's scores, in every arm of the 2 × 2.

The 2 × 2 of §2.6 sorts the four heads (:data:`attention_course.experiments.retrieval.ARMS`) by their start and
by the size of their steps in score space. This script measures that size over whole runs: it trains each arm
(:func:`~attention_course.experiments.retrieval.arm_settings`) at d_k = 16, 64, 256 and 1024 for 300 steps,
seeds 0–4, as ``benchmarks/scaling_sweep.py`` does — AdamW at learning rate 3e-3 with gradient-norm clipping at 1,
and plain SGD at 0.3 without clipping — with ``track=True``, so every step records the mean |Δs| of the probe's
scores (``history.extra["score_step"]``: 256 fixed test examples, nine scores each).

Per run the file keeps that step size averaged over windows of steps spaced by powers of ten (1, 2–3, 4–10,
11–30, 31–100, 101–300; 240 curves of 300 steps would make the file needlessly large), the mean training loss
(the sweep's measure of speed, for the reader to match runs) and the seed. Results and provenance go to
``benchmarks/results/score_steps.json``; chapter 2 renders them and re-runs the AdamW arms at d_k = 256 live.

Usage:  python benchmarks/score_steps.py          (about 20 minutes on one CPU core)
        python benchmarks/score_steps.py --seeds 0-1 --out /tmp/env2/score_steps.json
                                          (another numeric environment over fewer seeds: tools/add_machine.py)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from attention_course.experiments.retrieval import recall_test_set, sweep_arms, sweep_settings
from attention_course.measure import write_results
from attention_course.seeded import seeded_parser

RESULTS = Path(__file__).resolve().parent / "results" / "score_steps.json"
D_KS = (16, 64, 256, 1024)
SEEDS = (0, 1, 2, 3, 4)
STEPS = 300
#: name -> (optimizer, lr, clip): the sweep's AdamW with clipping, and its SGD
OPTIMISERS = {"adamw": ("adamw", 3e-3, 1.0), "sgd": ("sgd", 0.3, None)}
#: the windows of steps (1-based, inclusive) the file averages the per-step |Δs| over
WINDOWS = ((1, 1), (2, 3), (4, 10), (11, 30), (31, 100), (101, 300))


def windowed(moves: list[float]) -> dict[str, float | None]:
    """The mean of ``moves[a − 1 : b]`` for each window ``(a, b)`` of :data:`WINDOWS`, keyed ``"a-b"``
    (None where a step's |Δs| is not finite: a diverged run)."""
    out: dict[str, float | None] = {}
    for a, b in WINDOWS:
        part = moves[a - 1:b]
        out[f"{a}-{b}"] = float(np.mean(part)) if all(math.isfinite(x) for x in part) else None
    return out


def summarise(run) -> dict[str, object]:
    """What the file keeps of one run (a ``SeedRun``): its seed, mean training loss and windowed score steps."""
    loss = run.history.loss
    finite = all(math.isfinite(x) for x in loss)
    return {"seed": run.seed, "mean_loss": float(np.mean(loss)) if finite else None,
            "score_step": windowed(run.history.extra["score_step"])}


def main() -> None:
    args = seeded_parser(__doc__.splitlines()[0], out=RESULTS, seeds=f"{SEEDS[0]}-{SEEDS[-1]}").parse_args()
    seeds = tuple(args.seeds)
    test = recall_test_set()
    results = sweep_arms(summarise, OPTIMISERS, D_KS, seeds, STEPS, test=test, track=True)
    settings = {
        **sweep_settings(OPTIMISERS, D_KS, seeds, STEPS),
        "windows": [f"{a}-{b}" for a, b in WINDOWS],
        "probe": "the first 256 of 1024 test examples, associative_recall seed 10000",
    }
    path = write_results(args.out, results, settings, code=[main])
    print("wrote", path)


if __name__ == "__main__":
    main()
