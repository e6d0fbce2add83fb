r"""Chapter 7's experiments: a character-level GPT trained on the King James Bible, measured against counting
baselines, and opened up by measuring what its heads attend to.

* :func:`validation_windows`: the characters every score is measured on — non-overlapping windows spread over
  the validation split, the first character of each window serving as context only.
* :func:`ngram_bits_per_char`: the unigram and bigram baselines, estimated on the training split with add-one
  (Laplace) smoothing, in bits per character on those windows.
* :func:`bits_per_char`: a model's cross-entropy on the same windows, in bits per character.
* :func:`fit_gpt`: a GPT trained on a stream of ids of any tokenizer with the package's loop
  (:func:`attention_course.train.fit`), on one CPU thread unless told otherwise; :func:`train_gpt` /
  :func:`train_seeds`: on the corpus's characters, one configuration per seed, scored on the validation windows.
* :func:`head_scores` (:func:`map_scores` of the model's maps): for every layer and head, the mean attention weight
  on the previous token and on the first token (a "sink"), with :func:`shuffled_scores` as the control: the same
  statistic after the weights of each attention row are permuted at random among the keys that row may see
  (:func:`shuffle_maps`) — what the scores are when position carries no preference.
* :func:`gpt_plan`: the configuration a device trains (the CPU one the chapter asserts on; a larger one on a GPU).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._checks import (
    check_choice,
    check_generator,
    check_instance,
    check_int,
    check_tensor,
    check_token_ids,
    describe,
)
from ..data import Corpus, text_sampler
from ..device import DeviceInfo, compute_dtype, memory_budget, seeded
from ..gpt import GPT, GPTConfig
from ..measure import cpu_threads
from ..objectives import warmup_cosine
from ..train import History, fit

__all__ = [
    "CPU_CONFIG",
    "GPU_CONFIG",
    "GPTPlan",
    "GPTRun",
    "HeadScores",
    "bits_per_char",
    "fit_gpt",
    "gpt_plan",
    "head_scores",
    "map_scores",
    "ngram_bits_per_char",
    "ngram_log_probs",
    "shuffle_maps",
    "shuffled_scores",
    "train_gpt",
    "train_seeds",
    "validation_windows",
]

#: The chapter's CPU run (about a minute on one thread): 2 pre-LN layers, d_model 64, 4 heads, rotary positions,
#: 600 steps of 32 windows of 64 characters (1.2 M characters, a third of the training text), Adam at 3e-3.
CPU_CONFIG = dict(d_model=64, n_layers=2, n_heads=4, length=64, batch=32, steps=600, lr=3e-3)
#: On a GPU: 4 layers, d_model 256, 8 heads, windows of 256, 2000 steps of 64 windows (33 M characters).
GPU_CONFIG = dict(d_model=256, n_layers=4, n_heads=8, length=256, batch=64, steps=2000, lr=1e-3)
#: Memory the GPU configuration needs at most, with a wide margin (3 M parameters, Adam, activations of one batch).
GPU_BYTES = 2 * 2**30

LN2 = math.log(2)


def validation_windows(ids: torch.Tensor, length: int, count: int | None = None) -> torch.Tensor:
    """``count`` non-overlapping windows of ``length + 1`` ids, ``(count, length + 1)``, evenly spaced over ``ids``
    ``(n,)`` so that they span the whole split (None: every window, back to back). In each window the last
    ``length`` ids are scored, each predicted from the ids before it in the window.

    Raises:
        TypeError: ``ids`` not an integer tensor. ValueError: ``ids`` not 1-D, fewer than ``count`` windows.
    """
    check_tensor("ids", ids, kind="integer", ndim=1, layout="(n,)")
    length = check_int("length", length)
    available = ids.numel() // (length + 1)
    count = available if count is None else check_int("count", count)
    if count > available or available == 0:
        raise ValueError(f"ids must hold {max(count, 1)} windows of length + 1 = {length + 1} ids, got {ids.numel()} "
                         f"ids ({available} windows)")
    rows = ids[: available * (length + 1)].view(available, length + 1)
    return rows[torch.linspace(0, available - 1, count).round().long()]


def _check_windows(windows: object, vocab: int | None = None) -> torch.Tensor:
    w = check_tensor("windows", windows, kind="integer", ndim=2, layout="(count, length + 1)")
    if w.shape[1] < 2 or w.shape[0] == 0:
        raise ValueError(f"windows must be (count, length + 1) with count ≥ 1 and length ≥ 1, got {tuple(w.shape)}")
    if vocab is not None:
        check_token_ids("windows", w, vocab, layout="(count, length + 1)")
    return w


def ngram_log_probs(train: torch.Tensor, vocab: int, order: int) -> torch.Tensor:
    r"""The add-one-smoothed n-gram model of ``train`` (ids ``(n,)`` in ``[0, vocab)``, at least two) as natural
    log-probabilities, float64: ``order`` 1, the unigram :math:`\ln p(c) = \ln\frac{N_c + 1}{N + V}`, ``(vocab,)``;
    2, the bigram :math:`\ln p(c \mid b) = \ln\frac{N_{bc} + 1}{N_b + V}`, ``(vocab, vocab)`` indexed ``[b, c]``.
    The one table behind :func:`ngram_bits_per_char` and :func:`attention_course.experiments.tokens.ngram_bits`.

    Raises:
        TypeError: ``train`` not integer. ValueError: ids out of range, fewer than two ids, ``order`` not 1 or 2.
    """
    vocab = check_int("vocab", vocab)
    check_token_ids("train", train, vocab, ndim=1, layout="(n,)")
    if train.numel() < 2:
        raise ValueError(f"train must hold at least two ids to count pairs in, got {train.numel()}")
    order = check_int("order", order, low=1, high=2)
    if order == 1:
        counts = torch.bincount(train, minlength=vocab).double() + 1
        return (counts / counts.sum()).log()
    pairs = torch.bincount(train[:-1] * vocab + train[1:], minlength=vocab * vocab).double().view(vocab, vocab) + 1
    return (pairs / pairs.sum(dim=1, keepdim=True)).log()


def ngram_bits_per_char(train: torch.Tensor, windows: torch.Tensor, vocab: int, order: int) -> float:
    r"""Bits per character of an add-one-smoothed n-gram model (``order`` 1: unigram, 2: bigram) estimated on
    ``train`` (ids ``(n,)`` in ``[0, vocab)``) and scored on the same characters as :func:`bits_per_char`: the last
    ``length`` ids of each of ``windows`` (:func:`validation_windows`).

    Unigram: :math:`p(c) = (N_c + 1)/(N + V)`; bigram: :math:`p(c \mid b) = (N_{bc} + 1)/(N_b + V)`, ``b`` the
    character before ``c`` in the window. Returns :math:`-\frac{1}{n}\sum \log_2 p`.

    Raises:
        TypeError: ids not integer tensors. ValueError: ids out of range, an empty ``train``, ``order`` not 1 or 2.
    """
    log_p = ngram_log_probs(train, vocab, order)
    w = _check_windows(windows, vocab)
    if order == 1:
        return float(-log_p[w[:, 1:]].mean() / LN2)
    return float(-log_p[w[:, :-1], w[:, 1:]].mean() / LN2)


@torch.no_grad()
def bits_per_char(model: GPT, windows: torch.Tensor, *, batch: int = 64) -> float:
    """A model's mean cross-entropy in bits per character on the last ``length`` ids of each of ``windows``
    ``(count, length + 1)`` (:func:`validation_windows`), each predicted from the ids before it in its window.
    Eval mode; the model's mode is restored.

    Raises:
        TypeError: ``model`` not a GPT, ``windows`` not integer. ValueError: ``windows`` not 2-D or too short.
    """
    check_instance("model", model, GPT)
    rows = _check_windows(windows).to(model.tok_embed.weight.device)
    batch = check_int("batch", batch)
    was_training = model.training
    model.eval()
    total = 0.0
    try:
        for i in range(0, rows.shape[0], batch):
            chunk = rows[i : i + batch]
            logits = model(chunk[:, :-1])
            total += float(torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), chunk[:, 1:].flatten(),
                                                             reduction="sum"))
    finally:
        model.train(was_training)
    return total / rows[:, 1:].numel() / LN2


class GPTRun(NamedTuple):
    """One seed's run of :func:`train_gpt`: the trained model (eval mode), its training history (loss in nats per
    step) and its validation bits per character."""

    seed: int
    model: GPT
    history: History
    validation_bpc: float


def fit_gpt(ids: torch.Tensor, vocab_size: int, seed: int, *, d_model: int = 64, n_layers: int = 2,
            n_heads: int = 4, length: int = 64, batch: int = 32, steps: int = 600, lr: float = 3e-3,
            positions: str = "rotary", num_kv_heads: int | None = None, schedule: str = "constant",
            warmup: int = 0, precision: str = "float32", threads: int | None = 1,
            device: str | torch.device = "cpu") -> tuple[GPT, History]:
    """A :class:`~attention_course.gpt.GPT` over ``vocab_size`` ids trained on the stream ``ids`` ``(n,)``: what
    :func:`train_gpt` trains on characters, and §7.8 on BPE tokens. Returns the model (eval mode) and its history.

    ``seed`` fixes the initial weights (:func:`~attention_course.device.seeded`) and the batches (windows of
    ``length`` ids at random offsets, :func:`~attention_course.data.text_sampler`). :func:`~attention_course.train.
    fit` trains: AdamW, gradient-norm clipping at 1, with the rate ``lr`` after a linear warm-up of ``warmup``
    steps, then constant (``schedule="constant"``; the chapter's run, with no warm-up) or decaying along half a
    cosine to a tenth of ``lr`` at the last step (``"cosine"``; :func:`~attention_course.objectives.
    warmup_cosine`). ``precision="bfloat16"``: mixed precision (``torch.autocast``; the weights stay float32), for a
    GPU. Runs on ``threads`` CPU threads (restored afterwards).

    Raises:
        TypeError: ``ids`` not an integer tensor. ValueError: ids outside ``[0, vocab_size)``, an unknown
            ``schedule`` or ``precision``, the sizes :class:`GPTConfig` or ``fit`` refuse.
    """
    seed = check_int("seed", seed, low=0)
    vocab_size = check_int("vocab_size", vocab_size)
    check_token_ids("ids", ids, vocab_size, ndim=1, layout="(n,)")
    config = GPTConfig(vocab_size, d_model, n_layers, n_heads, num_kv_heads=num_kv_heads,
                       max_len=check_int("length", length), positions=positions)
    floor = {"constant": 1.0, "cosine": 0.1}[check_choice("schedule", schedule, ("constant", "cosine"))]
    warmup = check_int("warmup", warmup, low=0, high=check_int("steps", steps) - 1)
    autocast = {"float32": None, "bfloat16": torch.bfloat16}[check_choice("precision", precision,
                                                                         ("float32", "bfloat16"))]
    rate = None if (floor, warmup) == (1.0, 0) else (lambda step: warmup_cosine(step, steps, warmup, floor))
    with cpu_threads(threads):
        with seeded(seed):
            model = GPT(config, device=device)
        sample = text_sampler(ids, batch, length, seed)
        on_device = (lambda step: _to(sample(step), device)) if torch.device(device).type != "cpu" else sample
        history = fit(model, on_device, steps, lr, schedule=rate, autocast=autocast)
    return model.eval(), history


def train_gpt(corpus: Corpus, seed: int, *, length: int = 64, eval_windows: int | None = 1024,
              threads: int | None = 1, **settings) -> GPTRun:
    """Train a character-level :class:`~attention_course.gpt.GPT` on ``corpus.train`` (:func:`fit_gpt`, whose
    keyword ``settings`` it takes: ``d_model``, ``n_layers``, ``n_heads``, ``batch``, ``steps``, ``lr``,
    ``positions``, ``num_kv_heads``, ``device``) and score it on ``eval_windows`` windows spread over
    ``corpus.validation`` (:func:`validation_windows`; None: all of it).

    Raises:
        TypeError: ``corpus`` not a Corpus. ValueError: the sizes :class:`GPTConfig` or ``fit`` refuse.
    """
    check_instance("corpus", corpus, Corpus)
    with cpu_threads(threads):
        model, history = fit_gpt(corpus.train, corpus.vocab_size, seed, length=length, threads=threads, **settings)
        bpc = bits_per_char(model, validation_windows(corpus.validation, length, eval_windows))
    return GPTRun(seed, model, history, bpc)


def _to(batch, device):
    (tokens,), targets = batch
    return (tokens.to(device),), targets.to(device)


def train_seeds(corpus: Corpus, seeds: list[int], **settings) -> list[GPTRun]:
    """:func:`train_gpt` once per seed (distinct, at least one), with the same ``settings``."""
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise TypeError(f"seeds must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct (a repeated seed repeats its run), got {list(seeds)}")
    return [train_gpt(corpus, s, **settings) for s in seeds]


class HeadScores(NamedTuple):
    """Per layer and head, ``(n_layers, n_heads)`` float64, averaged over the batch and the queries ``t ≥ 1``:

    Attributes:
        previous: the attention weight on key ``t − 1`` (a previous-token head scores near 1).
        first: the attention weight on key 0 (a first-token or "sink" head scores near 1).
    """

    previous: torch.Tensor
    first: torch.Tensor


def map_scores(maps: list[torch.Tensor]) -> HeadScores:
    """:class:`HeadScores` of per-layer attention maps ``(batch, heads, n, n)``, ``n ≥ 2`` (causal rows)."""
    if not isinstance(maps, list) or not maps:
        raise TypeError(f"maps must be a non-empty list of per-layer weights (batch, heads, n, n), got "
                        f"{describe(maps)}")
    prev, first = [], []
    for i, w in enumerate(maps):
        check_tensor(f"maps[{i}]", w, ndim=4, layout="(batch, heads, n, n)")
        n = w.shape[-1]
        if n < 2 or w.shape[-2] != n:
            raise ValueError(f"maps[{i}] must be square (batch, heads, n, n) with n ≥ 2, got {tuple(w.shape)}")
        t = torch.arange(1, n)
        prev.append(w[..., t, t - 1].double().mean(dim=(0, 2)))
        first.append(w[..., 1:, 0].double().mean(dim=(0, 2)))
    return HeadScores(torch.stack(prev), torch.stack(first))


def head_scores(model: GPT, tokens: torch.Tensor) -> HeadScores:
    """:class:`HeadScores` of ``model``'s attention maps on ``tokens`` ``(batch, n)``, ``n ≥ 2`` (eval mode)."""
    check_instance("model", model, GPT)
    return map_scores(model.attention_maps(tokens))


def shuffle_maps(maps: list[torch.Tensor], generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """The control for :func:`map_scores`: each causal attention row's weights permuted at random among the keys the
    row may see (keys ``0..t`` of query ``t``). Every row keeps its values — how peaked it is — and loses any link
    to position: query ``t`` then puts ``1/(t+1)`` on key ``t − 1`` on average, whatever the head did.
    ``generator``: a seeded CPU generator. Returns CPU tensors of the maps' shapes."""
    if not isinstance(maps, list) or not maps:
        raise TypeError(f"maps must be a non-empty list of per-layer weights (batch, heads, n, n), got "
                        f"{describe(maps)}")
    check_generator("generator", generator)
    shuffled = []
    for i, w in enumerate(maps):
        check_tensor(f"maps[{i}]", w, ndim=4, layout="(batch, heads, n, n)")
        keys = torch.arange(w.shape[-1])
        noise = torch.rand(w.shape, generator=generator).masked_fill(keys[None, :] > keys[:, None], 2.0)
        shuffled.append(w.cpu().gather(-1, noise.argsort(dim=-1)))  # keys 0..t permuted; the masked keys stay last
    return shuffled


def shuffled_scores(model: GPT, tokens: torch.Tensor, generator: torch.Generator | None = None) -> HeadScores:
    """:func:`head_scores` of the model's maps after :func:`shuffle_maps`: the chance level of each score."""
    check_instance("model", model, GPT)
    return map_scores(shuffle_maps(model.attention_maps(tokens), generator))


class GPTPlan(NamedTuple):
    """Where chapter 7 trains and with what (:func:`gpt_plan`): ``device``, ``threads`` (1 on the CPU, else None),
    ``config`` (the settings of :func:`train_gpt`) and a one-line ``note`` when a GPU was not used, else None."""

    device: str
    threads: int | None
    config: dict
    note: str | None


def gpt_plan(info: DeviceInfo) -> GPTPlan:
    """:data:`GPU_CONFIG` on a CUDA device with :data:`GPU_BYTES` to spare (:func:`~attention_course.device.
    memory_budget`), in bfloat16 mixed precision where the device has bfloat16 tensor cores (compute capability 8
    and up, :func:`~attention_course.device.compute_dtype`), float32 elsewhere (a T4's float16 would need loss
    scaling), otherwise :data:`CPU_CONFIG` on the CPU (one thread), with a note saying why."""
    check_instance("info", info, DeviceInfo)
    if info.type == "cuda":
        budget = memory_budget(info)
        if budget is not None and budget >= GPU_BYTES:
            precision = "bfloat16" if compute_dtype(info) == torch.bfloat16 else "float32"
            return GPTPlan("cuda", None, {**GPU_CONFIG, "precision": precision}, None)
        return GPTPlan("cpu", 1, dict(CPU_CONFIG), f"{info.name} has too little free memory; training on the CPU")
    note = None if info.type == "cpu" else f"{info.type} is not used for chapter 7's run; training on the CPU"
    return GPTPlan("cpu", 1, dict(CPU_CONFIG), note)
