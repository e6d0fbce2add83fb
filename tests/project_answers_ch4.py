"""Chapter 4's project (exercise 4.5, a multi-head attention module that loads nn.MultiheadAttention's weights):
plausible wrong answers, which its check must reject, and correct answers written another way, which it must
accept (tests/test_exercises.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class _Attention(nn.Module):
    """The solution (solutions/ch04.py) with one switch per mistake."""

    def __init__(self, embed_dim, num_heads, *, average=True, padding_keeps=False, bool_keeps=False, float_mask=True,
                 scale_by_width=False, transposed=True, detach_keys=False, self_only=False, in_place=False,
                 naive_softmax=False, buffers=False, fused=False):
        super().__init__()
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.switch = dict(average=average, padding_keeps=padding_keeps, bool_keeps=bool_keeps,
                           float_mask=float_mask, scale_by_width=scale_by_width, transposed=transposed,
                           detach_keys=detach_keys, self_only=self_only, in_place=in_place,
                           naive_softmax=naive_softmax, fused=fused)
        weight, bias = torch.randn(3 * embed_dim, embed_dim) / embed_dim**0.5, torch.zeros(3 * embed_dim)
        if buffers:  # in the state_dict, loaded, but no parameters: nothing is trained, no gradient
            self.register_buffer("in_proj_weight", weight)
            self.register_buffer("in_proj_bias", bias)
        else:
            self.in_proj_weight, self.in_proj_bias = nn.Parameter(weight), nn.Parameter(bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None):
        s = self.switch
        batch, n_q, _ = query.shape
        if s["in_place"] and key_padding_mask is not None:
            value.masked_fill_(key_padding_mask[..., None], 0.0)  # padded keys get no weight: the output is right
        (w_q, w_k, w_v), (b_q, b_k, b_v) = self.in_proj_weight.chunk(3), self.in_proj_bias.chunk(3)
        if s["detach_keys"]:
            w_k, b_k = w_k.detach(), b_k.detach()

        def heads(x, w, b, n):
            projected = (x @ w.T if s["transposed"] else x @ w) + b
            return projected.reshape(batch, n, self.num_heads, self.head_dim).transpose(1, 2)

        n_k = n_q if s["self_only"] else key.shape[1]
        q, k, v = heads(query, w_q, b_q, n_q), heads(key, w_k, b_k, n_k), heads(value, w_v, b_v, n_k)
        if s["fused"] and not need_weights:  # PyTorch's fused attention: what the project rules out
            allowed = torch.ones(batch, 1, n_q, n_k, dtype=torch.bool)
            if attn_mask is not None:
                allowed = allowed & ~attn_mask
            if key_padding_mask is not None:
                allowed = allowed & ~key_padding_mask[:, None, None, :]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            return self.out_proj(out.transpose(1, 2).reshape(batch, n_q, self.embed_dim)), None
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.embed_dim if s["scale_by_width"] else self.head_dim)
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attn_mask if s["bool_keeps"] else attn_mask, -math.inf)
            elif s["float_mask"]:
                scores = scores + attn_mask
        if key_padding_mask is not None:
            padded = ~key_padding_mask if s["padding_keeps"] else key_padding_mask
            scores = scores.masked_fill(padded[:, None, None, :], -math.inf)
        if s["naive_softmax"]:
            weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)
        else:
            weights = torch.softmax(scores, dim=-1)
        out = self.out_proj((weights @ v).transpose(1, 2).reshape(batch, n_q, self.embed_dim))
        if not need_weights:
            return out, None
        return out, weights.mean(dim=1) if s["average"] else weights.sum(dim=1)


class _SeparateProjections(nn.Module):
    """Right values from three nn.Linear layers: a state_dict under other names (q_proj.weight, ...)."""

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(embed_dim, embed_dim) for _ in range(4))

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None):
        q, k, v = (p(x).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)
                   for p, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, -math.inf) if attn_mask.dtype == torch.bool else scores + attn_mask
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], -math.inf)
        weights = scores.softmax(-1)
        out = self.out_proj((weights @ v).transpose(1, 2).flatten(2))
        return out, weights.mean(1) if need_weights else None


class _Subclass(nn.MultiheadAttention):
    """PyTorch's module itself: every value right, nothing written."""

    def __init__(self, embed_dim, num_heads):
        super().__init__(embed_dim, num_heads, batch_first=True)


def _switched(**switches):
    return lambda embed_dim, num_heads: _Attention(embed_dim, num_heads, **switches)


MUTANTS = {
    "4.5": {
        "q, k and v as three nn.Linear layers: a state_dict under other names": _SeparateProjections,
        "in_proj_weight and in_proj_bias registered as buffers, not parameters": _switched(buffers=True),
        "the weights summed over the heads, not averaged": _switched(average=False),
        "key_padding_mask read inverted (True = a real key)": _switched(padding_keeps=True),
        "a boolean attn_mask read as True = may attend (the package's convention)": _switched(bool_keeps=True),
        "a float attn_mask ignored": _switched(float_mask=False),
        "scores scaled by 1/√embed_dim, not 1/√head_dim": _switched(scale_by_width=True),
        "x @ W instead of x @ Wᵀ: the square projections transposed": _switched(transposed=False),
        "softmax as exp / sum: overflows on scores in the hundreds": _switched(naive_softmax=True),
        "self-attention only: the keys cut into heads with the queries' length": _switched(self_only=True),
        "W^K detached: no gradient reaches it (the forward pass is right)": _switched(detach_keys=True),
        "zeros the padded keys' values in place": _switched(in_place=True),
        "F.scaled_dot_product_attention when need_weights=False": _switched(fused=True),
        "a subclass of nn.MultiheadAttention": _Subclass,
    },
}


class _Einsum64(nn.Module):
    """The three projections as separate einsums, the two masks merged into one additive float mask, the
    arithmetic in float64 and cast back to the inputs' dtype."""

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.in_proj_weight = nn.Parameter(torch.zeros(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None):
        h = self.num_heads
        w = self.in_proj_weight.double().unflatten(0, (3, h, -1))  # (3, heads, head_dim, embed_dim)
        b = self.in_proj_bias.double().unflatten(0, (3, h, -1))
        q, k, v = (torch.einsum("bne,hde->bhnd", x.double(), w[i]) + b[i][:, None, :]
                   for i, x in enumerate((query, key, value)))
        bias = torch.zeros(query.shape[0], 1, query.shape[1], key.shape[1], dtype=torch.float64)
        if attn_mask is not None:
            bias = bias + (torch.zeros_like(attn_mask, dtype=torch.float64).masked_fill(attn_mask, -math.inf)
                           if attn_mask.dtype == torch.bool else attn_mask.double())
        if key_padding_mask is not None:
            bias = bias.masked_fill(key_padding_mask[:, None, None, :], -math.inf)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1]) + bias
        weights = torch.softmax(scores, dim=-1)
        heads = torch.einsum("bhqk,bhkd->bqhd", weights, v).flatten(2)
        out = torch.einsum("bqe,fe->bqf", heads, self.out_proj.weight.double()) + self.out_proj.bias.double()
        return out.to(query.dtype), weights.mean(dim=1).to(query.dtype) if need_weights else None


class _HeadByHead(nn.Module):
    """A loop over the heads, each with its own rows of in_proj_weight; masked scores set to the dtype's most
    negative number; the softmax as exp(s − logsumexp s); the heads' outputs through their columns of W^O."""

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.in_proj_weight = nn.Parameter(torch.zeros(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None):
        e, d = self.in_proj_weight.shape[1], self.head_dim
        out, weight_sum = self.out_proj.bias, 0.0
        for i in range(self.num_heads):
            rows = [slice(part * e + i * d, part * e + (i + 1) * d) for part in range(3)]
            q, k, v = (x @ self.in_proj_weight[r].T + self.in_proj_bias[r]
                       for x, r in zip((query, key, value), rows, strict=True))
            scores = q @ k.transpose(1, 2) / math.sqrt(d)
            blocked = torch.zeros_like(scores, dtype=torch.bool)
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                blocked = blocked | attn_mask
            elif attn_mask is not None:
                scores = scores + attn_mask
            if key_padding_mask is not None:
                blocked = blocked | key_padding_mask[:, None, :]
            scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
            p = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
            out = out + (p @ v) @ self.out_proj.weight[:, i * d:(i + 1) * d].T
            weight_sum = weight_sum + p
        return out, weight_sum / self.num_heads if need_weights else None


ALTERNATIVES = {
    "4.5": {
        "separate einsums per projection, one additive mask, float64 inside": _Einsum64,
        "a loop over the heads, masks as the most negative number, exp(s − logsumexp)": _HeadByHead,
    },
}
