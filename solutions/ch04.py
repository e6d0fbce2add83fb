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


def make_mha(embed_dim, num_heads):
    # the class lives inside the factory, so that the whole answer is one function (the site shows one)
    class MultiheadAttentionByHand(torch.nn.Module):
        def __init__(self, embed_dim, num_heads):
            super().__init__()
            self.embed_dim, self.num_heads = embed_dim, num_heads
            self.head_dim = embed_dim // num_heads
            # PyTorch's names and layout: W^Q, W^K, W^V stacked as (out, in) rows, then the output projection
            self.in_proj_weight = torch.nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
            self.in_proj_bias = torch.nn.Parameter(torch.zeros(3 * embed_dim))
            self.out_proj = torch.nn.Linear(embed_dim, embed_dim)
            torch.nn.init.xavier_uniform_(self.in_proj_weight)

        def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None):
            batch, n_q, _ = query.shape
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)
            b_q, b_k, b_v = self.in_proj_bias.chunk(3)

            def heads(x, w, b):  # (batch, n, embed_dim) -> (batch, heads, n, head_dim)
                return (x @ w.T + b).reshape(batch, -1, self.num_heads, self.head_dim).transpose(1, 2)

            q, k, v = heads(query, w_q, b_q), heads(key, w_k, b_k), heads(value, w_v, b_v)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, heads, n_q, n_k)
            if attn_mask is not None:  # (n_q, n_k): True may not attend; a float mask is added
                if attn_mask.dtype == torch.bool:
                    scores = scores.masked_fill(attn_mask, -math.inf)
                else:
                    scores = scores + attn_mask
            if key_padding_mask is not None:  # (batch, n_k): True marks a padded key
                scores = scores.masked_fill(key_padding_mask[:, None, None, :], -math.inf)
            weights = torch.softmax(scores, dim=-1)
            out = (weights @ v).transpose(1, 2).reshape(batch, n_q, self.embed_dim)  # Concat(head_1, ..., head_h)
            return self.out_proj(out), weights.mean(dim=1) if need_weights else None

    return MultiheadAttentionByHand(embed_dim, num_heads)
