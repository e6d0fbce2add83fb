"""Solutions to chapter 3's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import torch


def cross_attention(x_dec, x_enc, w_q, w_k, w_v):
    q = x_dec @ w_q  # the decoder asks
    k, v = x_enc @ w_k, x_enc @ w_v  # the encoder is read
    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v


def bilinear_form(w_q, w_k):
    return w_q @ w_k.T


def tied_factor(w_qk):
    # symmetric PSD: W^{QK} = U diag(λ) Uᵀ with λ ≥ 0, so W = U diag(√λ) (round-off may leave λ slightly negative)
    lam, u = torch.linalg.eigh(w_qk.double())
    return (u * lam.clamp_min(0).sqrt()).to(w_qk.dtype)


def ov_circuit(w_v, w_o):
    return w_v @ w_o


def cross_attention_block(x_dec, x_enc, src_key_mask, params, heads):
    batch, n_tgt, d_model = x_dec.shape
    n_src = x_enc.shape[1]
    d_head = d_model // heads

    def split(x, n):
        # (batch, n, d_model) -> (batch, heads, n, d_head): head h owns columns h·d_head to (h+1)·d_head - 1
        return x.reshape(batch, n, heads, d_head).transpose(1, 2)

    # the decoder asks; the encoder is read
    q = split(x_dec @ params["w_q"] + params["b_q"], n_tgt)
    k = split(x_enc @ params["w_k"] + params["b_k"], n_src)
    v = split(x_enc @ params["w_v"] + params["b_v"], n_src)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (batch, heads, n_tgt, n_src)
    # the mask (batch, n_src) lined up with the scores' batch axis, broadcast over the heads and the target rows;
    # a padded source token scores -inf, so exp gives it a weight of exactly 0
    real = src_key_mask[:, None, None, :]
    scores = scores.masked_fill(~real, float("-inf"))
    scores = scores - scores.amax(dim=-1, keepdim=True)  # each row has a real token, so its maximum is finite
    weights = scores.exp()
    weights = weights / weights.sum(dim=-1, keepdim=True)
    # the heads side by side again, in head order, then the output projection
    heads_out = (weights @ v).transpose(1, 2).reshape(batch, n_tgt, d_model)
    attn = heads_out @ params["w_o"] + params["b_o"]
    y = x_dec + attn  # the residual (a new tensor: x_dec stays as it was)
    # post-LN, as the paper's decoder: normalise each row over the features (biased variance), then scale and shift
    centred = y - y.mean(dim=-1, keepdim=True)
    var = (centred**2).mean(dim=-1, keepdim=True)
    normed = centred / torch.sqrt(var + 1e-5)
    return normed * params["ln_weight"] + params["ln_bias"]
