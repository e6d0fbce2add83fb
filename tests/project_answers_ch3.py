"""Chapter 3's project (exercise 3.5, the decoder's cross-attention block): plausible wrong answers, which its check
must reject, and correct answers written another way, which it must accept (tests/test_exercises.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _block(x_dec, x_enc, src_key_mask, params, heads, *, wiring="right", mask="right", scale="head",
           softmax_dim=-1, stable=True, interleave=False, norm="post", unbiased=False, in_place=False):
    """The solution (solutions/ch03.py) with one switch per mistake."""
    batch, n_tgt, d_model = x_dec.shape
    d_head = d_model // heads
    asks, read = (x_enc, x_dec) if wiring == "swapped" else (x_dec, x_enc)

    def split(x):
        if interleave:  # head h gets columns h, h + heads, h + 2·heads, ...
            return x.reshape(batch, x.shape[1], d_head, heads).permute(0, 3, 1, 2)
        return x.reshape(batch, x.shape[1], heads, d_head).transpose(1, 2)

    def layer_norm(y):
        mean = y.mean(dim=-1, keepdim=True)
        var = y.var(dim=-1, keepdim=True) if unbiased else ((y - mean) ** 2).mean(dim=-1, keepdim=True)
        return (y - mean) / torch.sqrt(var + 1e-5) * params["ln_weight"] + params["ln_bias"]

    if norm == "pre":
        asks = layer_norm(asks)
    q = split(asks @ params["w_q"] + params["b_q"])
    k, v = split(read @ params["w_k"] + params["b_k"]), split(read @ params["w_v"] + params["b_v"])
    if wiring == "k and v swapped":
        k, v = v, k
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head if scale == "head" else d_model)
    if mask == "right":
        scores = scores.masked_fill(~src_key_mask[:, None, None, :], float("-inf"))
    elif mask == "inverted":  # PyTorch's sense, True = padding
        scores = scores.masked_fill(src_key_mask[:, None, None, :], float("-inf"))
    elif mask == "heads":  # (batch, 1, n_src) broadcasts against (batch, heads, n_tgt, n_src) with batch on heads
        scores = scores.masked_fill(~src_key_mask[:, None, :], float("-inf"))
    if stable:
        scores = scores - scores.amax(dim=softmax_dim, keepdim=True)
    weights = scores.exp()
    weights = weights / weights.sum(dim=softmax_dim, keepdim=True)
    out = weights @ v
    out = (out.permute(0, 2, 3, 1) if interleave else out.transpose(1, 2)).reshape(batch, -1, d_model)
    attn = out @ params["w_o"] + params["b_o"]
    if norm == "pre":
        return x_dec + attn
    if norm == "none":  # the residual left out
        return layer_norm(attn)
    if in_place:
        return layer_norm(x_dec.add_(attn))  # the residual added into the caller's x_dec
    return layer_norm(x_dec + attn)


def _with_sdpa(x_dec, x_enc, src_key_mask, params, heads):
    """Right values, with the one call the project forbids."""
    batch, n_tgt, d_model = x_dec.shape

    def split(x, w, b):
        return (x @ params[w] + params[b]).reshape(batch, x.shape[1], heads, -1).transpose(1, 2)

    out = F.scaled_dot_product_attention(split(x_dec, "w_q", "b_q"), split(x_enc, "w_k", "b_k"),
                                         split(x_enc, "w_v", "b_v"), attn_mask=src_key_mask[:, None, None, :])
    y = x_dec + out.transpose(1, 2).reshape(batch, n_tgt, d_model) @ params["w_o"] + params["b_o"]
    return F.layer_norm(y, (d_model,), params["ln_weight"], params["ln_bias"], 1e-5)


MUTANTS = {
    "3.5": {
        "queries from the encoder, keys and values from the decoder": lambda *a: _block(*a, wiring="swapped"),
        "keys projected with W^V and b_v, values with W^K and b_k": lambda *a: _block(*a, wiring="k and v swapped"),
        "the padding mask ignored": lambda *a: _block(*a, mask="none"),
        "the padding mask inverted (read as True = padding)": lambda *a: _block(*a, mask="inverted"),
        "the mask (batch, 1, n_src) lines the batch up with the heads": lambda *a: _block(*a, mask="heads"),
        "scores divided by √d_model, not √d_head": lambda *a: _block(*a, scale="model"),
        "softmax over the target rows, not the source tokens": lambda *a: _block(*a, softmax_dim=-2),
        "no max subtracted: exp overflows on scores in the hundreds": lambda *a: _block(*a, stable=False),
        "heads interleaved: head h takes columns h, h + heads, ...": lambda *a: _block(*a, interleave=True),
        "the residual left out": lambda *a: _block(*a, norm="none"),
        "pre-LN, not the paper's post-LN": lambda *a: _block(*a, norm="pre"),
        "LayerNorm with the unbiased variance (torch.var's default)": lambda *a: _block(*a, unbiased=True),
        "the residual added into x_dec in place": lambda *a: _block(*a, in_place=True),
        "F.scaled_dot_product_attention inside": _with_sdpa,
    },
}


def _einsum64(x_dec, x_enc, src_key_mask, params, heads):
    """einsum in float64 with the weight matrices cut into heads, logsumexp for the softmax, cast back."""
    p = {name: t.double() for name, t in params.items()}
    x, m = x_dec.double(), x_enc.double()
    d_model = x.shape[-1]
    d_head = d_model // heads

    def per_head(w):  # (d_model, d_model) -> (heads, d_model, d_head)
        return w.reshape(d_model, heads, d_head).permute(1, 0, 2)

    q = torch.einsum("btd,hde->bhte", x, per_head(p["w_q"])) + p["b_q"].reshape(heads, 1, d_head)
    k = torch.einsum("bsd,hde->bhse", m, per_head(p["w_k"])) + p["b_k"].reshape(heads, 1, d_head)
    v = torch.einsum("bsd,hde->bhse", m, per_head(p["w_v"])) + p["b_v"].reshape(heads, 1, d_head)
    scores = torch.einsum("bhte,bhse->bhts", q, k) / math.sqrt(d_head)
    scores = torch.where(src_key_mask[:, None, None, :], scores, -math.inf)
    weights = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
    # W^O cut into heads by rows: the concatenation times W^O is the sum of each head's output times its rows
    attn = torch.einsum("bhts,bhse,hed->btd", weights, v, p["w_o"].reshape(heads, d_head, d_model)) + p["b_o"]
    y = x + attn
    centred = y - y.mean(dim=-1, keepdim=True)
    normed = centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
    return (normed * p["ln_weight"] + p["ln_bias"]).to(x_dec.dtype)


def _loops(x_dec, x_enc, src_key_mask, params, heads):
    """A loop over the batch rows and the heads: each row keeps only its real source tokens (no mask at all), and
    F.layer_norm for the norm."""
    d_model = x_dec.shape[-1]
    d_head = d_model // heads
    rows = []
    for x, memory, real in zip(x_dec, x_enc, src_key_mask, strict=True):
        memory = memory[real]  # the padded rows dropped
        outs = []
        for h in range(heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            q = x @ params["w_q"][:, cols] + params["b_q"][cols]
            k = memory @ params["w_k"][:, cols] + params["b_k"][cols]
            v = memory @ params["w_v"][:, cols] + params["b_v"][cols]
            outs.append(torch.softmax(q @ k.T / math.sqrt(d_head), dim=-1) @ v)
        rows.append(x + torch.cat(outs, dim=-1) @ params["w_o"] + params["b_o"])
    return F.layer_norm(torch.stack(rows), (d_model,), params["ln_weight"], params["ln_bias"], eps=1e-5)


ALTERNATIVES = {
    "3.5": {
        "einsum in float64, W^Q, W^K, W^V and W^O cut into heads, logsumexp": _einsum64,
        "loops over the batch and the heads, padded rows dropped instead of masked, F.layer_norm": _loops,
    },
}
