"""Chapter 5's reversal model: where it trains, in what dtype, and a head ablation for opening it up.

:func:`reversal_plan` chooses, from a :class:`~attention_course.device.DeviceInfo`, the device and dtype the chapter
trains on. The model and its training budget are the same on every device — the configuration whose results the
chapter asserts on the CPU (≥ 99 % exact match, the attention-map checks) — so that a reader's GPU reproduces
those results rather than a different, never-verified run; the device only changes how fast it goes.
:func:`ablated_head` removes one attention head's contribution (zero- or mean-ablation) and
:func:`mean_head_outputs` measures the mean a mean-ablation puts in its place. :func:`train_reversal` trains the
chapter's model from one seed; :func:`anti_diagonal_shares` and :func:`ablation_study` open it up (§5.7), so that
the page's live run and the stored five seeds (``benchmarks/transformer_heads.py``) are measured by one code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .. import data
from .._checks import check_callable, check_flag, check_instance, check_int, check_real, check_tensor
from ..device import DeviceInfo, memory_budget
from ..multihead import MultiHeadAttention
from ..seq2seq import Seq2SeqTransformer
from ..train import History, exact_match, fit_seq2seq

__all__ = ["AblationStudy", "AntiDiagonal", "ReversalPlan", "ablated_head", "ablation_study", "anti_diagonal_shares",
           "held_out_loss", "mean_head_outputs", "reversal_plan", "train_reversal"]

#: The chapter's model and budget (§5.6): 2 + 2 post-LN layers, d_model 64, 4 heads, 2500 steps of 64 strings.
REVERSAL_CONFIG = dict(d_model=64, nhead=4, layers=2, d_ff=128, batch=64, steps=2500, warmup=300, factor=0.5)

#: What training it holds on a device at most, with a wide margin: about 0.1 M parameters with Adam's two moments
#: and the activations of one batch of 64 strings of at most 12 tokens — tens of MB; 256 MiB is asked for.
REVERSAL_BYTES = 256 * 2**20


class ReversalPlan(NamedTuple):
    """Where and how chapter 5 trains its reversal model (:func:`reversal_plan`).

    Attributes:
        device: ``"cuda"``, ``"mps"`` or ``"cpu"``.
        dtype: always ``torch.float32`` (see :func:`reversal_plan`).
        threads: CPU threads to set (1 on the CPU, so that a machine like the stored runs' repeats them), or None.
        config: :data:`REVERSAL_CONFIG`.
        note: one printable line when the plan departs from the device asked about, else None.
    """

    device: str
    dtype: torch.dtype
    threads: int | None
    config: dict
    note: str | None


def reversal_plan(info: DeviceInfo) -> ReversalPlan:
    """Choose the device and dtype for chapter 5's training run from a device's properties.

    - The model and budget are :data:`REVERSAL_CONFIG` everywhere.
    - The dtype is float32 on every device, whatever :func:`~attention_course.device.compute_dtype` would pick: the
      chapter's asserted results were reached in float32, and it checks that cached decoding's logits equal a full
      pass to 1e-4, which bfloat16's 8-bit mantissa cannot meet. (With d_model 64 each matrix product is too small
      for 16-bit tensor cores to pay much; an expectation, not a timing.)
    - A CUDA or MPS device is used when :func:`~attention_course.device.memory_budget` leaves
      :data:`REVERSAL_BYTES` for it; otherwise the CPU, with a one-line note saying why.

    Raises:
        TypeError: ``info`` not a :class:`~attention_course.device.DeviceInfo`. ValueError: a CUDA device without
            its compute capability, or a type other than cuda, mps, cpu.
    """
    check_instance("info", info, DeviceInfo)
    budget = memory_budget(info)  # validates info
    config = dict(REVERSAL_CONFIG)
    if info.type == "cpu":
        return ReversalPlan("cpu", torch.float32, 1, config, None)
    if budget < REVERSAL_BYTES:
        note = (f"{info.name}: {budget / 2**20:.0f} MiB free to plan with, {REVERSAL_BYTES / 2**20:.0f} MiB "
                "needed; training on the CPU")
        return ReversalPlan("cpu", torch.float32, 1, config, note)
    return ReversalPlan(info.type, torch.float32, None, config, None)


@contextlib.contextmanager
def ablated_head(attention: MultiHeadAttention, head: int, mean: torch.Tensor | None = None) -> Iterator[None]:
    """Within the block, head ``head`` of ``attention`` no longer depends on the input (chapter 5).

    The columns of ``out_proj.weight`` that read the head's output are set to zero, so both attention paths (with
    weights formed or fused) drop it. With ``mean`` (the head's average output, ``(head_dim,)``, from
    :func:`mean_head_outputs`) that average is put back as a constant through ``out_proj``'s bias: a
    *mean-ablation*, which removes what the head says about each input without also moving the layer's output off
    the values it was trained on (a zero-ablation does both). Everything is restored on exit.

    Raises:
        TypeError: ``attention`` not a :class:`~attention_course.multihead.MultiHeadAttention`, ``head`` not an
            integer, ``mean`` not a floating tensor. ValueError: ``head`` outside ``[0, num_heads)``; ``mean`` not
            of shape ``(head_dim,)``, or given to a layer whose ``out_proj`` has no bias.
    """
    check_instance("attention", attention, MultiHeadAttention)
    head = check_int("head", head, low=0, high=attention.num_heads - 1)
    cols = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    weight, bias = attention.out_proj.weight, attention.out_proj.bias
    if mean is not None:
        mean = check_tensor("mean", mean, kind="floating", ndim=1, layout="(head_dim,)")
        if mean.shape[0] != attention.head_dim:
            raise ValueError(f"mean must have shape ({attention.head_dim},) (the head's width), got "
                             f"{tuple(mean.shape)}")
        if bias is None:
            raise ValueError("mean must go with a layer whose out_proj has a bias (it carries the constant), got "
                             "a layer built with bias=False; use mean=None (zero-ablation)")
    saved_w = weight.detach()[:, cols].clone()
    saved_b = None if bias is None else bias.detach().clone()
    with torch.no_grad():
        if mean is not None:
            bias += saved_w @ mean.to(saved_w)
        weight[:, cols] = 0
    try:
        yield
    finally:
        with torch.no_grad():
            weight[:, cols] = saved_w
            if saved_b is not None:
                bias.copy_(saved_b)


@torch.no_grad()
def mean_head_outputs(
    attention: MultiHeadAttention, run: Callable[[], object], where: torch.Tensor | None = None
) -> torch.Tensor:
    """Each head's output averaged over the query positions of the forward pass ``run()`` makes (chapter 5).

    ``run`` is called once (e.g. ``lambda: model(src, tgt)``); the input of ``attention.out_proj`` — the heads'
    outputs side by side — is recorded, and averaged over the positions where ``where`` is True (boolean
    ``(batch, n_q)``, e.g. the non-padding target positions; all positions when None).

    Returns:
        ``(num_heads, head_dim)``: row ``h`` is what :func:`ablated_head` puts in place of head ``h``.

    Raises:
        TypeError: ``attention`` not a MultiHeadAttention, ``run`` not callable, ``where`` not boolean.
        ValueError: ``run`` never called the layer, or ``where`` not of the recorded ``(batch, n_q)`` shape or
            selecting nothing.
    """
    check_instance("attention", attention, MultiHeadAttention)
    check_callable("run", run, "a function that runs the model once")
    seen: list[torch.Tensor] = []
    handle = attention.out_proj.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    try:
        run()
    finally:
        handle.remove()
    if not seen:
        raise ValueError("run must call the attention layer at least once (its outputs are averaged), got a "
                         "run() that never called it")
    x = torch.cat([t.reshape(-1, t.shape[-1]) for t in seen]) if where is None else seen[0]
    if where is not None:
        where = check_tensor("where", where, kind="bool", ndim=2, layout="(batch, n_q)")
        if len(seen) != 1 or tuple(where.shape) != tuple(x.shape[:2]) or not where.any():
            raise ValueError(f"where must select some of the {tuple(x.shape[:2])} (batch, n_q) query positions of "
                             f"one forward pass, got shape {tuple(where.shape)} over {len(seen)} passes")
        x = x[where.to(x.device)]
    return x.mean(0).view(attention.num_heads, attention.head_dim)


# ------------------------------------------------------------------------------------------- one seed's run
def train_reversal(
    seed: int, *, clip: float | None = 1.0, warmup: int = REVERSAL_CONFIG["warmup"], ramp: bool = True,
    norm_first: bool = False, smooth_over: list[int] | None = None, label_smoothing: float = 0.1,
    device: str | torch.device = "cpu", progress: bool = False,
) -> tuple[Seq2SeqTransformer, History]:
    """Chapter 5's reversal model (:data:`REVERSAL_CONFIG`) trained from seed ``seed``: ``torch.manual_seed(seed)``
    for the initialisation, batches of :func:`~attention_course.data.reverse_digits` from
    ``Generator().manual_seed(1 + seed)`` — seed 0 is the chapter's own run. The other arguments are the recipe's
    departures measured in the appendix (``fit_seq2seq``'s meaning); threads are the caller's to set."""
    seed = check_int("seed", seed, low=0)
    check_flag("norm_first", norm_first)
    cfg = REVERSAL_CONFIG
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(13, d_model=cfg["d_model"], nhead=cfg["nhead"], num_encoder_layers=cfg["layers"],
                               num_decoder_layers=cfg["layers"], dim_feedforward=cfg["d_ff"], dropout=0.0,
                               max_len=32, norm_first=norm_first).to(device)
    train_gen = torch.Generator().manual_seed(1 + seed)

    def sample_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        batch = data.reverse_digits(cfg["batch"], 1, 10, train_gen)
        return batch.src, batch.tgt

    hist = fit_seq2seq(model, sample_batch, cfg["steps"], warmup=warmup, factor=cfg["factor"],
                       label_smoothing=label_smoothing, betas=(0.9, 0.98), eps=1e-9, clip=clip, ramp=ramp,
                       smooth_over=smooth_over, progress=progress)
    return model, hist


def _check_reversal_batch(model: object, src: object, tgt: object) -> tuple[torch.Tensor, torch.Tensor]:
    check_instance("model", model, Seq2SeqTransformer)
    src = check_tensor("src", src, kind="integer", ndim=2, layout="(batch, n_src)")
    tgt = check_tensor("tgt", tgt, kind="integer", ndim=2, layout="(batch, n_tgt + 1)")
    if src.shape[0] != tgt.shape[0] or tgt.shape[1] < 2:
        raise ValueError(f"src and tgt must be one batch of (batch, n_src) and (batch, n_tgt + 1) ids with "
                         f"n_tgt >= 1, got {tuple(src.shape)} and {tuple(tgt.shape)}")
    return src, tgt


def held_out_loss(model: Seq2SeqTransformer, src: torch.Tensor, tgt: torch.Tensor,
                  pad_id: int = data.PAD_ID) -> float:
    """Teacher-forced cross-entropy per predicted token, without smoothing, padding ignored (nats)."""
    src, tgt = _check_reversal_batch(model, src, tgt)
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(src.to(device), tgt[:, :-1].to(device))
    return float(F.cross_entropy(logits.flatten(0, 1).float().cpu(), tgt[:, 1:].flatten(),
                                 ignore_index=check_int("pad_id", pad_id, low=None)))


# ------------------------------------------------------------------------------- the anti-diagonal (§5.7)
class AntiDiagonal(NamedTuple):
    """What :func:`anti_diagonal_shares` measures, over the decoder rows that write a digit.

    Attributes:
        exact: ``(layers, heads)``: the mean share of a row's cross-attention mass on the source digit it writes.
        near: ``(layers, heads)``: the share within one position of it.
        uniform_exact, uniform_near: the same shares for a head uniform over the real source tokens.
        best: the ``(layer, head)`` with the largest ``exact``.
        by_length: for ``best``, per string length ``m``: ``(exact, uniform exact, near, uniform near)``.
    """

    exact: torch.Tensor
    near: torch.Tensor
    uniform_exact: float
    uniform_near: float
    best: tuple[int, int]
    by_length: dict[int, tuple[float, float, float, float]]


@torch.no_grad()
def anti_diagonal_shares(model: Seq2SeqTransformer, src: torch.Tensor, tgt: torch.Tensor,
                         lengths: torch.Tensor) -> AntiDiagonal:
    """How much of each cross-attention head's mass lands on the anti-diagonal of a reversal (chapter 5, §5.7).

    ``src`` ``(batch, n_src)`` and ``tgt`` ``(batch, n_tgt + 1)`` (BOS, the reversed digits, EOS, padding), with
    ``lengths`` ``(batch,)`` digits per string. Decoder row ``t`` (from 0; row 0 reads BOS) writes output digit
    ``t + 1``, the source digit at index ``m - 1 - t``: the anti-diagonal. Rows ``t < m`` count.
    """
    src, tgt = _check_reversal_batch(model, src, tgt)
    lengths = check_tensor("lengths", lengths, kind="integer", ndim=1, layout="(batch,)")
    if lengths.shape[0] != src.shape[0] or int(lengths.min()) < 1 or int(lengths.max()) > src.shape[1]:
        raise ValueError(f"lengths must give each of the {src.shape[0]} strings 1 to {src.shape[1]} digits, got "
                         f"shape {tuple(lengths.shape)}, values {int(lengths.min())} to {int(lengths.max())}")
    device = next(model.parameters()).device
    maps = model.attention_maps(src.to(device), tgt[:, :-1].to(device))
    cross = torch.stack([w.float().cpu() for w in maps.cross])  # (layers, batch, heads, n_tgt, n_src)
    n_tgt, n_src = cross.shape[-2:]
    t_idx, j_idx = torch.arange(n_tgt)[:, None], torch.arange(n_src)[None, :]
    lengths = lengths.cpu()
    anti = lengths[:, None, None] - 1 - t_idx  # (batch, n_tgt, 1): the source index row t writes
    writes = (t_idx[None, :, 0] < lengths[:, None]).float()  # (batch, n_tgt)
    real = j_idx[None] < lengths[:, None, None]  # (batch, 1, n_src)

    def shares(window: int) -> tuple[torch.Tensor, torch.Tensor]:
        near = (j_idx - anti).abs() <= window  # (batch, n_tgt, n_src)
        mass = (cross * near[None, :, None]).sum(-1)  # (layers, batch, heads, n_tgt)
        uniform = (near & real).sum(-1) / lengths[:, None]  # (batch, n_tgt)
        return mass, uniform

    def mean_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:  # (layers, batch, heads, n_tgt) -> (layers, heads)
            return (x * rows[None, :, None]).sum((1, 3)) / rows.sum()
        return (x * rows).sum() / rows.sum()

    (m0, u0), (m1, u1) = shares(0), shares(1)
    exact, near = mean_rows(m0, writes), mean_rows(m1, writes)
    best = divmod(int(exact.argmax()), exact.shape[1])
    by_length = {}
    for m in sorted(set(lengths.tolist())):
        rows = writes * (lengths == m)[:, None]
        by_length[m] = tuple(float(v) for v in (
            mean_rows(m0[best[0], :, best[1]], rows), mean_rows(u0, rows),
            mean_rows(m1[best[0], :, best[1]], rows), mean_rows(u1, rows)))
    return AntiDiagonal(exact, near, float(mean_rows(u0, writes)), float(mean_rows(u1, writes)), best, by_length)


# ------------------------------------------------------------------------------------ switching heads off
class AblationStudy(NamedTuple):
    """What :func:`ablation_study` measures.

    Attributes:
        table: row name -> ``{"zero": (exact match, held-out loss), "mean": (...)}``; rows ``"none"``, each head
            ``"layer.head"``, then ``"anti-diagonal: ..."`` and ``"control: ..."``.
        anti_diagonal: the heads whose exact share is above the threshold.
        control: as many other heads, the least anti-diagonal ones, leaving out ``needed``.
        needed: the head whose zero-ablation alone costs the most exact match.
    """

    table: dict[str, dict[str, tuple[float, float]]]
    anti_diagonal: list[tuple[int, int]]
    control: list[tuple[int, int]]
    needed: tuple[int, int]


def ablation_study(model: Seq2SeqTransformer, src: torch.Tensor, tgt: torch.Tensor, exact: torch.Tensor,
                   threshold: float = 0.9) -> AblationStudy:
    """Switch the decoder's cross-attention heads off, one at a time and in two groups, and score the held-out
    strings ``src``, ``tgt`` (exact match by greedy decoding, and :func:`held_out_loss`) — chapter 5, §5.7.

    Each head is zero- and mean-ablated (:func:`ablated_head`; the mean over the held-out target positions,
    :func:`mean_head_outputs`). The groups: the heads whose ``exact`` share (``(layers, heads)``, from
    :func:`anti_diagonal_shares`) is above ``threshold``, and as a control as many heads that are not, the least
    anti-diagonal ones, leaving out the single head the model can least do without (it would break any group).
    """
    src, tgt = _check_reversal_batch(model, src, tgt)
    layers = model.transformer.decoder.layers
    exact = check_tensor("exact", exact, kind="floating", ndim=2, layout="(layers, heads)")
    heads_per = layers[0].multihead_attn.num_heads
    if tuple(exact.shape) != (len(layers), heads_per):
        raise ValueError(f"exact must have shape ({len(layers)}, {heads_per}) (the decoder's layers and heads), got "
                         f"{tuple(exact.shape)}")
    threshold = check_real("threshold", threshold, low=0.0, high=1.0)
    device = next(model.parameters()).device
    inputs = tgt[:, :-1] != data.PAD_ID  # decoder positions that hold a token
    run = lambda: model(src.to(device), tgt[:, :-1].to(device))  # noqa: E731
    means = [mean_head_outputs(layer.multihead_attn, run, where=inputs.to(device)) for layer in layers]

    def score(heads: list[tuple[int, int]], mean: bool) -> tuple[float, float]:
        with contextlib.ExitStack() as stack:
            for la, h in heads:
                stack.enter_context(ablated_head(layers[la].multihead_attn, h, means[la][h] if mean else None))
            em = exact_match(model, src, tgt, bos_id=data.BOS_ID, eos_id=data.EOS_ID)
            return float(em), held_out_loss(model, src, tgt)

    table: dict[str, dict[str, tuple[float, float]]] = {}

    def row(name: str, heads: list[tuple[int, int]]) -> None:
        table[name] = {"zero": score(heads, False), "mean": score(heads, True)}

    share = {(la, h): float(exact[la, h]) for la in range(len(layers)) for h in range(heads_per)}
    row("none", [])
    for la, h in share:
        row(f"{la}.{h}", [(la, h)])
    needed = min(share, key=lambda k: table[f"{k[0]}.{k[1]}"]["zero"][0])
    adiag = [k for k in share if share[k] > threshold]
    others = [k for k in share if k not in adiag and k != needed]
    control = sorted(others, key=share.get)[: len(adiag)]
    for label, heads in (("anti-diagonal", adiag), ("control", control)):
        row(f"{label}: " + " ".join(f"{la}.{h}" for la, h in heads), heads)
    return AblationStudy(table, adiag, control, needed)
