"""Chapter 5's project (exercise 5.5, greedy decoding with your own key/value cache): plausible wrong answers, each
rejected by its checks, and correct answers written differently from solutions/ch05.py, each accepted
(tests/test_exercises.py loads this file)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _decode(model, src, max_new, bos, eos, *, cache=True, offset=True, append_first=True, cross_from_memory=True,
            stop_at_eos=True, stable=True, encode_once=True, mask_padding=True, every_row=True, fold_in_place=False):
    """The solution's decoding, with one mistake switched on by a flag."""
    d, layers = model.d_model, model.transformer.decoder.layers
    heads = layers[0].self_attn.num_heads

    def split(x):
        return x.unflatten(-1, (heads, d // heads)).transpose(1, 2)

    def attend(q, k, v, allowed=None, scale=True):
        if k.shape[2] == 0:  # nothing cached yet (only when the new key comes after attending)
            return torch.zeros(q.shape[0], q.shape[2], d)
        scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
        if allowed is not None:
            scores = scores.masked_fill(~allowed[:, None, None, :], float("-inf"))
        if stable:
            weights = torch.softmax(scores, dim=-1)
        else:  # exponentials of the raw scores: inf once a score passes 88 in float32
            weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)
        return (weights @ v).transpose(1, 2).flatten(2)

    def memory_keys_values():
        memory = model.encode(src)
        found = []
        for layer in layers:
            w, b = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
            k, v = F.linear(memory, w[d:], b[d:]).chunk(2, dim=-1)
            found.append((split(k), split(v)))
        return found

    if fold_in_place:  # 1/√d_k folded into every self-attention's W_Q and b_Q, in the model itself
        with torch.no_grad():
            for layer in layers:
                layer.self_attn.in_proj_weight[:d] /= math.sqrt(d // heads)
                layer.self_attn.in_proj_bias[:d] /= math.sqrt(d // heads)
    with torch.no_grad():
        real = src != model.pad_id if mask_padding else None
        cross = memory_keys_values()
        empty = torch.zeros(src.shape[0], heads, 0, d // heads)
        past = [(empty, empty) for _ in layers]  # each layer's cached keys and values
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        for step in range(max_new):
            if not encode_once:
                cross = memory_keys_values()
            # with a cache, the newest token at its position; without, the whole prefix again
            x = model.embed_tgt(tokens[:, -1:], offset=step if offset else 0) if cache else model.embed_tgt(tokens)
            for i, layer in enumerate(layers):
                sa, ca = layer.self_attn, layer.multihead_attn
                q, k, v = (split(t) for t in F.linear(x, sa.in_proj_weight, sa.in_proj_bias).chunk(3, dim=-1))
                if not cache:  # the causal mask over the whole prefix
                    n = x.shape[1]
                    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
                        ~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
                    a = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).flatten(2)
                elif append_first:
                    past[i] = (torch.cat([past[i][0], k], dim=2), torch.cat([past[i][1], v], dim=2))
                    a = attend(q, *past[i], scale=not fold_in_place)
                else:  # the new token does not see itself
                    a = attend(q, *past[i], scale=not fold_in_place)
                    past[i] = (torch.cat([past[i][0], k], dim=2), torch.cat([past[i][1], v], dim=2))
                x = layer.norm1(x + sa.out_proj(a))
                q = split(F.linear(x, ca.in_proj_weight[:d], ca.in_proj_bias[:d]))
                if cross_from_memory:
                    k_mem, v_mem, allowed = *cross[i], real
                else:  # keys and values from the decoder's own stream
                    kv = F.linear(x, ca.in_proj_weight[d:], ca.in_proj_bias[d:]).chunk(2, dim=-1)
                    k_mem, v_mem, allowed = split(kv[0]), split(kv[1]), None
                x = layer.norm2(x + ca.out_proj(attend(q, k_mem, v_mem, allowed)))
                x = layer.norm3(x + layer.linear2(layer.activation(layer.linear1(x))))
            logits = model.generator(model.transformer.decoder.norm(x))[:, -1]
            new = torch.where(done, model.pad_id, logits.argmax(dim=-1)) if stop_at_eos else logits.argmax(dim=-1)
            tokens = torch.cat([tokens, new[:, None]], dim=1)
            done |= new == eos
            if stop_at_eos and bool(done.all() if every_row else done.any()):
                break
        return tokens


def _preallocated(model, src, max_new, bos, eos):
    """The cache preallocated for max_new positions per layer and written in place; q, k and v projected apart
    with the attention's in_projections(); F.scaled_dot_product_attention; the ids written into a padded tensor."""
    d, layers = model.d_model, model.transformer.decoder.layers
    batch = src.shape[0]
    with torch.no_grad():
        memory = model.encode(src)
        real = (src != model.pad_id)[:, None, None, :]
        keys, values, cross = [], [], []
        for layer in layers:
            h = layer.self_attn.num_heads
            keys.append(torch.zeros(batch, h, max_new, d // h))
            values.append(torch.zeros(batch, h, max_new, d // h))
            _, w_k, w_v = layer.multihead_attn.in_projections()
            _, b_k, b_v = layer.multihead_attn.in_proj_bias.split(d)
            cross.append((F.linear(memory, w_k, b_k).unflatten(-1, (h, d // h)).transpose(1, 2),
                          F.linear(memory, w_v, b_v).unflatten(-1, (h, d // h)).transpose(1, 2)))
        out = torch.full((batch, 1 + max_new), model.pad_id, dtype=torch.long)
        out[:, 0] = bos
        done = torch.zeros(batch, dtype=torch.bool)
        steps = 0
        for t in range(max_new):
            x = model.embed_tgt(out[:, t : t + 1], offset=t)
            for layer, k_cache, v_cache, (k_mem, v_mem) in zip(layers, keys, values, cross, strict=True):
                h = layer.self_attn.num_heads

                def heads(y, h=h):
                    return y.unflatten(-1, (h, d // h)).transpose(1, 2)

                w_q, w_k, w_v = layer.self_attn.in_projections()
                b_q, b_k, b_v = layer.self_attn.in_proj_bias.split(d)
                k_cache[:, :, t : t + 1] = heads(F.linear(x, w_k, b_k))
                v_cache[:, :, t : t + 1] = heads(F.linear(x, w_v, b_v))
                a = F.scaled_dot_product_attention(heads(F.linear(x, w_q, b_q)), k_cache[:, :, : t + 1],
                                                   v_cache[:, :, : t + 1])
                x = layer.norm1(x + layer.self_attn.out_proj(a.transpose(1, 2).flatten(2)))
                w_q = layer.multihead_attn.in_projections()[0]
                q = heads(F.linear(x, w_q, layer.multihead_attn.in_proj_bias[:d]))
                a = F.scaled_dot_product_attention(q, k_mem, v_mem, attn_mask=real)
                x = layer.norm2(x + layer.multihead_attn.out_proj(a.transpose(1, 2).flatten(2)))
                x = layer.norm3(x + layer.linear2(torch.relu(layer.linear1(x))))
            logits = model.generator(model.transformer.decoder.norm(x))[:, 0]
            new = logits.argmax(dim=-1).masked_fill(done, model.pad_id)
            out[:, t + 1] = new
            done |= new == eos
            steps = t + 1
            if done.all():
                break
        return out[:, : 1 + steps]


def _float64_rows(model, src, max_new, bos, eos):
    """Every product in float64 (the weights cast as they are used), one head at a time with einsum; the cache a
    Python list of each step's key and value rows per layer; the ids kept as Python lists."""
    d, layers = model.d_model, model.transformer.decoder.layers
    f64 = torch.float64

    def linear(x, w, b=None):
        y = torch.einsum("...i,oi->...o", x, w.to(f64))
        return y if b is None else y + b.to(f64)

    def norm(x, ln):
        return F.layer_norm(x, (d,), ln.weight.to(f64), ln.bias.to(f64), ln.eps)

    def attention(q, k, v, heads, allowed=None):  # q (batch, d); k, v (batch, n, d)
        d_k, out = d // heads, []
        for head in range(heads):
            cols = slice(head * d_k, (head + 1) * d_k)
            s = torch.einsum("bi,bni->bn", q[:, cols], k[..., cols]) / math.sqrt(d_k)
            if allowed is not None:
                s = s.masked_fill(~allowed, -math.inf)
            out.append(torch.einsum("bn,bni->bi", torch.softmax(s, dim=-1), v[..., cols]))
        return torch.cat(out, dim=-1)

    with torch.no_grad():
        memory = model.encode(src).to(f64)
        real = src != model.pad_id
        cross = []
        for layer in layers:
            w, b = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
            cross.append((linear(memory, w[d : 2 * d], b[d : 2 * d]), linear(memory, w[2 * d :], b[2 * d :])))
        past = [[] for _ in layers]  # per layer: each step's (k, v), (batch, d) each
        rows = [[bos] for _ in range(src.shape[0])]
        ended = [False] * src.shape[0]
        for t in range(max_new):
            x = model.embed_tgt(torch.tensor([[row[-1]] for row in rows]), offset=t)[:, 0].to(f64)
            for layer, kv, (k_mem, v_mem) in zip(layers, past, cross, strict=True):
                sa, ca = layer.self_attn, layer.multihead_attn
                w, b = sa.in_proj_weight, sa.in_proj_bias
                kv.append((linear(x, w[d : 2 * d], b[d : 2 * d]), linear(x, w[2 * d :], b[2 * d :])))
                k_all, v_all = torch.stack([k for k, _ in kv], dim=1), torch.stack([v for _, v in kv], dim=1)
                a = attention(linear(x, w[:d], b[:d]), k_all, v_all, sa.num_heads)
                x = norm(x + linear(a, sa.out_proj.weight, sa.out_proj.bias), layer.norm1)
                a = attention(linear(x, ca.in_proj_weight[:d], ca.in_proj_bias[:d]), k_mem, v_mem, ca.num_heads, real)
                x = norm(x + linear(a, ca.out_proj.weight, ca.out_proj.bias), layer.norm2)
                hidden = torch.relu(linear(x, layer.linear1.weight, layer.linear1.bias))
                x = norm(x + linear(hidden, layer.linear2.weight, layer.linear2.bias), layer.norm3)
            logits = linear(norm(x, model.transformer.decoder.norm), model.generator.weight)
            for i, row in enumerate(rows):
                row.append(model.pad_id if ended[i] else int(logits[i].argmax()))
                ended[i] = ended[i] or row[-1] == eos
            if all(ended):
                break
        return torch.tensor(rows)


MUTANTS = {"5.5": {
    "no cache: the whole prefix recomputed at every step": lambda *a: _decode(*a, cache=False),
    "every new token at position 0 (no offset)": lambda *a: _decode(*a, offset=False),
    "the new key appended after attending (off by one)": lambda *a: _decode(*a, append_first=False),
    "cross-attention keys and values from the decoder (wiring)": lambda *a: _decode(*a, cross_from_memory=False),
    "EOS ignored": lambda *a: _decode(*a, stop_at_eos=False),
    "a softmax of raw exponentials (overflows)": lambda *a: _decode(*a, stable=False),
    "the encoder run at every step": lambda *a: _decode(*a, encode_once=False),
    "the source's padding not masked": lambda *a: _decode(*a, mask_padding=False),
    "stops when the first row ends": lambda *a: _decode(*a, every_row=False),
    "1/√d_k folded into the model's own W_Q (in place)": lambda *a: _decode(*a, fold_in_place=True),
}}

ALTERNATIVES = {"5.5": {
    "a preallocated cache written in place, separate projections, F.scaled_dot_product_attention": _preallocated,
    "float64 as the weights are used, one head at a time with einsum, a list of rows per layer": _float64_rows,
}}
