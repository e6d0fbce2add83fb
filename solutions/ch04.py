"""Solutions to chapter 4's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import torch


def split_heads(x, heads):
    batch, n, d_model = x.shape
    return x.view(batch, n, heads, d_model // heads).transpose(1, 2)


def mha_forward(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, heads):
    batch, n, d_model = x.shape
    d_h = d_model // heads
    q, k, v = (x @ in_proj_weight.T + in_proj_bias).split(d_model, dim=-1)
    q, k, v = (t.view(batch, n, heads, d_h).transpose(1, 2) for t in (q, k, v))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_h), dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(batch, n, d_model)
    return out @ out_proj_weight.T + out_proj_bias


def score_flops(n, d_model, heads):
    # each head: (n × d_h) @ (d_h × n), 2·n·n·d_h; heads·d_h = d_model whatever the split
    return 2 * n * n * d_model


def grouped_query_attention(q, k, v):
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
