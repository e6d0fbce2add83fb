"""Solutions to chapter 5's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import torch
import torch.nn.functional as F


def cached_causal_mask(n_q, n_k):
    query_pos = torch.arange(n_k - n_q, n_k)  # the queries are the last n_q positions
    return torch.arange(n_k)[None, :] <= query_pos[:, None]


def smoothed_cross_entropy(logits, targets, eps):
    log_p = torch.log_softmax(logits, dim=-1)
    nll = -log_p.gather(-1, targets[:, None]).squeeze(-1)
    uniform = -log_p.mean(dim=-1)  # cross-entropy against the uniform distribution over all classes
    return ((1 - eps) * nll + eps * uniform).mean()


def sinusoidal_positions(n, d):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return pe.float()


def pre_ln_residual(x, sublayer, norm):
    return x + sublayer(norm(x))


def greedy_decode_cached(model, src, max_new, bos, eos):
    d, layers = model.d_model, model.transformer.decoder.layers
    heads = layers[0].self_attn.num_heads

    def split(x):  # (batch, n, d_model) -> (batch, heads, n, d_k)
        return x.unflatten(-1, (heads, d // heads)).transpose(1, 2)

    def attend(q, k, v, allowed=None):  # softmax(q kᵀ/√d_k) v per head, heads merged: (batch, n_q, d_model)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if allowed is not None:  # (batch, n_k), True = a real key
            scores = scores.masked_fill(~allowed[:, None, None, :], float("-inf"))
        return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).flatten(2)

    with torch.no_grad():
        memory = model.encode(src)  # the encoder runs once
        real = src != model.pad_id
        cross, cache = [], []
        for layer in layers:  # the memory's keys and values, projected once per layer
            w, b = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
            k, v = F.linear(memory, w[d:], b[d:]).chunk(2, dim=-1)
            cross.append((split(k), split(v)))
            cache.append(([], []))  # this layer's self-attention keys and values, one entry per step
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        for step in range(max_new):
            x = model.embed_tgt(tokens[:, -1:], offset=step)  # the newest token, at its own position
            for layer, (keys, values), (k_mem, v_mem) in zip(layers, cache, cross, strict=True):
                sa, ca = layer.self_attn, layer.multihead_attn
                q, k, v = F.linear(x, sa.in_proj_weight, sa.in_proj_bias).chunk(3, dim=-1)
                keys.append(split(k))  # appended before attending: the new token sees itself
                values.append(split(v))
                a = attend(split(q), torch.cat(keys, dim=2), torch.cat(values, dim=2))
                x = layer.norm1(x + sa.out_proj(a))  # post-LN: norm(x + sublayer(x))
                q = F.linear(x, ca.in_proj_weight[:d], ca.in_proj_bias[:d])
                x = layer.norm2(x + ca.out_proj(attend(split(q), k_mem, v_mem, real)))
                x = layer.norm3(x + layer.linear2(layer.activation(layer.linear1(x))))
            logits = model.generator(model.transformer.decoder.norm(x))[:, -1]
            new = torch.where(done, model.pad_id, logits.argmax(dim=-1))  # a finished row gets padding
            tokens = torch.cat([tokens, new[:, None]], dim=1)
            done |= new == eos
            if bool(done.all()):
                break
        return tokens
