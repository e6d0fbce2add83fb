"""Chapter 7's tokens: the chapter's GPT trained on characters and on byte-pair-encoded tokens, over seeds, scored
on the same validation text in bits per character, with the n-gram baselines of each tokenization.

Byte-level BPE tokenizers (``attention_course.tokenizer.BPETokenizer``) of 512 and 1024 ids are trained on the
training split. Four arms, each the chapter's CPU configuration (``CPU_CONFIG``: 2 layers, d_model 64, 4 heads,
rotary positions, 600 steps of 32 windows, AdamW at 3e-3, one CPU thread) changed in one thing:

* ``characters``: windows of 64 characters (the chapter's run);
* ``bpe512``: the same windows of 64 ids, now BPE tokens — the same compute per step, more text per window;
* ``bpe512_same_text``: BPE tokens in windows as short as hold 64 characters on average (the training split's
  characters per token), so each step sees as much text as the character model's;
* ``bpe1024``: windows of 64 ids of the larger vocabulary.

Every model is scored by ``attention_course.experiments.tokens.model_bits`` on the whole validation split, as does
each tokenization's unigram and bigram model (``ngram_bits``): total bits over the split's characters.

Writes ``benchmarks/results/gpt_tokens.json`` with its provenance (``--out`` to write elsewhere). Runs use one
thread each, ``--workers`` at a time (each in its own process).

Usage:  python benchmarks/gpt_tokens.py                       (5 seeds x 4 arms, about 40 s a run)
        python benchmarks/gpt_tokens.py --seeds 0 --steps 20 --out /tmp/gpt_tokens.json    (a quick check)
        python benchmarks/gpt_tokens.py --seeds 0-1 --out /tmp/env2/gpt_tokens.json
                                     (another numeric environment over fewer seeds: tools/add_machine.py)
"""

from __future__ import annotations

import time
from pathlib import Path

from attention_course.data import CORPUS_FILE, find_data_file, load_corpus, split_lines
from attention_course.experiments.gpt import CPU_CONFIG
from attention_course.experiments.tokens import bpe_corpus, char_corpus, ngram_bits, train_tokens
from attention_course.measure import write_results
from attention_course.seeded import run_seeded, seeded_parser, summarise_arms
from attention_course.tokenizer import BPETokenizer

RESULTS = Path(__file__).resolve().parent / "results" / "gpt_tokens.json"
CORPUS = Path(__file__).resolve().parents[1] / "data" / CORPUS_FILE  # fingerprinted by its bytes
VOCABS = (512, 1024)
CHARS_PER_WINDOW = CPU_CONFIG["length"]

_CORPORA: dict = {}


def corpora() -> dict:
    """The corpus as characters and as BPE tokens of each vocabulary size, with the tokenizers."""
    if not _CORPORA:
        train_text, validation_text = split_lines(find_data_file().read_text(encoding="utf-8"))
        _CORPORA["characters"] = (char_corpus(load_corpus()), None)
        for vocab in VOCABS:
            tok = BPETokenizer.train(train_text, vocab)
            _CORPORA[f"bpe{vocab}"] = (bpe_corpus(tok, train_text, validation_text), tok)
    return _CORPORA


def arms(steps: int) -> dict[str, dict]:
    """Each arm's token corpus and its training settings (the CPU configuration with one change)."""
    data = corpora()
    bpe = data["bpe512"][0]
    train_characters = data["characters"][0].train.numel()
    same_text = round(CHARS_PER_WINDOW * bpe.train.numel() / train_characters)
    base = {**CPU_CONFIG, "steps": steps}
    return {
        "characters": {"corpus": "characters", **base},
        "bpe512": {"corpus": "bpe512", **base},
        "bpe512_same_text": {"corpus": "bpe512", **base, "length": same_text},
        "bpe1024": {"corpus": "bpe1024", **base},
    }


def run_one(task: tuple[str, dict, int]) -> dict:
    name, arm, seed = task
    corpus = corpora()[arm["corpus"]][0]
    settings = {k: v for k, v in arm.items() if k != "corpus"}
    start = time.perf_counter()
    run = train_tokens(corpus, seed, **settings, threads=1)
    seconds = time.perf_counter() - start
    print(f"{name} seed {seed}: {run.bits_per_char:.4f} bits/char ({seconds:.0f} s)", flush=True)
    return {"arm": name, "seed": seed, "bits_per_char": run.bits_per_char, "seconds": seconds,
            "final_train_loss_nats_per_token": run.history.loss[-1], "loss_every_10_steps": run.history.loss[::10],
            "parameters": sum(p.numel() for p in run.model.parameters())}


def main(argv: list[str] | None = None) -> dict:
    args = seeded_parser(__doc__.splitlines()[0], out=RESULTS, steps=CPU_CONFIG["steps"], workers=2).parse_args(argv)
    seeds = list(args.seeds)
    data = corpora()
    plan = arms(args.steps)
    tokenizations = {}
    for key, (corpus, tok) in data.items():
        tokenizations[key] = {
            "name": corpus.name, "vocab_size": corpus.vocab_size, "train_ids": corpus.train.numel(),
            "validation_ids": corpus.validation.numel(), "validation_characters": corpus.characters,
            **{f"{n}_bpc": ngram_bits(corpus.train, corpus.validation, corpus.vocab_size, order) / corpus.characters
               for n, order in (("unigram", 1), ("bigram", 2))},
            **({"merges_sha256": tok.digest(), "first_merges": [tok.token_bytes(256 + k).decode()
                                                                      for k in range(24)]} if tok else {}),
        }
        print(key, {k: v for k, v in tokenizations[key].items() if k != "first_merges"}, flush=True)
    runs = run_seeded(run_one, [(name, arm, seed) for name, arm in plan.items() for seed in seeds], args.workers)
    summary = summarise_arms(runs, plan, "bits_per_char")
    results = {"tokenizations": tokenizations, "summary": summary, "runs": runs}
    settings = {"arms": plan, "seeds": seeds, "threads": 1, "corpus": f"data/{CORPUS_FILE}",
                "split": {"block": 50, "every": 10}, "vocabs": list(VOCABS), "tie_break": "smallest pair"}
    print(f"results written to {write_results(args.out, results, settings, code=[main, CORPUS])}")
    return results


if __name__ == "__main__":
    main()
