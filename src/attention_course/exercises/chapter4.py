"""Chapter 4's exercises: multi-head attention (checks only; the solutions live in ``solutions/ch04.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import describe
from .checking import Check, Verdict, agrees, changed_inputs, compare, compare_count, randn, register

__all__: list[str] = []


def _split64(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, n, d_model = x.shape
    return x.reshape(batch, n, heads, d_model // heads).transpose(1, 2)


def _split_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(randn(g, 2, 5, 12), 3), (randn(g, 3, 4, 16), 4)],
            # one head; as many heads as features; an x that is a transposed view (strided in memory)
            "extreme": [(randn(g, 2, 3, 8), 1), (randn(g, 2, 3, 8), 8), (randn(g, 2, 12, 6).transpose(1, 2), 2)],
            "unusual shapes": [(randn(g, 1, 7, 16), 4), (randn(g, 4, 1, 15), 5), (randn(g, 1, 1, 9), 3)]}


register("4.1", "split the model width into heads", "build", "split_heads", [
    agrees("(batch, n, d_model) → (batch, heads, n, d_model / heads), head i holding features i·d_h to (i+1)·d_h: "
           "one head to one feature per head, a strided x, one batch row, one token, odd widths",
           _split_cases, _split64, atol=0),
])


def _mha64(x, in_w, in_b, out_w, out_b, heads):  # noqa: ANN001, ANN202
    d = x.shape[-1]
    out, _ = F.multi_head_attention_forward(
        x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), d, heads, in_w, in_b, None, None, False, 0.0,
        out_w, out_b, training=False, need_weights=False)
    return out.transpose(0, 1)


def _mha_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    def case(batch: int, n: int, d: int, heads: int, scale: float = 1.0) -> tuple:
        return (randn(g, batch, n, d) * scale, randn(g, 3 * d, d) / d**0.5, randn(g, 3 * d), randn(g, d, d) / d**0.5,
                randn(g, d), heads)

    return {"typical": [case(2, 5, 8, 2), case(2, 5, 12, 4)],
            "extreme": [case(2, 6, 8, 2, scale=100.0), case(1, 4, 16, 4, scale=40.0)],  # scores in the thousands
            "unusual shapes": [case(1, 1, 6, 3), case(3, 4, 6, 1), case(2, 3, 6, 6), case(2, 5, 15, 5)]}


register("4.2", "multi-head attention from nn.MultiheadAttention's weights", "build", "mha_forward", [
    agrees("equals nn.MultiheadAttention (batch first, self-attention, no mask) given its in_proj and out_proj: "
           "typical, scores in the thousands, one token, one head, one feature per head, odd head widths",
           _mha_cases, _mha64, atol=1e-4, rtol=1e-4),
])

_FLOP_CASES = {"typical": [(16, 32, 4), (10, 24, 1)],
               "extreme": [(4096, 4096, 32), (8192, 8192, 64)],  # counts past 2³¹
               "unusual shapes": [(1, 8, 8), (7, 63, 9), (5, 64, 64)]}


def _counts_like_flop_counter(answer, g):  # noqa: ANN001, ANN202
    from torch.utils.flop_counter import FlopCounterMode

    for family, cases in _FLOP_CASES.items():
        for n, d_model, heads in cases:
            q = torch.zeros(heads, n, d_model // heads, device="meta")  # shapes only: nothing is computed
            with FlopCounterMode(display=False) as counter:
                torch.matmul(q, q.transpose(-2, -1))
            verdict = compare_count(answer(n, d_model, heads), counter.get_total_flops(), what="(a count of FLOPs)",
                                    where=f"{family} inputs n = {n}, d_model = {d_model}, heads = {heads}")
            if verdict:
                return verdict
    return None


register("4.3", "what the heads' scores cost", "measure", "score_flops", [
    Check("an integer equal to FlopCounterMode's count of every head's Q Kᵀ: small sizes, counts past 2³¹, one "
          "token, one feature per head", _counts_like_flop_counter),
])


def _gqa_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    def case(batch: int, heads: int, kv_heads: int, n_q: int, n_k: int, d: int, d_v: int | None = None,
             scale: float = 1.0) -> tuple:
        return (randn(g, batch, heads, n_q, d) * scale, randn(g, batch, kv_heads, n_k, d),
                randn(g, batch, kv_heads, n_k, d_v or d))

    return {"typical": [case(2, 4, 2, 5, 6, 8), case(1, 6, 3, 3, 3, 4)],
            "extreme": [case(1, 4, 2, 5, 7, 8, scale=300.0), case(2, 8, 2, 3, 4, 16, scale=80.0)],
            # groups of 1 (every head its own), 3 and 4 (one key-value head), n_q ≠ n_k, one key, odd widths
            "unusual shapes": [case(1, 3, 3, 4, 2, 5), case(2, 6, 2, 1, 7, 3, d_v=5), case(1, 4, 1, 3, 1, 8),
                               case(3, 9, 3, 2, 5, 7, d_v=1)]}


register("4.4", "grouped-query attention", "build", "grouped_query_attention", [
    agrees("query head h reads key–value head h // (heads / kv_heads): groups of 1, 2, 3 and 4, scores in the "
           "hundreds, n_q ≠ n_k, one key, odd widths", _gqa_cases,
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), atol=1e-4, rtol=1e-4),
])


# ------------------------------------------------------------------------------------------ 4.5, the project
_MHA_PARAMETERS = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")
#: What the module may not call (PyTorch's own multi-head attention and fused attention, as functions).
_MHA_FORBIDDEN = ("multi_head_attention_forward", "scaled_dot_product_attention", "_native_multi_head_attention")


class _MhaCase(NamedTuple):
    """One call of the learner's module: its sizes, the weights loaded into it and the forward pass's arguments
    (``key is query is value`` for self-attention)."""

    embed_dim: int
    heads: int
    state: dict[str, torch.Tensor]
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    key_padding_mask: torch.Tensor | None = None
    attn_mask: torch.Tensor | None = None

    def inputs(self) -> list[torch.Tensor]:
        """The distinct tensors the forward pass receives (one for self-attention's three)."""
        found: list[torch.Tensor] = []
        for t in (self.query, self.key, self.value, self.key_padding_mask, self.attn_mask):
            if t is not None and not any(t is s for s in found):
                found.append(t)
        return found

    def options(self, need_weights: bool = True) -> dict:
        """The keyword arguments of the call: only the masks given, and need_weights only when False."""
        given = {"key_padding_mask": self.key_padding_mask, "attn_mask": self.attn_mask}
        return {name: m for name, m in given.items() if m is not None} | ({} if need_weights else
                                                                           {"need_weights": False})

    def about(self) -> str:
        batch, n_q, _ = self.query.shape
        kind = "self-attention" if self.key is self.query else f"n_k = {self.key.shape[1]}"
        masks = [f"{'boolean' if m.dtype == torch.bool else 'float'} {name}" for name, m in
                 (("key_padding_mask", self.key_padding_mask), ("attn_mask", self.attn_mask)) if m is not None]
        return ", ".join([f"embed_dim = {self.embed_dim}, heads = {self.heads}, batch = {batch}, n_q = {n_q}", kind,
                          *masks])

    def double(self, *, requires_grad: bool = False) -> _MhaCase:
        """The case in float64 (self-attention stays one tensor), inputs that require grad if asked."""
        made: dict[int, torch.Tensor] = {}

        def to64(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None or not t.is_floating_point():
                return t
            if id(t) not in made:
                made[id(t)] = t.detach().double().requires_grad_(requires_grad and t.ndim == 3)
            return made[id(t)]

        return self._replace(state={k: v.double() for k, v in self.state.items()}, query=to64(self.query),
                             key=to64(self.key), value=to64(self.value), attn_mask=to64(self.attn_mask))


def _mha_case(g: torch.Generator, batch: int, n_q: int, n_k: int, d: int, heads: int, *, spread: float = 1.0,
              self_attention: bool = False, padding: list[int] | None = None, mask: str | None = None) -> _MhaCase:
    """Weights drawn like a trained module's (projections ~ 1/√d, biases of size ~ 0.5) and inputs of size
    ``spread``; ``padding``: how many keys at the end of each batch row are padding; ``mask``: an attn_mask,
    "bool" (random, True = may not attend), "causal", "float" (a random bias) or "rows" (a bias whose rows are
    shifted by thousands). Every query keeps at least one key it may attend to."""
    state = {"in_proj_weight": randn(g, 3 * d, d) / d**0.5, "in_proj_bias": randn(g, 3 * d) / 2,
             "out_proj.weight": randn(g, d, d) / d**0.5, "out_proj.bias": randn(g, d) / 2}
    query = randn(g, batch, n_q, d) * spread
    key, value = (query, query) if self_attention else (randn(g, batch, n_k, d) * spread, randn(g, batch, n_k, d))
    pad = None
    if padding is not None:
        pad = torch.arange(n_k) >= n_k - torch.tensor(padding)[:, None]  # (batch, n_k), True = a padded key
    free = n_k - max(padding or [0])  # keys 0 .. free - 1 are real in every row
    attn = None
    if mask == "bool":
        attn = torch.rand(n_q, n_k, generator=g) < 0.5
        attn[torch.arange(n_q), torch.randint(0, free, (n_q,), generator=g)] = False
    elif mask == "causal":
        attn = torch.ones(n_q, n_k, dtype=torch.bool).triu(1)
    elif mask == "float":
        attn = randn(g, n_q, n_k) * 3
    elif mask == "rows":
        attn = randn(g, n_q, n_k) + randn(g, n_q, 1) * 3000
    return _MhaCase(d, heads, state, query, key, value, pad, attn)


def _mha_typical(g: torch.Generator) -> list[_MhaCase]:
    return [_mha_case(g, 2, 5, 5, 8, 2, self_attention=True), _mha_case(g, 2, 4, 6, 12, 3),
            _mha_case(g, 3, 6, 6, 16, 4)]


def _mha_extreme(g: torch.Generator) -> list[_MhaCase]:
    return [_mha_case(g, 2, 5, 5, 8, 2, spread=12.0, self_attention=True),  # scores in the hundreds
            _mha_case(g, 1, 4, 7, 16, 4, spread=25.0),
            _mha_case(g, 2, 5, 6, 8, 2, mask="rows")]  # rows of scores shifted by thousands


def _mha_unusual(g: torch.Generator) -> list[_MhaCase]:
    return [_mha_case(g, 1, 7, 3, 8, 2),  # batch 1, n_q > n_k
            _mha_case(g, 2, 4, 1, 8, 4),  # one key
            _mha_case(g, 3, 5, 5, 6, 1, self_attention=True),  # one head
            _mha_case(g, 2, 3, 4, 6, 6),  # as many heads as features: d_h = 1
            _mha_case(g, 2, 1, 5, 15, 5)]  # one query, odd widths


def _mha_masked(g: torch.Generator) -> list[_MhaCase]:
    return [_mha_case(g, 2, 4, 6, 8, 2, mask="bool"), _mha_case(g, 2, 4, 6, 8, 2, mask="float"),
            _mha_case(g, 3, 4, 6, 12, 3, padding=[0, 2, 4]),  # different padding per row
            _mha_case(g, 3, 6, 6, 8, 4, self_attention=True, padding=[1, 3, 0], mask="causal"),
            _mha_case(g, 2, 5, 7, 6, 3, padding=[2, 0], mask="bool")]


def _mha_without_weights(g: torch.Generator) -> list[_MhaCase]:
    return [_mha_case(g, 2, 4, 6, 8, 2, padding=[0, 3], mask="bool"), _mha_case(g, 1, 7, 3, 8, 2),
            _mha_case(g, 2, 5, 5, 6, 3, self_attention=True, mask="causal")]


def _mha64(case: _MhaCase, need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None, float]:
    """The float64 oracle, live: nn.MultiheadAttention holding the case's weights (in training mode, which has no
    dropout here and keeps off its inference fast path), and the largest score |q·k/√d_h + attn_mask|."""
    case = case.double()
    ref = nn.MultiheadAttention(case.embed_dim, case.heads, batch_first=True, dtype=torch.float64)
    ref.load_state_dict(case.state)
    with torch.no_grad():
        out, weights = ref(case.query, case.key, case.value, **case.options(need_weights))
    (w_q, w_k, _), (b_q, b_k, _) = case.state["in_proj_weight"].chunk(3), case.state["in_proj_bias"].chunk(3)
    q, k = ((x @ w.T + b).unflatten(-1, (case.heads, -1)).transpose(1, 2)
            for x, w, b in ((case.query, w_q, b_q), (case.key, w_k, b_k)))
    scores = q @ k.transpose(-2, -1) / math.sqrt(case.embed_dim // case.heads)
    if case.attn_mask is not None and case.attn_mask.is_floating_point():
        scores = scores + case.attn_mask
    return out, weights, float(scores.abs().max())


def _loaded(answer, case: _MhaCase) -> nn.Module | str:  # noqa: ANN001
    """The answer's module for the case's sizes, holding its weights; or why there is none."""
    module = answer(case.embed_dim, case.heads)
    if not isinstance(module, nn.Module):
        return f"make_mha({case.embed_dim}, {case.heads}) should return an nn.Module, got {describe(module)}"
    try:
        module.load_state_dict(case.state)
    except (RuntimeError, KeyError, ValueError) as error:
        return f"load_state_dict of nn.MultiheadAttention's state_dict failed: {str(error)[:160]}"
    return module


def _mha_compare(got: object, out64: torch.Tensor, weights64: torch.Tensor | None, largest: float) -> Verdict:
    """The answer's (output, weights) against the oracle's, at a float32 tolerance that grows with the scores."""
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        return f"the forward pass should return a pair (output, weights), got {describe(got)}"
    out, weights = (t.detach() if isinstance(t, torch.Tensor) else t for t in got)
    # float32 rounds each score to ~6e-8 of its size, and the weights inherit that absolute error
    tol = 5e-5 * (1 + largest / 50)
    if verdict := compare(out, out64, atol=tol * (1 + float(out64.abs().max())), what="the output"):
        return verdict if verdict.startswith("the output") else f"the output: {verdict}"
    if weights64 is None:
        return None if weights is None else f"the weights should be None, got {describe(weights)}"
    if verdict := compare(weights, weights64, atol=tol, what="the weights (averaged over the heads)"):
        return verdict if verdict.startswith("the weights") else f"the weights: {verdict}"
    return None


def _mha_agrees(cases: Callable[[torch.Generator], list[_MhaCase]], family: str, *,
                need_weights: bool = True) -> Callable:
    def run(answer, g):  # noqa: ANN001, ANN202
        for number, case in enumerate(cases(g), 1):
            where = f"{family} inputs, case {number} ({case.about()}" + ("" if need_weights else
                                                                         ", need_weights=False") + ")"
            module = _loaded(answer, case)
            if isinstance(module, str):
                return f"{where}: {module}"
            inputs = case.inputs()
            kept = [t.clone() for t in inputs]
            try:
                got = module(case.query, case.key, case.value, **case.options(need_weights))
            except NotImplementedError:
                raise
            except Exception as error:  # noqa: BLE001 -- the learner's error is the check's finding, in its family
                return f"{where}: raised {type(error).__name__}: {str(error)[:200]}"
            verdict = _mha_compare(got, *_mha64(case, need_weights))
            if verdict is None and changed_inputs(inputs, kept):
                verdict = "the answer changed its inputs in place"
            if verdict:
                return f"{where}: {verdict}"
        return None

    return run


def _mha_state_dict(answer, g):  # noqa: ANN001, ANN202
    """state_dict's names and shapes are nn.MultiheadAttention's, all four are parameters, and loading its
    state_dict (strict) puts its values there."""
    for d, heads in ((8, 2), (12, 3), (6, 6), (5, 1), (15, 5)):
        ref = nn.MultiheadAttention(d, heads, batch_first=True)
        module = answer(d, heads)
        made = f"make_mha({d}, {heads})"
        if not isinstance(module, nn.Module):
            return f"{made} should return an nn.Module, got {describe(module)}"
        got = {name: tuple(t.shape) for name, t in module.state_dict().items()}
        want = {name: tuple(t.shape) for name, t in ref.state_dict().items()}
        if set(got) != set(want):
            missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
            return f"{made}.state_dict() lacks {missing or 'nothing'} and has {extra or 'nothing'} besides"
        if wrong := [f"{name} is {got[name]}, not {want[name]}" for name in want if got[name] != want[name]]:
            return f"{made}.state_dict(): {'; '.join(wrong)}"
        if buffers := sorted(set(want) - {name for name, _ in module.named_parameters()}):
            return f"{made}: {', '.join(buffers)} must be parameters (nn.Parameter), to be trained and get gradients"
        state = {name: randn(g, *t.shape) for name, t in ref.state_dict().items()}
        module.load_state_dict(state)
        if not all(torch.equal(module.state_dict()[name], t) for name, t in state.items()):
            return f"{made}: after load_state_dict, its state_dict does not hold the values loaded"
    return None


def _mha_backward_cases(g: torch.Generator) -> list[_MhaCase]:
    return [_mha_case(g, 2, 5, 5, 8, 2, self_attention=True),
            _mha_case(g, 2, 3, 6, 12, 3, padding=[0, 2], mask="bool"),
            _mha_case(g, 1, 4, 2, 6, 6, mask="float")]


def _mha_gradients(answer, g):  # noqa: ANN001, ANN202
    """In float64 (the module after .double()), the gradients of a random linear function of the output and the
    weights, with respect to the inputs and the four parameters, equal nn.MultiheadAttention's."""
    for number, case in enumerate(_mha_backward_cases(g), 1):
        where = f"case {number} ({case.about()}, float64)"
        case = case.double(requires_grad=True)
        module = answer(case.embed_dim, case.heads)
        if not isinstance(module, nn.Module):
            return f"{where}: make_mha should return an nn.Module, got {describe(module)}"
        module.double().load_state_dict(case.state)
        ref = nn.MultiheadAttention(case.embed_dim, case.heads, batch_first=True, dtype=torch.float64)
        ref.load_state_dict(case.state)
        leaves = [t for t in case.inputs() if t.requires_grad]
        batch, n_q, d = case.query.shape
        r_out = randn(g, batch, n_q, d).double()
        r_weights = randn(g, batch, n_q, case.key.shape[1]).double()
        found = []
        for m in (module, ref):
            params = dict(m.named_parameters())
            with torch.enable_grad():
                out, weights = m(case.query, case.key, case.value, **case.options())
                loss = (out * r_out).sum() + (weights * r_weights).sum()
                if not loss.requires_grad:
                    return f"{where}: neither the output nor the weights depend on the inputs through autograd"
                wrt = [*leaves, *(params[name] for name in _MHA_PARAMETERS)]
                found.append(torch.autograd.grad(loss, wrt, allow_unused=True))
        names = ["query"] if case.key is case.query else ["query", "key", "value"]
        for name, got, want in zip([*names, *_MHA_PARAMETERS], *found, strict=True):
            if got is None:
                return f"{where}: no gradient reaches {name}"
            if verdict := compare(got, want, atol=1e-9 * (1 + float(want.abs().max())), what=f"∂L/∂{name}"):
                return f"{where}: ∂L/∂{name}: {verdict}"
    return None


def _mha_plain(answer, g):  # noqa: ANN001, ANN202
    """No nn.MultiheadAttention (or the package's module) inside, and no call to PyTorch's attention functions:
    a torch-function mode (a hook that sees each torch function called) watches both kinds of forward pass."""
    from torch.overrides import TorchFunctionMode

    from ..multihead import MultiHeadAttention

    case = _mha_case(g, 2, 4, 6, 8, 2, padding=[0, 2])
    module = _loaded(answer, case)
    if isinstance(module, str):
        return module
    for m in module.modules():
        for kind, about in ((nn.MultiheadAttention, "PyTorch's nn.MultiheadAttention"),
                            (MultiHeadAttention, "the package's MultiHeadAttention")):
            if isinstance(m, kind):
                return (f"the module is or holds {about} (a {type(m).__name__}): the project is to write its "
                        "computation")
    called: list[str] = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            called.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with Watch():
        for need_weights in (True, False):
            module(case.query, case.key, case.value, **case.options(need_weights))
    if used := sorted(set(called) & set(_MHA_FORBIDDEN)):
        return f"the forward pass called {', '.join(used)}"
    return None


register("4.5", "a multi-head attention module that loads nn.MultiheadAttention's weights", "project", "make_mha", [
    Check("make_mha(embed_dim, num_heads) returns an nn.Module whose state_dict has nn.MultiheadAttention's names "
          "and shapes, as parameters, and which loads its state_dict", _mha_state_dict),
    Check("forward returns nn.MultiheadAttention's output and head-averaged weights (float64 oracle), leaving "
          "the inputs unchanged: typical self- and cross-attention", _mha_agrees(_mha_typical, "typical")),
    Check("the same with scores in the hundreds, and rows of scores shifted by thousands (a float attn_mask)",
          _mha_agrees(_mha_extreme, "extreme")),
    Check("the same with batch 1, n_q ≠ n_k, one key, one query, one head, as many heads as features, odd widths",
          _mha_agrees(_mha_unusual, "unusual shapes")),
    Check("the same with a boolean and a float attn_mask, key_padding_mask padding each row differently, and both "
          "masks at once", _mha_agrees(_mha_masked, "masks")),
    Check("need_weights=False returns (the same output, None)",
          _mha_agrees(_mha_without_weights, "need_weights=False", need_weights=False)),
    Check("backward in float64: the gradients with respect to query, key, value and the four parameters equal "
          "nn.MultiheadAttention's", _mha_gradients),
    Check("plain tensor operations: no nn.MultiheadAttention inside, no call to F.multi_head_attention_forward or "
          "F.scaled_dot_product_attention", _mha_plain),
])
