"""Chapter 5's exercises: the full Transformer (checks only; the solutions live in ``solutions/ch05.py``)."""

from __future__ import annotations

import functools
import math
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .._checks import describe
from ..positional import sinusoidal_encoding
from ..seq2seq import Seq2SeqTransformer, greedy_decode
from .checking import Check, Verdict, agrees, compare, register

__all__: list[str] = []


def _lower_right64(n_q: int, n_k: int) -> torch.Tensor:
    return torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)


def _mask_agrees(answer, g):  # noqa: ANN001, ANN202
    for n_q, n_k in ((4, 4), (1, 6), (3, 8), (5, 2), (1, 1), (9, 3), (2, 17)):
        got = answer(n_q, n_k)
        if isinstance(got, np.ndarray) and got.dtype == np.bool_:
            got = torch.from_numpy(got)  # judged by value: a NumPy mask is a mask too
        want = _lower_right64(n_q, n_k)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or tuple(got.shape) != (n_q, n_k):
            return f"n_q = {n_q}, n_k = {n_k}: the answer should be a bool tensor of shape ({n_q}, {n_k}), " \
                   f"got {describe(got)}"
        if not torch.equal(got, want):
            i, j = (got != want).nonzero()[0].tolist()
            return f"n_q = {n_q}, n_k = {n_k}: query {i} and key {j} are {'' if got[i, j] else 'not '}allowed"
    return None


def _new_token_sees_the_cache(answer, g):  # noqa: ANN001, ANN202
    got = answer(1, 9)
    return None if bool(torch.as_tensor(got).all()) else "one new query after 8 cached keys must see all 9 keys"


register("5.1", "the causal mask for new queries after a cache", "build", "cached_causal_mask", [
    Check("equals the reference mask, square and not, n_q > n_k included", _mask_agrees),
    Check("one new token sees every cached key and itself", _new_token_sees_the_cache),
])


def _smoothing_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(torch.randn(6, 5, generator=g), torch.randint(0, 5, (6,), generator=g), 0.1),
                        (torch.randn(4, 11, generator=g) * 3, torch.randint(0, 11, (4,), generator=g), 0.3)],
            # logits in the hundreds: log(softmax(·)) underflows to −inf where log-sum-exp does not
            "extreme": [(torch.randn(5, 7, generator=g) * 300, torch.randint(0, 7, (5,), generator=g), 0.2)],
            "unusual shapes": [(torch.randn(1, 2, generator=g), torch.randint(0, 2, (1,), generator=g), 0.0),
                               (torch.randn(3, 4, generator=g), torch.randint(0, 4, (3,), generator=g), 1.0)]}


register("5.2", "label-smoothed cross-entropy", "build", "smoothed_cross_entropy", [
    agrees("equals the label-smoothed cross-entropy, a mean over the batch: typical logits, logits in the "
           "hundreds, one example of two classes, ε = 0 and ε = 1", _smoothing_cases,
           lambda logits, t, eps: F.cross_entropy(logits, t, label_smoothing=eps), atol=1e-4, rtol=1e-5),
])


register("5.3", "the sinusoidal encoding", "build", "sinusoidal_positions", [
    agrees("PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))",
           lambda g: {"typical": [(7, 8), (50, 16)], "unusual shapes": [(3, 2), (1, 6), (128, 64)]},
           lambda n, d: sinusoidal_encoding(n, d).double(), atol=1e-4),
])


def _pre_ln_cases(g: torch.Generator) -> list[tuple]:
    """Typical (width 8), unusual (width 3, one token of one sequence) and extreme (inputs in the hundreds)."""
    cases = []
    for shape, scale in (((2, 5, 8), 1.0), ((1, 1, 3), 1.0), ((3, 4, 8), 300.0)):
        width = shape[-1]
        sublayer, norm = torch.nn.Linear(width, width), torch.nn.LayerNorm(width)
        with torch.no_grad():  # every parameter drawn from the check's generator, the LayerNorm's too
            for p in (*sublayer.parameters(), *norm.parameters()):
                p.copy_(torch.randn(p.shape, generator=g))
        cases.append((torch.randn(*shape, generator=g) * scale, sublayer, norm))
    return cases


def _pre_ln64(x, sublayer, norm):  # noqa: ANN001, ANN202
    h = F.layer_norm(x, norm.normalized_shape, norm.weight.double(), norm.bias.double(), norm.eps)
    return x + F.linear(h, sublayer.weight.double(), sublayer.bias.double())


def _not_post_ln(answer, g):  # noqa: ANN001, ANN202
    for x, sublayer, norm in _pre_ln_cases(g):
        with torch.no_grad():
            want = _pre_ln64(x.double(), sublayer, norm)
            kept = x.clone()
            got = answer(x, sublayer, norm)
        if not torch.equal(x, kept):
            return "the answer changed x in place (the residual stream is needed unchanged)"
        verdict = compare(got, want, atol=1e-4, rtol=1e-5, what="the block's output")
        if verdict:
            return f"x of shape {tuple(x.shape)}: {verdict}"
    return None


register("5.4", "a pre-LN residual block", "build", "pre_ln_residual", [
    Check("equals the reference block (pre-LN, as GPT-2), x left as it was: width 8, width 3 with one token, "
          "inputs in the hundreds", _not_post_ln),
])


# ------------------------------------------------------------------------------------------ 5.5, the project
_PAD, _BOS, _MAX_LEN = 0, 1, 48
#: A model's shape: vocabulary, d_model, heads, encoder layers, decoder layers, d_ff.
_Shape = tuple[int, int, int, int, int, int]
_BASE: _Shape = (13, 16, 2, 2, 2, 32)
#: Each family's cases: the model's shape, one source length per row (shorter rows padded), max_new, the end
#: token ("never": one no row makes; "staggered": one every row makes, at different steps), a factor on the
#: decoder's W_Q and the output projection (40: attention scores and logits above 100), and how many different
#: tokens each row must make at least.
_RECIPES: dict[str, list[tuple[_Shape, tuple[int, ...], int, str, float, int]]] = {
    "typical": [(_BASE, (9, 9), 12, "never", 1.0, 3), (_BASE, (6, 6), 10, "staggered", 1.0, 3)],
    "extreme": [(_BASE, (7, 7), 10, "staggered", 40.0, 3), ((11, 16, 4, 2, 2, 32), (5,), 24, "never", 1.0, 3)],
    "unusual shapes": [((17, 12, 4, 1, 3, 20), (6, 1, 4), 10, "staggered", 1.0, 2),  # a padded batch of 3
                       ((7, 8, 1, 1, 1, 16), (1,), 6, "never", 1.0, 3),  # one source token, one head
                       (_BASE, (4, 8), 1, "never", 1.0, 1)],  # max_new = 1
}


@dataclass(frozen=True)
class _Decoding:
    """One case: the model's shape and float32 weights, the source, max_new and eos; and the float64 oracle's ids."""

    shape: _Shape
    weights: dict[str, torch.Tensor]
    src: torch.Tensor
    max_new: int
    eos: int
    want: torch.Tensor

    def about(self, family: str, number: int) -> str:
        vocab, d, heads, _, layers, _ = self.shape
        return (f"{family} inputs, case {number} (src {tuple(self.src.shape)}, max_new = {self.max_new}, "
                f"d_model = {d}, {heads} head{'s' * (heads > 1)}, {layers} decoder layer{'s' * (layers > 1)})")


def _seq2seq(shape: _Shape, dtype: torch.dtype = torch.float32) -> Seq2SeqTransformer:
    vocab, d, heads, n_enc, n_dec, ff = shape
    return Seq2SeqTransformer(vocab, d_model=d, nhead=heads, num_encoder_layers=n_enc, num_decoder_layers=n_dec,
                              dim_feedforward=ff, dropout=0.0, max_len=_MAX_LEN, pad_id=_PAD, tie_output=False,
                              dtype=dtype).eval()


def _fill(model: Seq2SeqTransformer, g: torch.Generator, sharp: float) -> None:
    """Every parameter from the check's generator (matrices ~ 1/√fan-in, LayerNorm gains ~ 1, small biases);
    ``sharp`` multiplies the decoder's W_Q (the attention scores) and the output projection (the logits)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if p.ndim == 2:
                p.copy_(r / math.sqrt(p.shape[1]))
            else:
                p.copy_(1 + 0.2 * r if "norm" in name and name.endswith("weight") else 0.05 * r)
        for layer in model.transformer.decoder.layers:
            for mha in (layer.self_attn, layer.multihead_attn):
                mha.in_proj_weight[: model.d_model].mul_(sharp)
        model.generator.weight.mul_(3 * sharp)


def _first(row: list[int], token: int) -> int | None:
    return row.index(token) if token in row else None


def _pick(slots: list[list[list[int]]], how: str, vocab: int) -> tuple[list[int], int] | None:
    """One row per slot (``slots[s]``: the tokens its candidate rows generate) and the end token ``how`` asks for:
    one no chosen row makes ("never"), or one every chosen row makes, first at different steps ("staggered")."""
    if how == "never":
        made = {t for row in (rows[0] for rows in slots) for t in row}
        unused = [t for t in range(2, vocab) if t not in made]
        return ([0] * len(slots), unused[0]) if unused else None
    for token in sorted({t for rows in slots for row in rows for t in row} - {_BOS, _PAD}):
        chosen: list[int] = []
        steps: set[int] = set()
        for rows in slots:
            pick = next((i for i, row in enumerate(rows) if _first(row, token) not in steps | {None}), None)
            if pick is None:
                break
            chosen.append(pick)
            steps.add(_first(rows[pick], token))  # type: ignore[arg-type]
        if len(chosen) == len(slots) and max(steps) >= 2:
            return chosen, token
    return None


@functools.lru_cache(maxsize=32)
def _decoding(seed: int, family: str, number: int) -> _Decoding:
    """Case ``number`` of ``family``: a model drawn until every row's greedy choice wins by a clear margin at every
    step (5 % of the logits' scale, far above float32's rounding on any CPU), makes enough different tokens, and
    an end token can be picked as the recipe asks. Candidate rows are decoded together (rows are independent)
    and the batch is picked from them; its ids are then recomputed in full at every step, in float64 (the oracle).
    Drawn once per seed and case (each check asks for the same cases)."""
    shape, lengths, max_new, how, sharp, distinct = _RECIPES[family][number - 1]
    g = torch.Generator().manual_seed(1000 * seed + 10 * list(_RECIPES).index(family) + number)
    m32, m64 = _seq2seq(shape), _seq2seq(shape, torch.float64)
    per_slot = 8 * len(lengths)
    for _ in range(200):
        _fill(m32, g, sharp)
        m64.load_state_dict(m32.state_dict())
        src = torch.randint(3, shape[0], (per_slot * len(lengths), max(lengths)), generator=g)
        for i, n in enumerate(lengths):
            src[i * per_slot : (i + 1) * per_slot, n:] = _PAD
        with torch.no_grad():  # the package's cached decoding, only to search
            ids, logits = greedy_decode(m64, src, max_new, _BOS, None, return_logits=True)
        top2 = logits.topk(2, dim=-1).values
        clear = (top2[..., 0] - top2[..., 1]).amin(dim=1) >= 0.05 * max(1.0, float(logits.abs().amax()) / 10)
        rows = ids[:, 1:].tolist()
        fit = [j for j, row in enumerate(rows) if clear[j] and len(set(row)) >= distinct]
        index = [[j for j in fit if i * per_slot <= j < (i + 1) * per_slot] for i in range(len(lengths))]
        found = _pick([[rows[j] for j in slot] for slot in index], how, shape[0]) if all(index) else None
        if found is not None:
            chosen, eos = found
            batch = src[[slot[c] for slot, c in zip(index, chosen, strict=True)]]
            with torch.no_grad():  # the oracle: every step recomputes the whole prefix, in float64
                want = greedy_decode(m64, batch, max_new, _BOS, eos, use_cache=False)
            return _Decoding(shape, {k: v.clone() for k, v in m32.state_dict().items()}, batch, max_new, eos, want)
    raise RuntimeError(f"no {family} case {number} found for seed {seed}")  # never met for seeds 0-9


def _one_thread(run: Callable[[Callable, torch.Generator], Verdict]) -> Callable[[Callable, torch.Generator], Verdict]:
    """Run a check on one thread: its tensors are tiny, and a second thread only waits on a busy machine."""

    @functools.wraps(run)
    def wrapped(answer: Callable, g: torch.Generator) -> Verdict:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return run(answer, g)
        finally:
            torch.set_num_threads(threads)

    return wrapped


def _off_limits(what: str) -> Callable:
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"the project asks for your own cache and loop: {what} (the package's cached decoding) "
                           "is off limits")

    return refuse


def _no_cache(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    if kwargs.get("cache") is not None:
        _off_limits(f"calling the package's {type(module).__name__} with a cache")()


def _model_for(case: _Decoding) -> Seq2SeqTransformer:
    """The case's float32 model, with the package's cached decoding switched off (each piece of it raises)."""
    model = _seq2seq(case.shape)
    model.load_state_dict(case.weights)
    model.new_cache = _off_limits("Seq2SeqTransformer.new_cache")
    model.decode_step = _off_limits("Seq2SeqTransformer.decode_step")
    for layer in model.transformer.decoder.layers:
        layer.register_forward_pre_hook(_no_cache, with_kwargs=True)
        for mha in (layer.self_attn, layer.multihead_attn):
            mha.register_forward_pre_hook(_no_cache, with_kwargs=True)
            for method in ("new_cache", "static_cache", "attend"):
                setattr(mha, method, _off_limits(f"MultiHeadAttention.{method}"))
    return model


def _as_ids(got: object) -> torch.Tensor | None:
    """The answer's ids as an int64 tensor (an integer tensor or NumPy array), else None."""
    if isinstance(got, np.ndarray) and got.dtype.kind in "iu":
        got = torch.from_numpy(got)
    if isinstance(got, torch.Tensor) and not got.is_floating_point() and not got.is_complex() \
            and got.dtype != torch.bool:
        return got.long()
    return None


def _state(model: Seq2SeqTransformer) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in (*model.named_parameters(), *model.named_buffers())}


@_one_thread
def _ids_agree(answer, g):  # noqa: ANN001, ANN202
    for family, recipes in _RECIPES.items():
        for number in range(1, len(recipes) + 1):
            case = _decoding(g.initial_seed(), family, number)
            model, src = _model_for(case), case.src.clone()
            kept = _state(model)
            got = answer(model, src, case.max_new, _BOS, case.eos)
            where, ids = case.about(family, number), _as_ids(got)
            if ids is None:
                return f"{where}: the answer should be an integer tensor of token ids, got {describe(got)}"
            if tuple(ids.shape) != tuple(case.want.shape):
                return f"{where}: the ids should have shape {tuple(case.want.shape)} (batch, 1 + steps), got " \
                       f"{tuple(ids.shape)}"
            if not torch.equal(ids, case.want):
                row, position = (ids != case.want).nonzero()[0].tolist()
                return f"{where}: row {row} differs from greedy decoding recomputed in full at position {position}"
            now = _state(model)
            if not torch.equal(src, case.src) or any(not torch.equal(now[k], v) for k, v in kept.items()):
                return f"{where}: the answer changed src or the model's parameters in place"
    return None


class _RowCounter(TorchFunctionMode):
    """Counts the rows each watched weight multiplies. Any tensor operation whose arguments include a watched
    weight, or a slice, transpose or cast of one, adds the rows of its other operand of width ``d``; one with no
    such operand (``w[:d]``, ``w.T``, ``w.double()``) still holds the weight, and is watched in turn."""

    def __init__(self, watched: dict[str, list[torch.Tensor]], d: int) -> None:
        super().__init__()
        self.d, self.rows = d, Counter()
        self._names: dict[int, tuple[frozenset[str], weakref.ref]] = {}
        for name, weights in watched.items():
            for w in weights:
                self._watch(w, frozenset({name}))

    def _watch(self, t: torch.Tensor, names: frozenset[str]) -> None:
        self._names[id(t)] = (names, weakref.ref(t))

    def _of(self, t: torch.Tensor) -> frozenset[str]:
        found = self._names.get(id(t))
        return found[0] if found is not None and found[1]() is t else frozenset()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        tensors = _tensors((args, kwargs))
        names = frozenset().union(*(self._of(t) for t in tensors))
        if names:
            others = [t for t in tensors if not self._of(t) and t.is_floating_point() and self.d in t.shape]
            if others:
                for name in names:
                    self.rows[name] += max(t.numel() for t in others) // self.d
            else:
                for t in _tensors(out):
                    self._watch(t, names)
        return out


def _tensors(x: object) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item)]
    if isinstance(x, dict):
        return [t for item in x.values() for t in _tensors(item)]
    return []


def _rows_seen(answer: Callable, g: torch.Generator) -> tuple[Counter, _Decoding, int]:
    """The rows each decoder layer's self- and cross-attention weights, and the encoder's, multiply while the answer
    decodes typical case 1 (12 steps, no row ends), and how many times the encoder is called."""
    case = _decoding(g.initial_seed(), "typical", 1)
    model = _model_for(case)
    watched = {"encoder": [layer.self_attn.in_proj_weight for layer in model.transformer.encoder.layers]}
    for i, layer in enumerate(model.transformer.decoder.layers):
        watched[f"self {i}"] = [layer.self_attn.in_proj_weight]
        watched[f"cross {i}"] = [layer.multihead_attn.in_proj_weight]
    calls = []
    model.transformer.encoder.register_forward_hook(lambda *_: calls.append(1))
    with _RowCounter(watched, model.d_model) as counter:
        answer(model, case.src.clone(), case.max_new, _BOS, case.eos)
    return counter.rows, case, len(calls)


@_one_thread
def _self_attention_cached(answer, g):  # noqa: ANN001, ANN202
    rows, case, _ = _rows_seen(answer, g)
    batch, steps = case.want.shape[0], case.want.shape[1] - 1
    for i in range(case.shape[4]):
        seen = rows[f"self {i}"]
        if seen == 0:
            return (f"typical inputs: decoder layer {i}'s self-attention weights were never used in a tensor "
                    "operation; work with the model given (not a copy): the check watches its weights")
        if seen > 3 * batch * steps:
            return (f"typical inputs: over {steps} steps of a batch of {batch}, decoder layer {i}'s self-attention "
                    f"projected {seen} rows; a cache needs at most 3 per new token (its query, key and value), "
                    f"{3 * batch * steps} in all: the prefix is projected again")
    return None


@_one_thread
def _memory_once(answer, g):  # noqa: ANN001, ANN202
    rows, case, calls = _rows_seen(answer, g)
    batch, steps, n_src = case.want.shape[0], case.want.shape[1] - 1, case.src.shape[1]
    if calls > 1 or rows["encoder"] > 3 * batch * n_src * case.shape[3]:
        return f"typical inputs: the encoder ran more than once ({calls} calls of the model's encoder)"
    for i in range(case.shape[4]):
        seen, most = rows[f"cross {i}"], 3 * batch * (steps + n_src)
        if seen > most:
            return (f"typical inputs: over {steps} steps, decoder layer {i}'s cross-attention projected {seen} rows; "
                    f"the memory's {batch} × {n_src} keys and values once and one query per new token need at "
                    f"most {most}: the memory is projected again")
    return None


register("5.5", "greedy decoding with your own key/value cache", "project", "greedy_decode_cached", [
    Check("the ids equal greedy decoding recomputed in full at every step (float64): typical models, attention "
          "scores and logits above 100, a 24-step decode, a padded batch of 3 whose rows end at different steps, "
          "one source token, max_new = 1; src and the model left as they were", _ids_agree),
    Check("the cache is used: each step, each decoder layer's self-attention projects the new token's query, key "
          "and value, not the prefix", _self_attention_cached),
    Check("the encoder runs once, and each decoder layer's cross-attention projects the memory's keys and values "
          "once", _memory_once),
])
