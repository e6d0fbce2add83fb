"""Chapter 3's exercises: the roles of Q, K and V (checks only; the solutions live in ``solutions/ch03.py``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .._checks import describe
from ..attention import scaled_dot_product_attention
from .checking import Check, agrees, as_values, changed_inputs, compare, randn, register

__all__: list[str] = []


def _cross64(x_dec, x_enc, w_q, w_k, w_v):  # noqa: ANN001, ANN202
    return scaled_dot_product_attention(x_dec @ w_q, x_enc @ w_k, x_enc @ w_v).output


def _cross_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    def case(n_tgt: int, n_src: int, d_model: int, d_k: int, d_v: int, scale: float = 1.0) -> tuple:
        return (randn(g, n_tgt, d_model) * scale, randn(g, n_src, d_model), randn(g, d_model, d_k),
                randn(g, d_model, d_k), randn(g, d_model, d_v))

    return {"typical": [case(3, 7, 8, 4, 5), case(6, 2, 16, 8, 8)],
            # decoder states that large make scores in the thousands: exp overflows unless each row's max goes
            "extreme": [case(4, 9, 8, 4, 3, scale=200.0), case(5, 5, 6, 2, 2, scale=60.0)],
            "unusual shapes": [case(1, 1, 5, 3, 1), case(7, 1, 3, 1, 4), case(2, 11, 9, 7, 3)]}


register("3.1", "cross-attention, wired correctly", "build", "cross_attention", [
    agrees("queries from the decoder, keys and values from the encoder: one output row per target token "
           "(typical, scores in the thousands, one source or target token, odd widths)",
           _cross_cases, _cross64, atol=1e-4, rtol=1e-4),
])


#: (d_model, d, scale of the first matrix, scale of the second) per family: the sizes of the weight pairs of 3.2
#: and 3.4; the last has d > d_model
_PAIR_SIZES = {"typical": [(8, 3, 1, 1), (6, 6, 1, 1)],
               "extreme": [(8, 4, 300, 300), (16, 2, 1e-3, 1)],
               "unusual shapes": [(1, 1, 1, 1), (5, 1, 1, 1), (3, 7, 1, 1)]}


def _weight_pairs(g: torch.Generator, second_transposed: bool) -> dict[str, list[tuple]]:
    """Pairs (W^Q, W^K), both ``(d_model, d_k)``, or with ``second_transposed`` (W^V, W^O), ``(d_model, d_v)`` and
    ``(d_v, d_model)``."""
    def pair(d_model: int, d: int, a: float, b: float) -> tuple[torch.Tensor, torch.Tensor]:
        first, second = randn(g, d_model, d) * a, randn(g, d_model, d) * b
        return first, second.T.contiguous() if second_transposed else second

    return {family: [pair(*size) for size in sizes] for family, sizes in _PAIR_SIZES.items()}


def _factor_pairs(g: torch.Generator) -> dict[str, list[tuple]]:
    return _weight_pairs(g, second_transposed=False)


def _swap_transposes(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _factor_pairs(g).items():
        for w_q, w_k in cases:
            a, b = (as_values(answer(*pair), w_q) for pair in ((w_q.clone(), w_k.clone()), (w_k.clone(), w_q.clone())))
            if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
                return f"{family} inputs: the answer should be a tensor, got {describe(a)}"
            x = randn(g, 5, w_q.shape[0]).to(a.dtype)  # the property, in the answer's own dtype
            verdict = compare(x @ b.to(a.dtype) @ x.T, (x @ a @ x.T).T, atol=1e-4, rtol=1e-4,
                              what="the scores with W^Q and W^K swapped")
            if verdict:
                return f"{family} inputs {tuple(w_q.shape)}: {verdict}"
    return None


register("3.2", "the bilinear form of the scores", "build", "bilinear_form", [
    agrees("W^{QK} with x_i W^{QK} x_jᵀ = q_i · k_j: d_k below, equal to and above d_model, weights in the "
           "hundreds and in the thousandths", _factor_pairs, lambda w_q, w_k: w_q @ w_k.T, atol=1e-5, rtol=1e-5),
    Check("swapping W^Q and W^K transposes the scores", _swap_transposes),
])


def _psd(g: torch.Generator, d: int, rank: int, scale: float = 1.0) -> torch.Tensor:
    a = randn(g, d, rank) * scale
    return a @ a.T


def _forms(g: torch.Generator) -> dict[str, list[torch.Tensor]]:
    return {"typical": [_psd(g, 4, 4), _psd(g, 6, 6)],
            # rank-deficient (no Cholesky factor), huge and tiny entries
            "extreme": [_psd(g, 6, 2), _psd(g, 5, 1), _psd(g, 4, 4, scale=100.0), _psd(g, 4, 3, scale=1e-3)],
            "unusual shapes": [_psd(g, 1, 1), torch.zeros(3, 3), _psd(g, 7, 7)]}


def _factor_reconstructs(answer, g):  # noqa: ANN001, ANN202
    for family, forms in _forms(g).items():
        for w_qk in forms:
            d = w_qk.shape[0]
            w = as_values(answer(w_qk.clone()), w_qk)
            if not isinstance(w, torch.Tensor) or w.ndim != 2 or w.shape[0] != d:
                return f"{family} inputs: for W^{{QK}} of shape ({d}, {d}) the answer should be a ({d}, r) " \
                       f"tensor, got {describe(w)}"
            # float32 round-off in W^{QK} itself is about 1e-7 of its largest entry; allow ten times more
            tolerance = 1e-5 * max(float(w_qk.abs().max()), 1e-30)
            verdict = compare(w.double() @ w.double().T, w_qk.double(), atol=tolerance, what="W Wᵀ")
            if verdict:
                return f"{family} inputs, W^{{QK}} of size {d} and rank {int(torch.linalg.matrix_rank(w_qk))}: " \
                       f"{verdict}"
    return None


def _inputs_kept(answer, g):  # noqa: ANN001, ANN202
    w_qk = _psd(g, 5, 2)
    kept = w_qk.clone()
    answer(w_qk)
    return None if torch.equal(w_qk, kept) else "the answer changed its input in place"


register("3.3", "a symmetric positive semi-definite form as a tied W^Q = W^K", "derive", "tied_factor", [
    Check("returns W with W Wᵀ = W^{QK}: full rank, rank-deficient, entries from 10⁻⁶ to 10⁵, sizes 1 to 7, "
          "the zero form", _factor_reconstructs),
    Check("leaves W^{QK} as it was", _inputs_kept),
])


def _ov_pairs(g: torch.Generator) -> dict[str, list[tuple]]:
    return _weight_pairs(g, second_transposed=True)


def _ov_same_output(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _ov_pairs(g).items():
        for w_v, w_o in cases:
            x = randn(g, 6, w_v.shape[0])
            weights = torch.softmax(randn(g, 4, 6), -1)
            w_ov = as_values(answer(w_v.clone(), w_o.clone()), w_v)
            if not isinstance(w_ov, torch.Tensor):
                return f"{family} inputs: the answer should be a tensor, got {describe(w_ov)}"
            want = (weights.double() @ (x.double() @ w_v.double())) @ w_o.double()
            weights, x = weights.to(w_ov.dtype), x.to(w_ov.dtype)  # the property, in the answer's own dtype
            verdict = compare(weights @ x @ w_ov, want, atol=1e-4, rtol=1e-4, what="A X W^{OV}")
            if verdict:
                return f"{family} inputs W^V {tuple(w_v.shape)}: {verdict}"
    return None


register("3.4", "the OV circuit: values and output in one matrix", "build", "ov_circuit", [
    agrees("equals the reference W^{OV}, d_model × d_model: d_v below, equal to and above d_model, weights in "
           "the hundreds and in the thousandths", _ov_pairs, lambda w_v, w_o: w_v @ w_o, atol=1e-5, rtol=1e-5),
    Check("A (X W^V) W^O = A X W^{OV} for attention weights A", _ov_same_output),
])


# ------------------------------------------------------------------------------ project 3.5: the decoder's block
_LN_EPS = 1e-5
_WEIGHTS = ("w_q", "w_k", "w_v", "w_o")
_FORBIDDEN = ("scaled_dot_product_attention", "multi_head_attention_forward")


def _block_params(g: torch.Generator, d_model: int, qk_scale: float = 1.0) -> dict[str, torch.Tensor]:
    """W^Q, W^K, W^V, W^O (d_model, d_model) acting on row vectors, their biases, and a LayerNorm's weight and bias.
    Scores are about ``qk_scale²`` in size (decoder and encoder states of unit size)."""
    params = {name: randn(g, d_model, d_model) / d_model ** 0.5 for name in _WEIGHTS}
    params["w_q"], params["w_k"] = params["w_q"] * qk_scale, params["w_k"] * qk_scale
    params.update({f"b_{x}": randn(g, d_model) / 2 for x in "qkvo"})
    params["ln_weight"], params["ln_bias"] = 1 + randn(g, d_model) / 5, randn(g, d_model) / 5
    return params


def _src_key_mask(g: torch.Generator, n_src: int, real: list[int], scattered: bool) -> torch.Tensor:
    """(batch, n_src), True = a real source token: ``real[b]`` of them in row b, at the start or (``scattered``)
    anywhere."""
    rows = [torch.arange(n_src) < r for r in real]
    if scattered:
        rows = [row[torch.randperm(n_src, generator=g)] for row in rows]
    return torch.stack(rows)


def _block_case(g: torch.Generator, n_tgt: int, n_src: int, d_model: int, heads: int, real: list[int], *,
                qk_scale: float = 1.0, enc_scale: float = 1.0, scattered: bool = False) -> tuple:
    return (randn(g, len(real), n_tgt, d_model), randn(g, len(real), n_src, d_model) * enc_scale,
            _src_key_mask(g, n_src, real, scattered), _block_params(g, d_model, qk_scale), heads)


def _block_cases(g: torch.Generator) -> dict[str, list[tuple]]:
    return {
        # batch == heads in the second: a mask lined up with the heads instead of the batch still broadcasts
        "typical": [_block_case(g, 5, 7, 8, 2, [7, 4]), _block_case(g, 4, 6, 12, 3, [6, 2, 5], scattered=True)],
        "extreme": [_block_case(g, 4, 9, 8, 2, [9, 5], qk_scale=20.0),  # scores in the hundreds
                    # scores in the thousands: rows whose maxima differ by more than 1000
                    _block_case(g, 3, 6, 6, 3, [3, 6], qk_scale=45.0, scattered=True),
                    # large encoder states: scores in the hundreds, and the attention outweighs the residual
                    _block_case(g, 5, 5, 8, 4, [5, 1], enc_scale=30.0)],
        "unusual shapes": [_block_case(g, 3, 1, 6, 2, [1, 1]),  # one source token
                           _block_case(g, 1, 8, 10, 5, [8, 3, 1], scattered=True),  # one target token
                           _block_case(g, 6, 4, 7, 1, [3], scattered=True),  # one head, a batch of one
                           _block_case(g, 3, 5, 5, 5, [5, 2]),  # heads = d_model: heads of width 1
                           _block_case(g, 2, 7, 15, 5, [4, 7])],  # heads of width 3
    }


def _block64(x_dec, x_enc, src_key_mask, params, heads):  # noqa: ANN001, ANN202
    """The oracle, float64: PyTorch's multi-head attention (padding given as True = pad), the residual, then
    LayerNorm (post-LN, the paper's decoder)."""
    p = {name: t.double() for name, t in params.items()}
    x, memory = x_dec.double().transpose(0, 1), x_enc.double().transpose(0, 1)  # (n, batch, d_model)
    d_model = x.shape[-1]
    attn, _ = F.multi_head_attention_forward(
        x, memory, memory, d_model, heads, torch.cat([p["w_q"].T, p["w_k"].T, p["w_v"].T]),
        torch.cat([p["b_q"], p["b_k"], p["b_v"]]), None, None, False, 0.0, p["w_o"].T, p["b_o"],
        training=False, key_padding_mask=~src_key_mask, need_weights=False)
    return F.layer_norm(x_dec.double() + attn.transpose(0, 1), (d_model,), p["ln_weight"], p["ln_bias"], _LN_EPS)


def _kept(args: tuple) -> tuple:
    """Clones of a case's tensors, the params dict's included."""
    return tuple({k: v.clone() for k, v in a.items()} if isinstance(a, dict) else
                 a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _changed(args: tuple, kept: tuple) -> bool:
    for a, b in zip(args, kept, strict=True):
        if isinstance(a, dict):
            if set(a) != set(b) or changed_inputs([a[k] for k in b], list(b.values())):
                return True
        elif changed_inputs([a], [b]):
            return True
    return False


def _shapes(args: tuple) -> str:
    x_dec, x_enc, _, _, heads = args
    return f"x_dec {tuple(x_dec.shape)}, x_enc {tuple(x_enc.shape)}, heads = {heads}"


def _block_values(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _block_cases(g).items():
        for number, args in enumerate(cases, 1):
            kept = _kept(args)
            # the output is LayerNorm's, of unit size: float32 round-off reaches ~1e-6, ~1e-5 at scores in the
            # thousands (100 seeds, with and without ATEN_CPU_CAPABILITY=default); wrong answers are off by 1e-2 or more
            verdict = compare(answer(*args), _block64(*kept), atol=5e-4, rtol=5e-4)
            if verdict is None and _changed(args, kept):
                verdict = "the answer changed its inputs in place (a tensor, or an entry of params)"
            if verdict:
                return f"{family} inputs, case {number} ({_shapes(kept)}): {verdict}"
    return None


def _padding_ignored(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _block_cases(g).items():
        for number, (x_dec, x_enc, mask, params, heads) in enumerate(cases, 1):
            if bool(mask.all()):
                continue
            got = as_values(answer(x_dec, x_enc.clone(), mask, params, heads), x_dec)
            if not isinstance(got, torch.Tensor):
                return f"{family} inputs: the answer should be a tensor, got {describe(got)}"
            # new, large states at the padded positions: they would take every weight if they were attended to
            other = torch.where(mask[..., None], x_enc, randn(g, *x_enc.shape) * 100)
            verdict = compare(answer(x_dec, other, mask, params, heads), got.detach(), atol=1e-5, rtol=1e-5,
                              what="the output after the padded encoder rows change")
            if verdict:
                return f"{family} inputs, case {number} ({_shapes((x_dec, x_enc, mask, params, heads))}): {verdict}"
    return None


def _targets_apart(answer, g):  # noqa: ANN001, ANN202
    for family, cases in _block_cases(g).items():
        for number, (x_dec, x_enc, mask, params, heads) in enumerate(cases, 1):
            n_tgt = x_dec.shape[1]
            if n_tgt == 1:
                continue
            got = as_values(answer(x_dec.clone(), x_enc, mask, params, heads), x_dec)
            if not isinstance(got, torch.Tensor) or got.ndim != 3 or tuple(got.shape[:2]) != tuple(x_dec.shape[:2]):
                return f"{family} inputs: the answer should be a (batch, n_tgt, d_model) tensor, got {describe(got)}"
            kept = n_tgt // 2  # the other target rows are redrawn (the first of them a hundred times larger)
            other = randn(g, *x_dec.shape) * torch.where(torch.arange(n_tgt) == 0, 100.0, 1.0)[:, None]
            other[:, kept] = x_dec[:, kept]
            again = as_values(answer(other, x_enc, mask, params, heads), x_dec)
            if not isinstance(again, torch.Tensor) or again.shape != got.shape:
                return f"{family} inputs: the answer should be a tensor of shape {tuple(got.shape)}, got " \
                       f"{describe(again)}"
            verdict = compare(again[:, kept], got[:, kept].detach(), atol=1e-5, rtol=1e-5,
                              what=f"target row {kept}'s output after the other target rows change")
            if verdict:
                return f"{family} inputs, case {number} ({_shapes((x_dec, x_enc, mask, params, heads))}): {verdict}"
    return None


class _Calls(TorchFunctionMode):
    """Records which torch functions an answer calls."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.add(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


def _no_attention_call(answer, g):  # noqa: ANN001, ANN202
    args = _block_case(g, 4, 6, 8, 2, [6, 3])
    with _Calls() as calls:
        answer(*args)
    used = sorted(calls.names & set(_FORBIDDEN))
    return f"the answer calls {', '.join(used)}: build the attention from tensor operations" if used else None


register("3.5", "the decoder's cross-attention block, wired from its parts", "project", "cross_attention_block", [
    Check("equals float64 multi-head cross-attention with source padding, plus the residual, then LayerNorm "
          "(post-LN): typical inputs, scores in the hundreds and thousands, large encoder states, one source or "
          "target token, one head, heads of width 1 and 3, rows with different padding; inputs left as they were",
          _block_values),
    Check("padded source positions get no weight: new, large encoder states there change nothing",
          _padding_ignored),
    Check("each target row depends only on itself and the encoder: redrawing the other target rows changes "
          "nothing in it", _targets_apart),
    Check("calls neither F.scaled_dot_product_attention nor F.multi_head_attention_forward (nn.MultiheadAttention)",
          _no_attention_call),
])
