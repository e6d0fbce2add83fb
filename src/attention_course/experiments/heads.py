"""Measurements behind chapter 4: the cost of W^Q, W^K versus one W, the low-rank bottleneck, and a miniature of
Table 3 (A) of Vaswani et al. (2017).

* Cost: :func:`qk_parameters` and :func:`score_flops` count what it takes to compute the attention scores
  :math:`X W_i^Q {W_i^K}^\\top X^\\top` of all heads, either factorised (project to :math:`d_k`, then
  :math:`QK^\\top`) or through one :math:`d_\\text{model}\\times d_\\text{model}` matrix per head;
  :data:`CONFIGURATIONS` lists real models; :func:`factorised_scores` and :func:`bilinear_scores` are the two
  computations, so the counts can be checked with PyTorch's FLOP counter.
* The bottleneck (Bhojanapalli et al., 2020): :func:`fit_attention_patterns` fits one head's
  :math:`W^Q, W^K` by gradient descent to fixed attention patterns, for several :math:`d_k` at once.
* Table 3 (A): :func:`two_query_recall` (a task that needs two look-ups from one position),
  :class:`TwoQueryRecall` (a one-layer model built on :class:`~attention_course.multihead.MultiHeadAttention`) and
  :func:`head_sweep`, which trains it for several (h, d_k) at fixed :math:`d_\\text{model}` with
  :func:`~attention_course.train.run_seeds`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from .._checks import (
    check_flag,
    check_generator,
    check_instance,
    check_int,
    check_ints,
    check_real,
    check_same_device,
    check_tensor,
    check_token_ids,
    describe,
)
from ..data import associative_recall
from ..measure import cpu_threads
from ..multihead import MultiHeadAttention
from ..train import Sampler, SeedRun, evaluate, run_seeds, train_step

__all__ = [
    "ModelConfig",
    "CONFIGURATIONS",
    "PAPER_TABLE3_A",
    "qk_parameters",
    "score_flops",
    "factorised_scores",
    "bilinear_scores",
    "smoothed_permutations",
    "PatternFit",
    "fit_attention_patterns",
    "two_query_recall",
    "two_query_sampler",
    "TwoQueryTask",
    "TwoQueryRecall",
    "HeadSweep",
    "head_sweep",
    "ScoreHeads",
    "ScoreHeadsRecall",
    "CheckpointRuns",
    "checkpoint_runs",
]


# ------------------------------------------------------------------------------------------------------ cost
class _Config(NamedTuple):
    name: str
    d_model: int
    num_heads: int
    n_ctx: int
    attention_layers: int
    cite: str


class ModelConfig(_Config):
    """One published configuration (a named tuple whose sizes are checked when it is made).

    Attributes:
        name: the model's name.
        d_model, num_heads: width and heads per attention layer (so :math:`d_k = d_\\text{model}/h`).
        n_ctx: context length used for the FLOP count.
        attention_layers: attention sub-layers in the whole model (an encoder–decoder counts its decoder's
            self- and cross-attention separately).
        cite: the bibliography key of the source.
    """

    __slots__ = ()

    def __new__(cls, name: str, d_model: int, num_heads: int, n_ctx: int, attention_layers: int, cite: str):
        check_instance("name", name, str)
        check_instance("cite", cite, str)
        sizes = {"d_model": d_model, "num_heads": num_heads, "n_ctx": n_ctx, "attention_layers": attention_layers}
        d_model, num_heads, n_ctx, attention_layers = (check_int(k, v) for k, v in sizes.items())
        if d_model % num_heads:
            raise ValueError(f"num_heads must divide d_model={d_model} (d_k = d_model / h), got {num_heads}")
        return super().__new__(cls, name, d_model, num_heads, n_ctx, attention_layers, cite)

    @property
    def d_k(self) -> int:
        return self.d_model // self.num_heads


#: Transformer base (Vaswani et al. 2017: 6 encoder layers with self-attention, 6 decoder layers with self- and
#: cross-attention; no fixed maximum length, 512 used here as for BERT), BERT-base and BERT-large (Devlin et al.
#: 2019, 12 and 24 layers, 512 positions), GPT-2 small (Radford et al. 2019, 12 layers, 1024 positions).
CONFIGURATIONS: tuple[ModelConfig, ...] = (
    ModelConfig("Transformer base", 512, 8, 512, 18, "vaswani2017attention"),
    ModelConfig("BERT-base", 768, 12, 512, 12, "devlin2019bert"),
    ModelConfig("BERT-large", 1024, 16, 512, 24, "devlin2019bert"),
    ModelConfig("GPT-2 small", 768, 12, 1024, 12, "radford2019language"),
)

#: Vaswani et al. (2017), Table 3 rows (A) and the base model: (h, d_k = d_v, dev perplexity, dev BLEU) on
#: newstest2013 English–German, all at d_model = 512.
PAPER_TABLE3_A: tuple[tuple[int, int, float, float], ...] = (
    (1, 512, 5.29, 24.9),
    (4, 128, 5.00, 25.5),
    (8, 64, 4.92, 25.8),
    (16, 32, 4.91, 25.8),
    (32, 16, 5.01, 25.4),
)


def qk_parameters(d_model: int, d_k: int, num_heads: int, factorised: bool = True) -> int:
    """Weights that produce the scores of ``num_heads`` heads (biases excluded).

    Factorised: :math:`W_i^Q, W_i^K` of :math:`d_\\text{model}\\times d_k` each, :math:`2 h\\,d_\\text{model} d_k`.
    One matrix :math:`W_i` per head: :math:`h\\,d_\\text{model}^2`. Every size must be a positive integer.
    """
    d_model, d_k, num_heads = check_int("d_model", d_model), check_int("d_k", d_k), check_int("num_heads", num_heads)
    return 2 * num_heads * d_model * d_k if check_flag("factorised", factorised) else num_heads * d_model**2


def score_flops(n: int, d_model: int, d_k: int, num_heads: int, factorised: bool = True) -> int:
    """Floating-point operations (2 per multiply–add, matrix products only) to compute all heads' ``n × n``
    scores from ``X`` (``n × d_model``), self-attention.

    Factorised: :math:`Q = XW^Q, K = XW^K` (:math:`2\\cdot n\\,d_\\text{model}\\,h d_k` multiply–adds), then
    :math:`QK^\\top` per head (:math:`h\\,n^2 d_k`). One matrix per head: :math:`XW_i` (:math:`n\\,d_\\text{model}^2`)
    then :math:`(XW_i)X^\\top` (:math:`n^2 d_\\text{model}`), times :math:`h`.

    At the edges: ``n = 0`` (no tokens) costs 0; the model's sizes must be positive integers.
    """
    n = check_int("n", n, low=0)
    d_model, d_k, num_heads = check_int("d_model", d_model), check_int("d_k", d_k), check_int("num_heads", num_heads)
    if check_flag("factorised", factorised):
        return 2 * (2 * n * d_model * num_heads * d_k + num_heads * n * n * d_k)
    return 2 * num_heads * (n * d_model**2 + n * n * d_model)


def _check_scores_inputs(names: list[str], xs: list[object], ndims: list[int]) -> None:
    layouts = {"x": "(n, d_model)", "w": "(h, d_model, d_model)"}
    for name, t, ndim in zip(names, xs, ndims, strict=True):
        check_tensor(name, t, ndim=ndim, layout=layouts.get(name, "(h, d_model, d_k)"))
        if t.dtype != xs[0].dtype:
            raise TypeError(f"{name} must have the dtype of x ({xs[0].dtype}), got {describe(t)}")
    check_same_device(names, xs)


def factorised_scores(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor) -> torch.Tensor:
    """Unscaled scores :math:`(XW_i^Q)(XW_i^K)^\\top` of every head.

    Args:
        x: ``(n, d_model)``; w_q, w_k: ``(h, d_model, d_k)``.

    Returns:
        ``(h, n, n)``, in the inputs' dtype. At the edges: ``n = 0`` or ``h = 0`` give an empty tensor, ``d_k = 0``
        zeros (an empty sum), as ``torch.matmul`` does.
    """
    _check_scores_inputs(["x", "w_q", "w_k"], [x, w_q, w_k], [2, 3, 3])
    if w_q.shape != w_k.shape or w_q.shape[1] != x.shape[1]:
        raise ValueError(f"expected x (n, d_model) and w_q, w_k (h, d_model, d_k), got x {tuple(x.shape)}, "
                         f"w_q {tuple(w_q.shape)}, w_k {tuple(w_k.shape)}")
    h, d_model, d_k = w_q.shape
    q = (x @ w_q.permute(1, 0, 2).reshape(d_model, h * d_k)).unflatten(1, (h, d_k)).transpose(0, 1)
    k = (x @ w_k.permute(1, 0, 2).reshape(d_model, h * d_k)).unflatten(1, (h, d_k)).transpose(0, 1)
    return q @ k.transpose(1, 2)


def bilinear_scores(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Unscaled scores :math:`X W_i X^\\top` through one :math:`d_\\text{model}\\times d_\\text{model}` matrix per head.

    Args:
        x: ``(n, d_model)``; w: ``(h, d_model, d_model)``.

    Returns:
        ``(h, n, n)``, in the inputs' dtype. At the edges: ``n = 0`` or ``h = 0`` give an empty tensor, ``d_model = 0``
        zeros (an empty sum), as ``torch.matmul`` does.
    """
    _check_scores_inputs(["x", "w"], [x, w], [2, 3])
    if w.shape[1:] != (x.shape[1], x.shape[1]):
        raise ValueError(f"expected x (n, d_model) and w (h, d_model, d_model), got x {tuple(x.shape)}, "
                         f"w {tuple(w.shape)}")
    return (x @ w) @ x.T


# -------------------------------------------------------------------------------------- low-rank bottleneck
def smoothed_permutations(
    m: int, n: int, peak: float = 0.9, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``m`` random permutation patterns over ``n`` tokens, made strictly positive.

    Query ``i`` puts weight ``peak`` on key ``π(i)`` for a random permutation ``π`` and spreads ``1 - peak``
    evenly over the other ``n - 1`` keys. Returns ``(m, n, n)`` float64, rows summing to 1 (``m = 0``: an empty
    tensor, as ``torch.rand``); ``n ≥ 2`` and ``1/n < peak < 1`` keep every weight positive and the peak the largest.
    """
    m, n = check_int("m", m, low=0), check_int("n", n, low=2)
    peak = check_real("peak", peak, low=1.0 / n, high=1.0, open_low=True, open_high=True)
    generator = check_generator("generator", generator)
    perms = torch.rand(m, n, generator=generator).argsort(dim=-1)
    p = torch.full((m, n, n), (1.0 - peak) / (n - 1), dtype=torch.float64)
    return p.scatter_(2, perms[..., None], peak)


class PatternFit(NamedTuple):
    """What :func:`fit_attention_patterns` returns.

    Attributes:
        d_k: the head widths tried, ``(D,)``.
        kl: final mean KL(target ‖ fit) per query, ``(D, m)``.
        curve: mean over targets of that KL at every step, ``(D, steps)``.
        weights: the fitted attention patterns, ``(D, m, n, n)``.
    """

    d_k: list[int]
    kl: torch.Tensor
    curve: torch.Tensor
    weights: torch.Tensor


def fit_attention_patterns(
    x: torch.Tensor,
    targets: torch.Tensor,
    d_k_values: Sequence[int],
    steps: int = 2000,
    lr: float = 0.05,
    seed: int = 0,
) -> PatternFit:
    """Fit one attention head, :math:`\\operatorname{softmax}(XW^Q{W^K}^\\top X^\\top/\\sqrt{d_k})`, to each target
    pattern, for every ``d_k`` in ``d_k_values`` (chapter 4, §4.4; Bhojanapalli et al., 2020).

    Every (d_k, target) pair has its own :math:`W^Q, W^K` (``d_model × d_k``); all are trained together by Adam on
    the sum of their losses, which leaves the problems independent. The loss is the mean over queries of
    KL(target row ‖ fitted row), and the learning rate decays from ``lr`` to 0 on a cosine schedule. The error
    left after training estimates the best a head of that width can do.

    Args:
        x: token representations, ``(n, d_model)``.
        targets: ``(m, n, n)`` attention patterns, rows positive and summing to 1.
        d_k_values: head widths to try, each ``≥ 1``.
        steps, lr: Adam's steps and learning rate.
        seed: seeds the initial weights.

    Returns:
        A :class:`PatternFit`.

    At the edges: ``x`` and ``targets`` are CPU tensors of one floating dtype (the fit runs in it); at least one
    target (``m ≥ 1``), one token (``n ≥ 1``) and ``d_model ≥ 1`` are needed, or the mean KL would be 0/0.
    """
    check_tensor("x", x, ndim=2, layout="(n, d_model)")
    check_tensor("targets", targets, ndim=3, layout="(m, n, n)")
    if targets.shape[1:] != (x.shape[0], x.shape[0]) or 0 in targets.shape or 0 in x.shape:
        raise ValueError(f"expected non-empty x (n, d_model) and targets (m, n, n), got x {tuple(x.shape)} and "
                         f"targets {tuple(targets.shape)}")
    if targets.dtype != x.dtype:
        raise TypeError(f"targets must have the dtype of x ({x.dtype}), got {describe(targets)}")
    for name, t in (("x", x), ("targets", targets)):
        if t.device.type != "cpu":
            raise ValueError(f"{name} must be on the CPU (the fit runs on one CPU thread), got {describe(t)}")
    if not bool((targets > 0).all()) or not torch.allclose(targets.sum(-1), torch.ones((), dtype=targets.dtype)):
        raise ValueError("targets must be strictly positive with rows summing to 1, got other values")
    d_ks = check_ints("d_k_values", d_k_values)
    steps, lr = check_int("steps", steps), check_real("lr", lr, low=0)
    seed = check_int("seed", seed, low=0)
    dtype = x.dtype
    n, d_model = x.shape
    m, n_d, d_max = targets.shape[0], len(d_ks), max(d_ks)
    gen = torch.Generator().manual_seed(seed)
    # One zero-padded (d_model × d_max) pair per problem; the columns beyond each d_k are masked to zero.
    cols = (torch.arange(d_max)[None, :] < torch.tensor(d_ks)[:, None]).to(dtype)[:, None, None, :]
    init = 1.0 / math.sqrt(d_model)
    w_q = (torch.randn(n_d, m, d_model, d_max, generator=gen, dtype=dtype) * init * cols).requires_grad_()
    w_k = (torch.randn(n_d, m, d_model, d_max, generator=gen, dtype=dtype) * init * cols).requires_grad_()
    scale = torch.tensor([1.0 / math.sqrt(d) for d in d_ks], dtype=dtype)[:, None, None, None]
    log_t = targets.to(dtype).log()
    opt = torch.optim.Adam([w_q, w_k], lr=lr)
    # Cosine decay to zero: the final error is where the descent settles, not a snapshot of Adam's jitter.
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    curve = torch.empty(n_d, steps, dtype=dtype)

    def kl_of(wq: torch.Tensor, wk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_a = ((x @ (wq * cols)) @ (x @ (wk * cols)).transpose(-2, -1) * scale).log_softmax(dim=-1)
        return (targets * (log_t - log_a)).sum(-1).mean(-1), log_a  # (D, m)

    with cpu_threads(1):  # tiny matrices: one thread is faster, and sums in the same order on every machine
        for step in range(steps):
            kl, _ = kl_of(w_q, w_k)
            train_step(opt, kl.sum())
            schedule.step()
            curve[:, step] = kl.detach().mean(-1)
        with torch.no_grad():
            kl, log_a = kl_of(w_q, w_k)
    return PatternFit(d_ks, kl, curve, log_a.exp())


# ------------------------------------------------------------------------------------- Table 3 (A) in small
def _check_two_query_sizes(batch: int, n_pairs: int, key_vocab: int, value_vocab: int) -> None:
    check_int("batch", batch, low=0)
    check_int("n_pairs", n_pairs, low=2)  # two different queries
    check_int("key_vocab", key_vocab, low=n_pairs)  # distinct keys
    check_int("value_vocab", value_vocab, low=2)


def two_query_recall(
    batch: int, n_pairs: int, key_vocab: int, value_vocab: int, generator: torch.Generator | None = None
) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """Associative recall with two queries answered at once (chapter 4, §4.5).

    Each sequence stores ``n_pairs`` (key, value) pairs (:func:`~attention_course.data.associative_recall`) and
    asks for the values of two *different* stored keys ``a`` and ``b`` in one answer, the class
    ``value(a) · value_vocab + value(b)``. One position must therefore retrieve two items and keep them apart.

    Returns:
        ``((keys, values, query_a, query_b), target)``: ``keys``, ``values`` ``(batch, n_pairs)``;
        ``query_a``, ``query_b``, ``target`` ``(batch,)``, ``target`` in ``[0, value_vocab²)``.

    Needs ``n_pairs ≥ 2`` (two different keys), ``n_pairs ≤ key_vocab`` (the keys are distinct) and
    ``value_vocab ≥ 2``. At the edges: ``batch = 0`` gives empty tensors.
    """
    _check_two_query_sizes(batch, n_pairs, key_vocab, value_vocab)
    check_generator("generator", generator)
    first = associative_recall(batch, n_pairs, key_vocab, value_vocab, generator)
    shift = torch.randint(1, n_pairs, (batch,), generator=generator)
    pos_b = (first.position + shift) % n_pairs
    rows = torch.arange(batch)
    query_b, value_b = first.keys[rows, pos_b], first.values[rows, pos_b]
    return (first.keys, first.values, first.query, query_b), first.target * value_vocab + value_b


def two_query_sampler(batch: int, n_pairs: int, key_vocab: int, value_vocab: int, seed: int) -> Sampler:
    """A seeded stream of :func:`two_query_recall` batches for :func:`~attention_course.train.fit`:
    ``step -> ((keys, values, query_a, query_b), target)``, drawn in order from one generator seeded with ``seed``.
    The sizes are checked here, as :func:`two_query_recall` checks them."""
    _check_two_query_sizes(batch, n_pairs, key_vocab, value_vocab)
    seed = check_int("seed", seed, low=0)
    g = torch.Generator().manual_seed(seed)
    return lambda step: two_query_recall(batch, n_pairs, key_vocab, value_vocab, g)


@dataclass(frozen=True)
class TwoQueryTask:
    """The data every run of §4.5 and its lab trains and is scored on (chapter 4): batches of ``batch``
    questions, each storing ``n_pairs`` (key, value) pairs of ``key_vocab`` keys and ``value_vocab`` values
    (:func:`two_query_recall`). Run seed ``s`` draws its batches from ``two_query_sampler(..., seed=1000 + s)``
    (:meth:`sampler`); every run is scored on one held-out set of ``test_size`` questions drawn with seed 10_000
    (:meth:`test_set`). One object, so a sweep, its checkpointed runs and a results file's record of them cannot
    disagree about the task.

    Raises:
        TypeError, ValueError: sizes as :func:`two_query_recall` wants them, ``batch`` or ``test_size`` below 1.
    """

    batch: int = 128
    n_pairs: int = 8
    key_vocab: int = 16
    value_vocab: int = 8
    test_size: int = 2000

    def __post_init__(self) -> None:
        _check_two_query_sizes(check_int("batch", self.batch), self.n_pairs, self.key_vocab, self.value_vocab)
        check_int("test_size", self.test_size)
        for name in ("batch", "n_pairs", "key_vocab", "value_vocab", "test_size"):  # plain ints (JSON, hashing)
            object.__setattr__(self, name, int(getattr(self, name)))

    def sampler(self, seed: int) -> Sampler:
        """Run seed ``seed``'s training batches: :func:`two_query_sampler` seeded with ``1000 + seed``."""
        seed = check_int("seed", seed, low=0)
        return two_query_sampler(self.batch, self.n_pairs, self.key_vocab, self.value_vocab, seed=1_000 + seed)

    def test_set(self) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """The held-out questions every run is scored on: ``test_size`` of them, drawn with seed 10_000."""
        return two_query_recall(self.test_size, self.n_pairs, self.key_vocab, self.value_vocab,
                                torch.Generator().manual_seed(10_000))


class TwoQueryRecall(nn.Module):
    """A one-layer model for :func:`two_query_recall`: cross-attention from the question to the stored pairs.

    The stored pair ``j`` is the vector ``E_key[k_j] + E_value[v_j]``; the question is
    ``E_a[query_a] + E_b[query_b]`` (two tables, so the model knows which query is which). One
    :class:`~attention_course.multihead.MultiHeadAttention` (``d_model``, ``num_heads``) reads the pairs, a residual
    connection adds the question back, and an MLP (``LayerNorm``, ``d_model → 4 d_model → value_vocab²``) answers.
    Only the attention layer changes with ``num_heads``; its parameter count does not.

    Input shapes: ``keys``, ``values`` ``(batch, n_pairs)``; ``query_a``, ``query_b`` ``(batch,)``: token ids of
    any integer dtype, on the model's device, ``keys`` and the queries in ``[0, key_vocab)``, ``values`` in
    ``[0, value_vocab)``. Output: logits ``(batch, value_vocab²)``. At the edges: an empty batch gives empty
    logits.
    """

    def __init__(self, d_model: int, num_heads: int, key_vocab: int, value_vocab: int) -> None:
        super().__init__()
        d_model, num_heads = check_int("d_model", d_model), check_int("num_heads", num_heads)
        key_vocab, value_vocab = check_int("key_vocab", key_vocab), check_int("value_vocab", value_vocab)
        if d_model % num_heads:
            raise ValueError(f"num_heads must divide d_model={d_model}, got {num_heads}")
        self.value_vocab = value_vocab
        self.key_embedding = nn.Embedding(key_vocab, d_model)
        self.value_embedding = nn.Embedding(value_vocab, d_model)
        self.query_a_embedding = nn.Embedding(key_vocab, d_model)
        self.query_b_embedding = nn.Embedding(key_vocab, d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, batch_first=True)
        self.readout = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, 4 * d_model), nn.ReLU(),
                                     nn.Linear(4 * d_model, value_vocab**2))

    def _embed(
        self, keys: torch.Tensor, values: torch.Tensor, query_a: torch.Tensor, query_b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        names, ids = ["keys", "values", "query_a", "query_b"], [keys, values, query_a, query_b]
        for name, t in zip(names, ids, strict=True):
            check_tensor(name, t, kind="integer", ndim=2 if name in ("keys", "values") else 1,
                         layout="(batch, n_pairs)" if name in ("keys", "values") else "(batch,)")
        if values.shape != keys.shape or query_a.shape != keys.shape[:1] or query_b.shape != keys.shape[:1]:
            raise ValueError("expected keys, values (batch, n_pairs) and query_a, query_b (batch,), got "
                             + ", ".join(str(tuple(t.shape)) for t in ids))
        check_same_device([*names, "the model"], [*ids, self.key_embedding.weight])
        for name, t in zip(names, ids, strict=True):
            vocab = self.value_vocab if name == "values" else self.key_embedding.num_embeddings
            check_token_ids(name, t, vocab, ndim=t.ndim)
        keys, values, query_a, query_b = (t.long() for t in ids)  # nn.Embedding takes int32 and int64 only
        memory = self.key_embedding(keys) + self.value_embedding(values)  # (batch, n_pairs, d_model)
        question = (self.query_a_embedding(query_a) + self.query_b_embedding(query_b))[:, None]  # (batch, 1, d)
        return memory, question

    def forward(
        self, keys: torch.Tensor, values: torch.Tensor, query_a: torch.Tensor, query_b: torch.Tensor
    ) -> torch.Tensor:
        memory, question = self._embed(keys, values, query_a, query_b)
        read, _ = self.attn(question, memory, memory, need_weights=False)
        return self.readout((question + read)[:, 0])

    @torch.no_grad()
    def attention_weights(
        self, keys: torch.Tensor, values: torch.Tensor, query_a: torch.Tensor, query_b: torch.Tensor
    ) -> torch.Tensor:
        """Every head's attention from the question to the stored pairs, ``(batch, num_heads, n_pairs)``."""
        memory, question = self._embed(keys, values, query_a, query_b)
        _, weights = self.attn(question, memory, memory, need_weights=True, average_attn_weights=False)
        return weights[:, :, 0]


class HeadSweep(NamedTuple):
    """Results of :func:`head_sweep`: per number of heads, one entry per seed.

    Attributes:
        d_model: the fixed width.
        heads: the numbers of heads tried; ``d_k = d_model // h``.
        accuracy, loss: ``h -> [test accuracy or test cross-entropy per seed]``.
        models: ``h -> the trained model of the first seed``.
        runs: ``h -> every seed's`` :class:`~attention_course.train.SeedRun` (model and training-loss history).
    """

    d_model: int
    heads: list[int]
    accuracy: dict[int, list[float]]
    loss: dict[int, list[float]]
    models: dict[int, TwoQueryRecall]
    runs: dict[int, list[SeedRun]] = {}


def head_sweep(
    d_model: int = 32,
    heads: Sequence[int] = (1, 2, 4, 8, 16),
    seeds: Sequence[int] = (0, 1, 2),
    steps: int = 400,
    lr: float = 5e-3,
    task: TwoQueryTask = TwoQueryTask(),  # noqa: B008 -- frozen: one shared default is safe
) -> HeadSweep:
    """Train :class:`TwoQueryRecall` for every number of heads at fixed ``d_model`` (Table 3 (A) in miniature).

    :func:`~attention_course.train.run_seeds` does the runs, on one CPU thread: seed ``s`` fixes the initial
    weights, and ``task`` (a :class:`TwoQueryTask`) the batches and the held-out test set shared by all runs.

    Returns:
        A :class:`HeadSweep` with test accuracy and test cross-entropy per (h, seed).

    Every argument is checked before the first run: ``heads`` and ``seeds`` non-empty (``seeds`` distinct and
    ``≥ 0``), each ``h`` dividing ``d_model``, ``task`` a :class:`TwoQueryTask`, ``lr ≥ 0`` (0 leaves the
    weights as they start, as PyTorch's optimisers allow).
    """
    d_model = check_int("d_model", d_model)
    heads = check_ints("heads", heads)
    for h in heads:
        if d_model % h:
            raise ValueError(f"every number of heads must divide d_model={d_model}, got heads containing {h}")
    seeds = check_ints("seeds", seeds, low=0)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct (a repeated seed repeats its run exactly), got {seeds}")
    steps, lr = check_int("steps", steps), check_real("lr", lr, low=0)
    check_instance("task", task, TwoQueryTask)
    test = task.test_set()
    runs = {
        h: run_seeds(
            lambda h=h: TwoQueryRecall(d_model, h, task.key_vocab, task.value_vocab),
            task.sampler,
            test,
            seeds,
            steps=steps,
            lr=lr,
        )
        for h in heads
    }
    return HeadSweep(
        d_model,
        list(heads),
        accuracy={h: [r.accuracy for r in rs] for h, rs in runs.items()},
        loss={h: [r.test_loss for r in rs] for h, rs in runs.items()},
        models={h: rs[0].model for h, rs in runs.items()},
        runs=runs,
    )


# ------------------------------------------------------------------- one W per head, d_k apart from d_v
class ScoreHeads(nn.Module):
    """Multi-head cross-attention whose score and value widths are set apart: the baseline of chapter 4, §4.6.

    Head ``i`` scores query ``x`` against key ``y`` with :math:`x W_i^Q {W_i^K}^\\top y^\\top / \\sqrt{d_k}`
    (``d_k`` an integer: two ``d_model × d_k`` factors) or with :math:`x W_i y^\\top / \\sqrt{d_\\text{model}}`
    (``d_k=None``: one unconstrained ``d_model × d_model`` matrix per head); it reads values of width ``d_v``
    (:math:`W_i^V`, ``d_model × d_v``, with a bias) and the heads are joined by :math:`W^O`
    (``num_heads·d_v × d_model``, with a bias). The scores have no bias, so they depend on the weights only
    through :math:`W_{QK,i}`. Initialisation: every entry of :math:`W^Q, W^K, W_i, W^V` is
    :math:`N(0, 1/d_\\text{model})`, of :math:`W^O` :math:`N(0, 1/(h d_v))`, biases zero — so at the start the
    scores of both forms have the same variance, whatever ``d_k``.

    ``score_scale`` (a positive number, default 1) multiplies every score: a control of §4.6 that lets a narrow
    head reach the large scores a hard look-up needs without growing its weights. ``learned_temperature=True``
    multiplies head ``i``'s scores by a learned :math:`g_i = e^{θ_i}` as well, :math:`θ_i` starting at 0 (so
    :math:`g_i = 1`: the head starts as the default one, unsaturated, and training may raise its scale — the
    control that a fixed ``score_scale``, which also starts the softmax saturated, is not). The exponential keeps
    :math:`g_i > 0` and lets Adam, whose steps are about the learning rate, change it by a factor per step.

    ``forward(query, key, value, need_weights=True, average_attn_weights=True)``: ``query``
    ``(batch, n_q, d_model)``, ``key`` and ``value`` ``(batch, n_k, d_model)``; returns ``(output
    (batch, n_q, d_model), weights or None)``, the weights averaged over the heads ``(batch, n_q, n_k)`` or per
    head ``(batch, h, n_q, n_k)`` with ``average_attn_weights=False`` — the arguments and layout of
    ``nn.MultiheadAttention``, so that :meth:`TwoQueryRecall.attention_weights` works for both layers.
    """

    def __init__(
        self, d_model: int, num_heads: int, d_k: int | None, d_v: int, *, score_scale: float = 1.0,
        learned_temperature: bool = False,
    ) -> None:
        super().__init__()
        d_model, num_heads = check_int("d_model", d_model), check_int("num_heads", num_heads)
        self.score_scale = check_real("score_scale", score_scale, low=0, open_low=True)
        check_flag("learned_temperature", learned_temperature)
        self.d_k = None if d_k is None else check_int("d_k", d_k)
        d_v = check_int("d_v", d_v)
        self.d_model, self.num_heads, self.d_v = d_model, num_heads, d_v
        std = d_model**-0.5
        if self.d_k is None:
            self.w = nn.Parameter(torch.randn(num_heads, d_model, d_model) * std)
        else:
            self.w_q = nn.Parameter(torch.randn(num_heads, d_model, self.d_k) * std)
            self.w_k = nn.Parameter(torch.randn(num_heads, d_model, self.d_k) * std)
        self.w_v = nn.Parameter(torch.randn(num_heads, d_model, d_v) * std)
        self.b_v = nn.Parameter(torch.zeros(num_heads, 1, d_v))
        self.out_proj = nn.Linear(num_heads * d_v, d_model)
        with torch.no_grad():
            self.out_proj.weight.normal_(0.0, (num_heads * d_v) ** -0.5)
            self.out_proj.bias.zero_()
        # θ, one per head (registered last, no random draw: the other weights are those of the default)
        self.log_temperature = nn.Parameter(torch.zeros(num_heads, 1, 1)) if learned_temperature else None

    def score_parameters(self) -> int:
        """The weights that make the scores: :math:`2h\\,d_\\text{model}d_k`, or :math:`h\\,d_\\text{model}^2`."""
        return self.w.numel() if self.d_k is None else self.w_q.numel() + self.w_k.numel()

    def _check_query_key(self, query: torch.Tensor, key: torch.Tensor) -> None:
        for name, t in (("query", query), ("key", key)):
            check_tensor(name, t, ndim=3, layout="(batch, n, d_model)")
        if query.shape[0] != key.shape[0] or {query.shape[-1], key.shape[-1]} != {self.d_model}:
            raise ValueError(f"expected query (batch, n_q, {self.d_model}) and key (batch, n_k, {self.d_model}), "
                             f"got {tuple(query.shape)} and {tuple(key.shape)}")

    def scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        r"""Each head's scores before ``score_scale`` and the learned temperature: ``query`` ``(batch, n_q,
        d_model)`` and ``key`` ``(batch, n_k, d_model)`` give ``(batch, h, n_q, n_k)``, :math:`x W_i^Q {W_i^K}^\top
        y^\top / \sqrt{d_k}` or :math:`x W_i y^\top / \sqrt{d_\text{model}}`."""
        self._check_query_key(query, key)
        x, y = query[:, None], key[:, None]  # (batch, 1, n, d_model): broadcast over heads
        if self.d_k is None:
            return (x @ self.w) @ y.transpose(-2, -1) / math.sqrt(self.d_model)
        return (x @ self.w_q) @ (y @ self.w_k).transpose(-2, -1) / math.sqrt(self.d_k)

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, need_weights: bool = True,
        average_attn_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self._check_query_key(query, key)
        check_tensor("value", value, ndim=3, layout="(batch, n, d_model)")
        if key.shape != value.shape:
            raise ValueError(f"expected key and value of one shape (batch, n_k, {self.d_model}), got "
                             f"{tuple(key.shape)} and {tuple(value.shape)}")
        check_flag("need_weights", need_weights)
        check_flag("average_attn_weights", average_attn_weights)
        scores = self.scores(query, key)
        scale = self.score_scale if self.log_temperature is None else self.score_scale * self.log_temperature.exp()
        weights = (scale * scores).softmax(dim=-1)  # (batch, h, n_q, n_k)
        heads = weights @ (value[:, None] @ self.w_v + self.b_v)  # (batch, h, n_q, d_v)
        out = self.out_proj(heads.transpose(1, 2).flatten(2))
        if not need_weights:
            return out, None
        return out, (weights.mean(dim=1) if average_attn_weights else weights)


class ScoreHeadsRecall(TwoQueryRecall):
    """:class:`TwoQueryRecall` with its attention layer replaced by a :class:`ScoreHeads` (``num_heads``,
    ``d_k`` — ``None`` for one ``d_model × d_model`` matrix per head — ``d_v``, ``score_scale`` and
    ``learned_temperature``); everything else is the same."""

    def __init__(
        self, d_model: int, num_heads: int, d_k: int | None, d_v: int, key_vocab: int, value_vocab: int,
        *, score_scale: float = 1.0, learned_temperature: bool = False,
    ) -> None:
        super().__init__(d_model, 1, key_vocab, value_vocab)
        self.attn = ScoreHeads(d_model, num_heads, d_k, d_v, score_scale=score_scale,
                               learned_temperature=learned_temperature)


class CheckpointRuns(NamedTuple):
    """What :func:`checkpoint_runs` returns, one entry per seed (in the order of the seeds).

    Attributes:
        checkpoints: the steps at which the model was scored.
        accuracy, loss: ``[seed][checkpoint]`` test accuracy and test cross-entropy.
        curve: ``[seed]`` the training loss averaged over windows of ``window`` steps.
        models: the trained models (after the last checkpoint).
    """

    checkpoints: list[int]
    accuracy: list[list[float]]
    loss: list[list[float]]
    curve: list[list[float]]
    models: list[nn.Module]


def checkpoint_runs(
    build: object,
    seeds: Sequence[int],
    checkpoints: Sequence[int],
    *,
    lr: float = 5e-3,
    task: TwoQueryTask = TwoQueryTask(),  # noqa: B008 -- frozen: one shared default is safe
    window: int = 50,
) -> CheckpointRuns:
    """Train ``build()`` on :func:`two_query_recall` as :func:`head_sweep` does, scoring it at several budgets.

    One run per seed trains for ``max(checkpoints)`` steps with :func:`~attention_course.train.run_seeds`
    (AdamW at a constant learning rate, gradient clipping at 1, one thread; the same seeds, batches and test set
    as :func:`head_sweep`), and is scored on the test set after each checkpoint's step. The learning rate is
    constant, so the state at step ``c`` is exactly that of a run trained for ``c`` steps: one run of the longest
    budget gives all the shorter ones (``head_sweep(..., steps=c)`` reproduces the entry at ``c``).

    Raises:
        TypeError, ValueError: ``build`` not callable; ``seeds`` or ``checkpoints`` empty, repeated or not
            positive integers (seeds may be 0); ``task`` not a :class:`TwoQueryTask`; ``window < 1``.
    """
    if isinstance(build, nn.Module) or not callable(build):  # a model is callable, but is not a builder
        raise TypeError(f"build must be a function () -> a new model, called once per seed; got {describe(build)}")
    seeds = check_ints("seeds", seeds, low=0)
    checkpoints = sorted(check_ints("checkpoints", checkpoints))
    if len(set(checkpoints)) != len(checkpoints):
        raise ValueError(f"checkpoints must be distinct steps, got {checkpoints}")
    check_instance("task", task, TwoQueryTask)
    window, lr = check_int("window", window), check_real("lr", lr, low=0)
    test = task.test_set()
    scored: dict[int, list[tuple[float, float]]] = {}  # id(model) -> [(accuracy, loss) per checkpoint]
    steps_done: dict[int, int] = {}

    def score(model: nn.Module) -> float:
        step = steps_done[id(model)] = steps_done.get(id(model), 0) + 1
        if step in checkpoints:
            result = evaluate(model, *test)
            scored.setdefault(id(model), []).append((result.accuracy, result.loss))
        return 0.0

    runs = run_seeds(
        build,
        task.sampler,
        test,
        seeds,
        steps=checkpoints[-1],
        lr=lr,
        track={"score": score},
    )
    accuracy = [[a for a, _ in scored[id(r.model)]] for r in runs]
    loss = [[x for _, x in scored[id(r.model)]] for r in runs]
    curve = [
        [sum(r.history.loss[i : i + window]) / len(r.history.loss[i : i + window])
         for i in range(0, len(r.history.loss), window)]
        for r in runs
    ]
    return CheckpointRuns(checkpoints, accuracy, loss, curve, [r.model for r in runs])
