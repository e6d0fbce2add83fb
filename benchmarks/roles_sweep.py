"""Chapter 3's training sweeps: tied projections and AttentionAlt, at ×1, ×4 and ×16 the chapter's budget.

Four parts, each written to its own results file with its provenance (date, command, machine, versions, commit):

- ``recall`` -> ``benchmarks/results/roles_recall.json``: the associative-recall head (``RecallModel``) untied, with
  W^Q = W^K and with W^K = W^V, at d_k = 4 and 16; 5 seeds; scored after 300 steps, and the two d_k = 4 heads
  whose comparison the chapter draws (untied, W^K = W^V) also after 1,200 and 4,800 (EVIDENCE.md rule 7: a
  "cannot" needs the ×16 budget).
- ``previous`` -> ``benchmarks/results/roles_previous.json``: the previous-token head (``PreviousTokenModel``),
  untied, tied W^Q = W^K, and tied with the self-score masked, under a causal mask and under none; 10 seeds; scored
  after 200 steps, and the three tied heads that do not always reach 1.00 also after 800 and 3,200.
- ``alt`` -> ``benchmarks/results/roles_alt.json``: the recall head with the question's AttentionAlt
  (``AltRecallModel``: a learned fourth matrix W and the outside 1/√d_k), the same without the outside factor, and
  standard attention, at d_k = 16 and 64; 5 seeds; scored after 300 and 1,200 steps.
- ``wide`` -> ``benchmarks/results/roles_wide.json``: the width control of ``previous``: the previous-token head
  without a mask at d_k = 16 instead of 4, untied and tied W^Q = W^K; 10 seeds; scored after 200 steps, the tied
  head also after 800 and 3,200 (about 6 minutes).

(The ×4 and ×16 budgets are run only where the ×1 result leaves a question: one CPU core shared with other work.)

Every run is one :func:`attention_course.experiments.roles.train_budgets` run (AdamW, constant learning rate,
clipping at 1, one thread), so a budget's entry is exactly what ``run_seeds`` gives for that many steps: chapter 3
re-runs the ×1 entries of some arms live and asserts that they reproduce. Each run keeps, per budget, the test
accuracy and loss and the mean training loss so far (the area under the loss curve over the steps), and its loss
curve as means over log-spaced windows (``settings.curve_ends``: the last step of each window).

Usage:  python benchmarks/roles_sweep.py [--part recall|previous|alt|wide]  (all: about 26 minutes on one free core)
        python benchmarks/roles_sweep.py --part wide --seeds 0-1 --out /tmp/env2   (writes /tmp/env2/roles_wide.json)
        (``--seeds FIRST-LAST`` runs every part asked for over those seeds instead of its own: another numeric
        environment over fewer seeds, added to the part's file with tools/add_machine.py)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from attention_course.data import previous_token_sampler, recall_sampler
from attention_course.experiments.recall import RecallModel
from attention_course.experiments.roles import AltRecallModel, PreviousTokenModel, train_budgets
from attention_course.measure import seed_range, write_results

RESULTS = Path(__file__).resolve().parent / "results"
D_MODEL, LR, BATCH = 32, 1e-2, 64
N_PAIRS, KEY_VOCAB, VALUE_VOCAB = 8, 16, 16
VOCAB, LENGTH, D_PREV = 16, 16, 4
RECALL_ARMS = {"untied": {}, "tied W^Q = W^K": {"tie_qk": True}, "tied W^K = W^V": {"tie_kv": True}}
RECALL_WIDTHS = {4: tuple(RECALL_ARMS), 16: tuple(RECALL_ARMS)}
#: the arms run for the whole budget sweep; the others only for the first budget
RECALL_SWEPT = {(4, "untied"), (4, "tied W^K = W^V")}
PREVIOUS_SWEPT = {(True, "tied W^Q = W^K"), (False, "tied W^Q = W^K"), (False, "tied, self masked")}
PREVIOUS_ARMS = {"untied": {}, "tied W^Q = W^K": {"tie_qk": True},
                 "tied, self masked": {"tie_qk": True, "mask_self": True}}
#: the width control of the previous-token result: no mask, d_k = 16 instead of D_PREV
WIDE_ARMS = {"untied": {}, "tied W^Q = W^K": {"tie_qk": True}}
WIDE_SWEPT = {"tied W^Q = W^K"}
D_WIDE = 16
ALT_ARMS = ("standard", "AttentionAlt", "AttentionAlt without the outside 1/√d_k")
PARTS = {
    "recall": {"seeds": tuple(range(5)), "budgets": (300, 1200, 4800)},
    "previous": {"seeds": tuple(range(10)), "budgets": (200, 800, 3200)},
    "alt": {"seeds": tuple(range(5)), "budgets": (300, 1200), "d_ks": (16, 64)},
    "wide": {"seeds": tuple(range(10)), "budgets": (200, 800, 3200)},
}


def curve_windows(steps: int, n: int = 40) -> list[int]:
    """The ends of ``n`` (or fewer) log-spaced windows covering steps 1..``steps``."""
    return sorted({int(e) for e in np.round(np.geomspace(1, steps, n))})


def summarise(run, ends: list[int]) -> dict[str, object]:
    """What the results file keeps of one :class:`BudgetRun` (its curve up to its largest budget)."""
    loss = np.asarray(run.loss)
    ends = [e for e in ends if e <= len(loss)]
    starts = [0, *ends[:-1]]
    return {
        "seed": run.seed,
        "accuracy": {str(b): a for b, a in run.accuracy.items()},
        "test_loss": {str(b): x for b, x in run.test_loss.items()},
        "mean_train_loss": {str(b): float(loss[:b].mean()) for b in run.accuracy},
        "loss_curve": [round(float(loss[s:e].mean()), 4) for s, e in zip(starts, ends, strict=True)],
    }


def recall_test() -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Chapter 3's recall test set: 2000 queries drawn with seed 1000."""
    return recall_sampler(2000, N_PAIRS, KEY_VOCAB, VALUE_VOCAB, seed=1000)(0)


def previous_test() -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Chapter 3's previous-token test set: 500 sequences drawn with seed 1000."""
    return previous_token_sampler(500, LENGTH, VOCAB, seed=1000)(0)


def recall_sampling(seed: int):
    return recall_sampler(BATCH, N_PAIRS, KEY_VOCAB, VALUE_VOCAB, seed)


def run_recall(seeds, budgets, ends) -> dict:
    test, out = recall_test(), {}
    for d_k, arms in RECALL_WIDTHS.items():
        for arm in arms:
            arm_budgets = budgets if (d_k, arm) in RECALL_SWEPT else budgets[:1]
            runs = train_budgets(lambda o=RECALL_ARMS[arm], d=d_k: RecallModel(KEY_VOCAB, VALUE_VOCAB, D_MODEL, d, **o),
                                 recall_sampling, test, seeds, budgets=arm_budgets, lr=LR)
            out.setdefault(str(d_k), {})[arm] = [summarise(r, ends) for r in runs]
            print("recall", d_k, arm, [round(r.accuracy[arm_budgets[-1]], 3) for r in runs], flush=True)
    return out


def run_previous(seeds, budgets, ends) -> dict:
    test, out = previous_test(), {}
    for causal in (True, False):
        for arm, options in PREVIOUS_ARMS.items():
            arm_budgets = budgets if (causal, arm) in PREVIOUS_SWEPT else budgets[:1]
            runs = train_budgets(
                lambda o=options, c=causal: PreviousTokenModel(VOCAB, LENGTH, D_MODEL, D_PREV, causal=c, **o),
                lambda seed: previous_token_sampler(BATCH, LENGTH, VOCAB, seed), test, seeds, budgets=arm_budgets,
                lr=LR)
            out.setdefault("causal" if causal else "none", {})[arm] = [summarise(r, ends) for r in runs]
            print("previous", causal, arm, [round(r.accuracy[arm_budgets[-1]], 3) for r in runs], flush=True)
    return out


def run_wide(seeds, budgets, ends) -> dict:
    test, out = previous_test(), {}
    for arm, options in WIDE_ARMS.items():
        arm_budgets = budgets if arm in WIDE_SWEPT else budgets[:1]
        runs = train_budgets(
            lambda o=options: PreviousTokenModel(VOCAB, LENGTH, D_MODEL, D_WIDE, causal=False, **o),
            lambda seed: previous_token_sampler(BATCH, LENGTH, VOCAB, seed), test, seeds, budgets=arm_budgets,
            lr=LR)
        out[arm] = [summarise(r, ends) for r in runs]
        print("wide", arm, [round(r.accuracy[arm_budgets[-1]], 3) for r in runs], flush=True)
    return out


def alt_builder(arm: str, d_k: int):
    if arm == "standard":
        return lambda: RecallModel(KEY_VOCAB, VALUE_VOCAB, D_MODEL, d_k)
    return lambda: AltRecallModel(KEY_VOCAB, VALUE_VOCAB, D_MODEL, d_k, outside_scale=arm == "AttentionAlt")


def run_alt(seeds, budgets, d_ks, ends) -> dict:
    test, out = recall_test(), {}
    for d_k in d_ks:
        for arm in ALT_ARMS:
            runs = train_budgets(alt_builder(arm, d_k), recall_sampling, test, seeds, budgets=budgets, lr=LR)
            out.setdefault(str(d_k), {})[arm] = [summarise(r, ends) for r in runs]
            print("alt", d_k, arm, [round(r.accuracy[budgets[-1]], 3) for r in runs], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=[*PARTS, "all"], default="all")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the folder to write roles_<part>.json to")
    parser.add_argument("--seeds", type=seed_range, default=None,
                        help="first-last seed, e.g. 0-1, for every part run (default: each part's own, "
                             + ", ".join(f"{k} {v['seeds'][0]}-{v['seeds'][-1]}" for k, v in PARTS.items()) + ")")
    args = parser.parse_args()
    for part in PARTS if args.part == "all" else [args.part]:
        cfg = dict(PARTS[part])
        if args.seeds is not None:
            cfg["seeds"] = tuple(args.seeds)
        ends = curve_windows(cfg["budgets"][-1])
        if part == "recall":
            results = run_recall(cfg["seeds"], cfg["budgets"], ends)
            cfg |= {"arms": {str(d): list(a) for d, a in RECALL_WIDTHS.items()}, "n_pairs": N_PAIRS,
                    "swept": [f"d_k = {d}: {a}" for d, a in sorted(RECALL_SWEPT)],
                    "key_vocab": KEY_VOCAB, "value_vocab": VALUE_VOCAB,
                    "test": "2000 queries, recall_sampler seed 1000"}
        elif part == "previous":
            results = run_previous(cfg["seeds"], cfg["budgets"], ends)
            cfg |= {"arms": list(PREVIOUS_ARMS), "masks": ["causal", "none"], "vocab": VOCAB, "length": LENGTH,
                    "swept": [f"{'causal' if c else 'none'}: {a}" for c, a in sorted(PREVIOUS_SWEPT)],
                    "d_k": D_PREV, "test": "500 sequences, previous_token_sampler seed 1000"}
        elif part == "wide":
            results = run_wide(cfg["seeds"], cfg["budgets"], ends)
            cfg |= {"arms": list(WIDE_ARMS), "mask": "none", "vocab": VOCAB, "length": LENGTH, "d_k": D_WIDE,
                    "swept": sorted(WIDE_SWEPT), "test": "500 sequences, previous_token_sampler seed 1000"}
        else:
            results = run_alt(cfg["seeds"], cfg["budgets"], cfg["d_ks"], ends)
            cfg |= {"arms": list(ALT_ARMS), "n_pairs": N_PAIRS, "key_vocab": KEY_VOCAB, "value_vocab": VALUE_VOCAB,
                    "test": "2000 queries, recall_sampler seed 1000"}
        cfg |= {"d_model": D_MODEL, "lr": LR, "optimizer": "adamw", "clip": 1.0, "batch": BATCH, "threads": 1,
                "curve_ends": ends}
        cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}
        print("wrote", write_results(args.out / f"roles_{part}.json", results, cfg, code=[main]), flush=True)


if __name__ == "__main__":
    main()
