"""Chapter 4's training sweeps on the two-query recall task (§4.5 and §4.6), at three budgets and five seeds.

Two parts, each written to its own results file:

* ``table3a`` — the miniature of Table 3 (A): :class:`~attention_course.experiments.heads.TwoQueryRecall`
  (the package's ``MultiHeadAttention``, d_model = 32, d_k = d_v = 32/h) for h = 1, 2, 4, 8, 16, seeds 0–4,
  scored after 400, 1600 and 6400 steps (×1, ×4, ×16). Written to ``benchmarks/results/heads_sweep.json``.
* ``factors`` — question (d)'s baseline: :class:`~attention_course.experiments.heads.ScoreHeadsRecall`, whose
  heads score either through two d_model × d_k factors or through one unconstrained d_model × d_model matrix
  per head (``d_k = None``), at a fixed d_v = 32/h: h = 1 (one W, d_k = 32), h = 4 (one W, d_k = 8, 2) and
  h = 16 (d_k = 2, 8; d_v = 2: d_k changes alone, so a gap there is the rank of the scores, not the width of
  the values), scored after 400 and 1600 steps (×1, ×4).
  Written to ``benchmarks/results/heads_factors.json``, with each arm's parameters and FLOPs.
* ``controls`` — cheap controls, scored after 400 and 1600 steps: h = 16, d_k = 2 (d_v = 2) with every
  score multiplied by 4 or 16 (``score_scale``: does a narrow head that can reach large scores sooner catch up
  with d_k = 8?), the same head with a learned temperature per head starting at 1 (``learned_temperature``: large
  scores within reach without a saturated start; each head's temperature at the end of the run is stored), and
  the Table 3 (A) model at h = 4 and h = 16 with a second learning rate, 1e-2.
  Written to ``benchmarks/results/heads_controls.json``.

Every run: AdamW at a constant learning rate of 5e-3, batch 128, gradient clipping at 1, one thread
(:func:`~attention_course.experiments.heads.checkpoint_runs`); the learning rate is constant, so the scores
after 400 and 1600 steps are those of runs trained for 400 and 1600 steps. Stored per run: test accuracy and
loss at each checkpoint (2000 held-out questions) and the training loss averaged over windows of 100 steps.

Usage:  python benchmarks/heads_sweep.py --part table3a   (about 15 minutes on one CPU core)
        python benchmarks/heads_sweep.py --part factors   (about 8 minutes on one CPU core)
        python benchmarks/heads_sweep.py --part controls  (about 8 minutes on one CPU core)
        python benchmarks/heads_sweep.py --part table3a --seeds 0-1 --out /tmp/env2/heads_sweep.json
        (another numeric environment over fewer seeds, added to the part's file with tools/add_machine.py)
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from attention_course.experiments import heads as hd
from attention_course.measure import write_results
from attention_course.seeded import seeded_parser

RESULTS = Path(__file__).resolve().parent / "results"
TASK = hd.TwoQueryTask(batch=128)  # the batches and the held-out set of every run
D_MODEL, KEY_VOCAB, VALUE_VOCAB, N_PAIRS = 32, TASK.key_vocab, TASK.value_vocab, TASK.n_pairs
SEEDS = (0, 1, 2, 3, 4)
LR, BATCH, WINDOW = 5e-3, TASK.batch, 100
HEADS = (1, 2, 4, 8, 16)
LONG, SHORT = (400, 1600, 6400), (400, 1600)
#: (h, d_k or None for one W per head, checkpoints); d_v = D_MODEL // h
FACTOR_ARMS = (
    (1, None, SHORT), (1, 32, SHORT),
    (4, None, SHORT), (4, 8, SHORT), (4, 2, SHORT),
    (16, 2, SHORT), (16, 8, SHORT),
)


def attention_flops(model: torch.nn.Module) -> int:
    """FLOPs of the attention layer for one question reading the 8 stored pairs, counted by PyTorch."""
    (keys, values, qa, qb), _ = hd.two_query_recall(1, N_PAIRS, KEY_VOCAB, VALUE_VOCAB,
                                                     torch.Generator().manual_seed(0))
    memory, question = model._embed(keys, values, qa, qb)
    with torch.no_grad(), FlopCounterMode(display=False) as count:
        model.attn(question, memory, memory, need_weights=False)
    return int(count.get_total_flops())


def summarise(runs: hd.CheckpointRuns) -> dict[str, object]:
    return {
        "checkpoints": runs.checkpoints,
        "accuracy": [[round(a, 4) for a in seed] for seed in runs.accuracy],
        "test_loss": [[float(f"{x:.4g}") for x in seed] for seed in runs.loss],
        "train_loss_per_100": [[float(f"{x:.3g}") for x in seed] for seed in runs.curve],
    }


def table3a(seeds: tuple[int, ...], out: Path) -> None:
    results = {}
    for h in HEADS:
        runs = hd.checkpoint_runs(lambda h=h: hd.TwoQueryRecall(D_MODEL, h, KEY_VOCAB, VALUE_VOCAB), seeds, LONG,
                                  task=TASK, lr=LR, window=WINDOW)
        results[str(h)] = summarise(runs)
        print("h", h, results[str(h)]["test_loss"], flush=True)
    settings = {"d_model": D_MODEL, "heads": list(HEADS), "d_k = d_v": "d_model / h", "seeds": list(seeds),
                "checkpoints": list(LONG), "lr": LR, "batch": BATCH, "window": WINDOW, "optimizer": "adamw, clip 1",
                "task": f"two_query_recall n_pairs={N_PAIRS} key_vocab={KEY_VOCAB} value_vocab={VALUE_VOCAB}",
                "test": f"{TASK.test_size} questions, seed 10000", "threads": 1,
                "model": "TwoQueryRecall (the package's MultiHeadAttention)"}
    print("wrote", write_results(out, results, settings, code=[table3a]))


def factors(seeds: tuple[int, ...], out: Path) -> None:
    results = {}
    for h, d_k, checkpoints in FACTOR_ARMS:
        d_v = D_MODEL // h

        def build(h=h, d_k=d_k, d_v=d_v):
            return hd.ScoreHeadsRecall(D_MODEL, h, d_k, d_v, KEY_VOCAB, VALUE_VOCAB)

        runs = hd.checkpoint_runs(build, seeds, checkpoints, task=TASK, lr=LR, window=WINDOW)
        model = runs.models[0]
        entry = summarise(runs)
        entry.update(h=h, d_k=d_k, d_v=d_v, score_parameters=model.attn.score_parameters(),
                     attention_parameters=sum(p.numel() for p in model.attn.parameters()),
                     attention_flops=attention_flops(model))
        name = f"h={h},d_k={'W' if d_k is None else d_k}"
        results[name] = entry
        print(name, entry["test_loss"], flush=True)
    settings = {"d_model": D_MODEL, "arms": [[h, d_k, list(c)] for h, d_k, c in FACTOR_ARMS],
                "d_v": "d_model / h", "seeds": list(seeds), "lr": LR, "batch": BATCH, "window": WINDOW,
                "optimizer": "adamw, clip 1", "threads": 1,
                "task": f"two_query_recall n_pairs={N_PAIRS} key_vocab={KEY_VOCAB} value_vocab={VALUE_VOCAB}",
                "test": f"{TASK.test_size} questions, seed 10000",
                "model": "ScoreHeadsRecall (d_k None: one W per head)",
                "flops": "attention layer, one question reading 8 pairs, torch FlopCounterMode"}
    print("wrote", write_results(out, results, settings, code=[factors]))


#: (name, builder, learning rate) of the controls
SCALES, LR2 = (4.0, 16.0), 1e-2


def controls(seeds: tuple[int, ...], out: Path) -> None:
    arms = [(f"h=16,d_k=2,scale={s:g}",
             lambda s=s: hd.ScoreHeadsRecall(D_MODEL, 16, 2, 2, KEY_VOCAB, VALUE_VOCAB, score_scale=s), LR)
            for s in SCALES]
    arms += [("h=16,d_k=2,learned_temperature",
              lambda: hd.ScoreHeadsRecall(D_MODEL, 16, 2, 2, KEY_VOCAB, VALUE_VOCAB, learned_temperature=True), LR)]
    arms += [(f"table3a,h={h},lr={LR2:g}",
              lambda h=h: hd.TwoQueryRecall(D_MODEL, h, KEY_VOCAB, VALUE_VOCAB), LR2) for h in (4, 16)]
    results = {}
    for name, build, lr in arms:
        runs = hd.checkpoint_runs(build, seeds, SHORT, task=TASK, lr=lr, window=WINDOW)
        results[name] = summarise(runs) | {"lr": lr}
        if name.endswith("learned_temperature"):  # each head's e^θ at the end of the run (1600 steps)
            results[name]["temperatures_at_end"] = [
                [round(t, 4) for t in m.attn.log_temperature.detach().exp().flatten().tolist()] for m in runs.models]
        print(name, results[name]["test_loss"], flush=True)
    settings = {"d_model": D_MODEL, "scales": list(SCALES), "second_lr": LR2, "seeds": list(seeds),
                "checkpoints": list(SHORT), "batch": BATCH, "window": WINDOW, "optimizer": "adamw, clip 1",
                "threads": 1, "task": f"two_query_recall n_pairs={N_PAIRS} key_vocab={KEY_VOCAB} "
                f"value_vocab={VALUE_VOCAB}", "test": f"{TASK.test_size} questions, seed 10000",
                "models": "ScoreHeadsRecall(h=16, d_k=2, d_v=2, score_scale or a learned temperature e^θ per head, "
                          "θ from 0) at lr 5e-3; TwoQueryRecall at lr 1e-2"}
    print("wrote", write_results(out, results, settings, code=[controls]))


def main() -> None:
    parser = seeded_parser(__doc__.splitlines()[0], out=None, seeds=f"{SEEDS[0]}-{SEEDS[-1]}")
    parser.add_argument("--part", choices=list(PARTS), required=True,
                        help="which file to write: " + ", ".join(f"{k} {v}" for k, v in FILES.items()))
    args = parser.parse_args()
    torch.set_num_threads(1)
    PARTS[args.part](tuple(args.seeds), args.out or RESULTS / FILES[args.part])


PARTS = {"table3a": table3a, "factors": factors, "controls": controls}
FILES = {"table3a": "heads_sweep.json", "factors": "heads_factors.json", "controls": "heads_controls.json"}


if __name__ == "__main__":
    main()
