"""Chapter 3's exercises: the roles of Q, K and V (checks only; the solutions live in ``solutions/ch03.py``)."""

from __future__ import annotations

import torch

from .._checks import describe
from ..attention import scaled_dot_product_attention
from .checking import Check, agrees, as_values, compare, randn, register

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


def _factor_pairs(g: torch.Generator) -> dict[str, list[tuple]]:
    return {"typical": [(randn(g, 8, 3), randn(g, 8, 3)), (randn(g, 6, 6), randn(g, 6, 6))],
            "extreme": [(randn(g, 8, 4) * 300, randn(g, 8, 4) * 300), (randn(g, 16, 2) * 1e-3, randn(g, 16, 2))],
            "unusual shapes": [(randn(g, 1, 1), randn(g, 1, 1)), (randn(g, 5, 1), randn(g, 5, 1)),
                               (randn(g, 3, 7), randn(g, 3, 7))]}  # d_k > d_model


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
    return {"typical": [(randn(g, 8, 3), randn(g, 3, 8)), (randn(g, 5, 5), randn(g, 5, 5))],
            "extreme": [(randn(g, 8, 4) * 300, randn(g, 4, 8) * 300), (randn(g, 6, 2) * 1e-3, randn(g, 2, 6))],
            "unusual shapes": [(randn(g, 1, 1), randn(g, 1, 1)), (randn(g, 7, 1), randn(g, 1, 7)),
                               (randn(g, 3, 9), randn(g, 9, 3))]}  # d_v > d_model


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
