"""Chapter 3's exercises: the roles of Q, K and V (checks only; the solutions live in ``solutions/ch03.py``)."""

from __future__ import annotations

import torch

from .._checks import describe
from ..attention import scaled_dot_product_attention
from .checking import Check, agrees, compare, randn, register

__all__: list[str] = []


def _cross64(x_dec, x_enc, w_q, w_k, w_v):  # noqa: ANN001, ANN202
    return scaled_dot_product_attention(x_dec @ w_q, x_enc @ w_k, x_enc @ w_v).output


register("3.1", "cross-attention, wired correctly", "build", "cross_attention", [
    agrees("queries from the decoder, keys and values from the encoder: one output row per target token",
           lambda g: [(randn(g, 3, 8), randn(g, 7, 8), randn(g, 8, 4), randn(g, 8, 4), randn(g, 8, 5)),
                      (randn(g, 6, 16), randn(g, 2, 16), randn(g, 16, 8), randn(g, 16, 8), randn(g, 16, 8))],
           _cross64),
])


def _swap_transposes(answer, g):  # noqa: ANN001, ANN202
    x, w_q, w_k = randn(g, 5, 8), randn(g, 8, 3), randn(g, 8, 3)
    a, b = answer(w_q, w_k), answer(w_k, w_q)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return f"the answer should be a tensor, got {describe(a)}"
    return compare(x @ b @ x.T, (x @ a @ x.T).T, atol=1e-4, what="the scores with W^Q and W^K swapped")


register("3.2", "the bilinear form of the scores", "build", "bilinear_form", [
    agrees("W^{QK} with x_i W^{QK} x_jᵀ = q_i · k_j (d_model × d_model from d_model × d_k factors)",
           lambda g: [(randn(g, 8, 3), randn(g, 8, 3)), (randn(g, 6, 6), randn(g, 6, 6))],
           lambda w_q, w_k: w_q @ w_k.T, atol=1e-5),
    Check("swapping W^Q and W^K transposes the scores", _swap_transposes),
])


def _psd(g: torch.Generator, d: int, rank: int) -> torch.Tensor:
    a = randn(g, d, rank)
    return a @ a.T


def _factor_reconstructs(answer, g):  # noqa: ANN001, ANN202
    for d, rank in ((4, 4), (6, 2), (5, 1)):
        w_qk = _psd(g, d, rank)
        w = answer(w_qk.clone())
        if not isinstance(w, torch.Tensor) or w.ndim != 2 or w.shape[0] != d:
            return f"for W^{{QK}} of shape ({d}, {d}) the answer should be a ({d}, r) tensor, got {describe(w)}"
        verdict = compare(w.double() @ w.double().T, w_qk.double(), atol=1e-4 * float(w_qk.abs().max()),
                          what="W Wᵀ")
        if verdict:
            return f"W^{{QK}} of size {d} and rank {rank}: {verdict}"
    return None


register("3.3", "a symmetric positive semi-definite form as a tied W^Q = W^K", "derive", "tied_factor", [
    Check("returns W with W Wᵀ = W^{QK}, full rank and rank-deficient", _factor_reconstructs),
])


def _ov_same_output(answer, g):  # noqa: ANN001, ANN202
    x, w_v, w_o = randn(g, 6, 8), randn(g, 8, 3), randn(g, 3, 8)
    weights = torch.softmax(randn(g, 4, 6), -1)
    w_ov = answer(w_v, w_o)
    if not isinstance(w_ov, torch.Tensor):
        return f"the answer should be a tensor, got {describe(w_ov)}"
    return compare(weights @ x @ w_ov, (weights @ (x @ w_v)) @ w_o, atol=1e-5, what="A X W^{OV}")


register("3.4", "the OV circuit: values and output in one matrix", "build", "ov_circuit", [
    agrees("equals the reference W^{OV}, d_model × d_model",
           lambda g: [(randn(g, 8, 3), randn(g, 3, 8)), (randn(g, 5, 5), randn(g, 5, 5))],
           lambda w_v, w_o: w_v @ w_o),
    Check("A (X W^V) W^O = A X W^{OV} for attention weights A", _ov_same_output),
])
