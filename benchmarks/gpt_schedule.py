"""Chapter 7's schedule: does the warm-up-then-cosine learning rate of GPT training matter at the chapter's budget?

The chapter's character model (``CPU_CONFIG``: 2 layers, d_model 64, 4 heads, rotary positions, 600 steps of 32
windows of 64 characters, AdamW at a peak rate of 3e-3, one CPU thread) trained ten ways, one change at a time, through
``attention_course.experiments.gpt.train_gpt``:

* ``constant``: the chapter's run, 3e-3 throughout;
* ``warmup``: a linear warm-up over the first 60 steps (a tenth of the run), then constant;
* ``cosine``: no warm-up, half a cosine from 3e-3 down to 3e-4 at the last step;
* ``warmup_cosine``: both (``attention_course.objectives.warmup_cosine``), the schedule of GPT-3 and nanoGPT;
* ``constant`` and ``warmup_cosine`` again at twice and four times the peak rate (``_x2``, ``_x4``): a decaying
  schedule is usually run at a higher peak than a constant one, and a warm-up is what lets a high peak train;
  at four times, ``warmup`` and ``cosine`` alone too, to tell which part lets the higher peak train.

A seed fixes the initial weights and the batches, so the arms are paired by seed. Each run is scored on the
chapter's 1024 validation windows of 64 characters (bits per character).

Writes ``benchmarks/results/gpt_schedule.json`` with its provenance (``--out`` to write elsewhere); ``--workers``
runs at a time, one thread each, each in its own process.

Usage:  python benchmarks/gpt_schedule.py                    (5 seeds x 10 arms, about 40 s a run)
        python benchmarks/gpt_schedule.py --seeds 0 --steps 20 --out /tmp/gpt_schedule.json    (a quick check)
        python benchmarks/gpt_schedule.py --seeds 0-1 --out /tmp/env2/gpt_schedule.json
                                       (another numeric environment over fewer seeds: tools/add_machine.py)
"""

from __future__ import annotations

import time
from pathlib import Path

from attention_course.data import CORPUS_FILE, load_corpus
from attention_course.experiments.gpt import CPU_CONFIG, train_gpt
from attention_course.measure import write_results
from attention_course.seeded import run_seeded, seeded_parser, summarise_arms

RESULTS = Path(__file__).resolve().parent / "results" / "gpt_schedule.json"
CORPUS = Path(__file__).resolve().parents[1] / "data" / CORPUS_FILE  # fingerprinted by its bytes
EVAL_WINDOWS = 1024
WARMUP_FRACTION = 10  # the warm-up lasts steps // 10 steps
PEAK_FACTORS = (2, 4)  # the higher peak rates, as multiples of CPU_CONFIG's

_CORPUS: list = []


def arms(steps: int) -> dict[str, dict]:
    """Each arm's settings: the CPU configuration with its schedule changed."""
    warmup = steps // WARMUP_FRACTION
    base = {**CPU_CONFIG, "steps": steps}
    plan = {
        "constant": {**base},
        "warmup": {**base, "warmup": warmup},
        "cosine": {**base, "schedule": "cosine"},
        "warmup_cosine": {**base, "schedule": "cosine", "warmup": warmup},
    }
    for factor in PEAK_FACTORS:
        for name in ("constant", "warmup_cosine"):
            plan[f"{name}_x{factor}"] = {**plan[name], "lr": base["lr"] * factor}
    for name in ("warmup", "cosine"):
        plan[f"{name}_x{PEAK_FACTORS[-1]}"] = {**plan[name], "lr": base["lr"] * PEAK_FACTORS[-1]}
    return plan


def run_one(task: tuple[str, dict, int]) -> dict:
    name, settings, seed = task
    if not _CORPUS:
        _CORPUS.append(load_corpus())
    start = time.perf_counter()
    run = train_gpt(_CORPUS[0], seed, **settings, eval_windows=EVAL_WINDOWS, threads=1)
    seconds = time.perf_counter() - start
    print(f"{name} seed {seed}: {run.validation_bpc:.4f} bits/char ({seconds:.0f} s)", flush=True)
    return {"arm": name, "seed": seed, "validation_bpc": run.validation_bpc, "seconds": seconds,
            "final_train_loss_nats": run.history.loss[-1], "loss_every_10_steps": run.history.loss[::10]}


def main(argv: list[str] | None = None) -> dict:
    args = seeded_parser(__doc__.splitlines()[0], out=RESULTS, steps=CPU_CONFIG["steps"], workers=2).parse_args(argv)
    seeds = list(args.seeds)
    plan = arms(args.steps)
    runs = run_seeded(run_one, [(name, settings, seed) for name, settings in plan.items() for seed in seeds],
                      args.workers)
    summary = summarise_arms(runs, plan, "validation_bpc")
    results = {"summary": summary, "runs": runs}
    settings = {"arms": plan, "seeds": seeds, "threads": 1, "eval_windows": EVAL_WINDOWS,
                "corpus": f"data/{CORPUS_FILE}"}
    print(f"results written to {write_results(args.out, results, settings, code=[main, CORPUS])}")
    return results


if __name__ == "__main__":
    main()
