"""Correct answers written differently from the solutions in solutions/chNN.py — another algorithm, einsum, loops,
float64, NumPy numbers, tiles over the queries too — which each exercise's check must accept
(tests/test_exercises.py). A check that refuses one of these judges the solution's form, not the property asked.
Issue #41."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F


def _attention_einsum64(q, k, v):
    s = torch.einsum("...qd,...kd->...qk", q.double(), k.double()) / math.sqrt(q.shape[-1])
    w = torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))  # float64 out: judged by value
    return torch.einsum("...qk,...kv->...qv", w, v.double())


def _attention_loops(q, k, v):
    out = torch.empty(*q.shape[:-1], v.shape[-1])
    for index in np.ndindex(*q.shape[:-1]):
        scores = torch.stack([q[index] @ k[index[:-1]][j] for j in range(k.shape[-2])]) / math.sqrt(q.shape[-1])
        w = torch.softmax(scores, dim=0)
        out[index] = sum(w[j] * v[index[:-1]][j] for j in range(k.shape[-2]))
    return out


def _bias64(k):
    return -0.5 * np.einsum("nd,nd->n", k.double().numpy(), k.double().numpy())  # a NumPy array of float64


def _temperature_by_secant_on_log_beta(scores, target):
    s = scores.double()

    def h(log_beta):
        p = torch.softmax(math.exp(log_beta) * s, dim=-1)
        return float(-(p * p.clamp_min(1e-300).log()).sum()) - target

    low, high = -20.0, 20.0  # β from 2e-9 to 5e8, bisected in log β
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if h(mid) > 0 else (low, mid)
    return np.float64(math.exp((low + high) / 2))


def _query_gradient_einsum64(q, k, v, g):
    q, k, v, g = (t.double() for t in (q, k, v, g))
    p = torch.softmax(torch.einsum("nd,d->n", k, q) / math.sqrt(q.shape[-1]), dim=0)
    gv = torch.einsum("nv,v->n", v, g)
    return torch.einsum("n,nd->d", p * (gv - p @ gv), k) / math.sqrt(q.shape[-1])


def _merge_by_where(m1, l1, a1, m2, l2, a2):
    first_larger = m1 >= m2
    m = torch.where(first_larger, m1, m2)
    small = torch.where(first_larger, m2, m1)
    r = torch.where(torch.isneginf(small), torch.zeros_like(m), torch.exp(small - m))  # the smaller one's factor
    r1, r2 = torch.where(first_larger, torch.ones_like(m), r), torch.where(first_larger, r, torch.ones_like(m))
    return [m, r1 * l1 + r2 * l2, r1[:, None] * a1 + r2[:, None] * a2]  # a list, not a tuple


def _stream_query_tiles64(q, k, v, block):
    """FlashAttention's loop order: tiles of 2 queries outside, blocks of keys inside, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    out = []
    for i in range(0, q.shape[0], 2):
        qi = q[i:i + 2] / math.sqrt(q.shape[-1])
        m = torch.full((qi.shape[0],), -math.inf, dtype=torch.float64)
        ell = torch.zeros(qi.shape[0], dtype=torch.float64)
        acc = torch.zeros(qi.shape[0], v.shape[-1], dtype=torch.float64)
        for j in range(0, k.shape[0], block):
            s = qi @ k[j:j + block].T
            m_new = torch.maximum(m, s.amax(-1))
            r, p = torch.exp(m - m_new), torch.exp(s - m_new[:, None])
            ell, acc, m = r * ell + p.sum(-1), r[:, None] * acc + p @ v[j:j + block], m_new
        out.append(acc / ell[:, None])
    return torch.cat(out)


def _window_by_loops(n, window):
    return torch.tensor([[i - window < j <= i for j in range(n)] for i in range(n)])


def _top_p_numpy64(logits, p):
    x = logits.double().numpy()
    probs = np.exp(x - x.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    keep, held = np.zeros(len(x), dtype=bool), 0.0
    for i in order:  # take tokens, most probable first, until they hold p
        if held >= p:
            break
        keep[i], held = True, held + probs[i]
    return torch.where(torch.from_numpy(keep), logits, torch.tensor(-math.inf))


def _bits_by_log_softmax64(logits, targets, n_chars):
    nats = -torch.log_softmax(logits.double(), -1).gather(-1, targets[..., None]).sum()
    return float(nats) / math.log(2) / n_chars  # a Python float: judged by value


def _merge_by_index(ids, pair, new_id):
    out, skip = [], False
    for i, token in enumerate(ids):
        if skip:
            skip = False
        elif i + 1 < len(ids) and token == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            skip = True
        else:
            out.append(token)
    return tuple(out)  # a tuple of the merged ids


def _next_token_loss_manual64(logits, tokens):
    lp = torch.log_softmax(logits[:, :-1].double(), -1)
    return -lp.gather(-1, tokens[:, 1:, None]).mean()


def _cached_mask_by_loops(n_q, n_k):
    offset = n_k - n_q  # query i is position offset + i
    return torch.tensor([[j <= offset + i for j in range(n_k)] for i in range(n_q)], dtype=torch.bool)


def _smoothed_by_logsumexp64(logits, targets, eps):
    x = logits.double()
    log_p = x - torch.logsumexp(x, dim=-1, keepdim=True)
    target = torch.full_like(x, eps / x.shape[-1])
    target[torch.arange(len(targets)), targets] += 1 - eps
    return -(target * log_p).sum() / len(targets)


def _positions_numpy64(n, d):
    pos, i = np.arange(n)[:, None], np.arange(d // 2)[None, :]
    angle = pos / 10000.0 ** (2 * i / d)
    return np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(n, d)  # a NumPy array, interleaved


def _pre_ln_by_hand64(x, sublayer, norm):
    x64 = x.double()
    mean, var = x64.mean(-1, keepdim=True), x64.var(-1, unbiased=False, keepdim=True)
    h = (x64 - mean) / torch.sqrt(var + norm.eps) * norm.weight.double() + norm.bias.double()
    return x64 + h @ sublayer.weight.double().T + sublayer.bias.double()


def _variance_by_expectations(d):
    from sympy.stats import E, Normal

    q, k = Normal("q", 0, 1), Normal("k", 0, 1)
    return d * (E(q**2 * k**2) - E(q * k) ** 2)  # Var = E[X²] − E[X]², term by term


def _jacobian_numpy_loops(p):
    p = p.double().numpy()
    return np.array([[p[i] * ((i == j) - p[j]) for j in range(len(p))] for i in range(len(p))])


def _largest_norm_by_ternary_search(scores):
    s = scores.double()

    def norm(log_beta):
        p = torch.softmax(math.exp(log_beta) * s, -1)
        return float(torch.linalg.eigvalsh(torch.diag(p) - torch.outer(p, p))[-1])

    grid = np.linspace(math.log(1e-3), math.log(1e4), 300)  # coarse, then refine around the best
    best = int(np.argmax([norm(x) for x in grid]))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    for _ in range(60):
        a, b = low + (high - low) / 3, high - (high - low) / 3
        low, high = (a, high) if norm(a) < norm(b) else (low, b)
    return np.float64(math.exp(low)), torch.tensor(norm(low))


def _cross_einsum64(x_dec, x_enc, w_q, w_k, w_v):
    q, k, v = (torch.einsum("nd,dk->nk", x.double(), w.double()) for x, w in ((x_dec, w_q), (x_enc, w_k),
                                                                              (x_enc, w_v)))
    s = torch.einsum("qk,nk->qn", q, k) / math.sqrt(q.shape[-1])
    return torch.exp(s - torch.logsumexp(s, -1, keepdim=True)) @ v


def _outer_products_numpy(w_q, w_k):
    a, b = w_q.double().numpy(), w_k.double().numpy()
    return sum(np.outer(a[:, i], b[:, i]) for i in range(a.shape[1]))  # Σ over the d_k columns


def _factor_by_svd(w_qk):
    u, s, _ = torch.linalg.svd(w_qk)  # symmetric PSD: the singular vectors are eigenvectors
    return u * s.sqrt()


def _factor_numpy64(w_qk):
    lam, u = np.linalg.eigh(w_qk.double().numpy())
    return u * np.sqrt(np.maximum(lam, 0.0))


def _split_by_chunks(x, heads):
    return torch.stack(x.chunk(heads, dim=-1), dim=1)  # head i: the i-th slice of d_model / heads features


def _mha_by_module(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, heads):
    d_model = x.shape[-1]
    mha = torch.nn.MultiheadAttention(d_model, heads, batch_first=True)
    mha.load_state_dict({"in_proj_weight": in_proj_weight, "in_proj_bias": in_proj_bias,
                         "out_proj.weight": out_proj_weight, "out_proj.bias": out_proj_bias})
    with torch.no_grad():
        return mha(x, x, x, need_weights=False)[0]


def _mha_einsum64(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, heads):
    x, w, b, ow, ob = (t.double() for t in (x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias))
    batch, n, d = x.shape
    q, k, v = (torch.einsum("bnd,ed->bne", x, w_i) + b_i for w_i, b_i in zip(w.chunk(3), b.chunk(3), strict=True))
    q, k, v = (t.reshape(batch, n, heads, d // heads) for t in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // heads)
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v).reshape(batch, n, d)
    return torch.einsum("bnd,ed->bne", out, ow) + ob


def _score_flops_by_meta_counter(n, d_model, heads):
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.empty(heads, n, d_model // heads, device="meta")
    with FlopCounterMode(display=False) as counter:
        q @ q.transpose(-2, -1)
    return counter.get_total_flops()


def _gqa_grouped_einsum64(q, k, v):
    b, heads, n_q, d = q.shape
    kv = k.shape[1]
    qg = q.double().reshape(b, kv, heads // kv, n_q, d)  # query heads in groups, one per key-value head
    s = torch.einsum("bgrqd,bgkd->bgrqk", qg, k.double()) / math.sqrt(d)
    out = torch.einsum("bgrqk,bgkv->bgrqv", torch.softmax(s, -1), v.double())
    return out.reshape(b, heads, n_q, v.shape[-1])


def _gqa_loops(q, k, v):
    group = q.shape[1] // k.shape[1]
    heads = [F.scaled_dot_product_attention(q[:, h], k[:, h // group], v[:, h // group]) for h in range(q.shape[1])]
    return torch.stack(heads, dim=1)


ALTERNATIVES = {
    "1.1": {"einsum and logsumexp in float64": _attention_einsum64, "loops over queries and keys": _attention_loops},
    "1.2": {"float64, as a NumPy array": _bias64},
    "1.3": {"bisection in log β, a NumPy float": _temperature_by_secant_on_log_beta},
    "1.4": {"einsum in float64": _query_gradient_einsum64},
    "2.1": {"E[X²] − E[X]² by sympy.stats, per term": _variance_by_expectations},
    "2.2": {"NumPy loops in float64": _jacobian_numpy_loops},
    "2.3": {"a coarse grid then a ternary search; NumPy and tensor numbers": _largest_norm_by_ternary_search},
    "2.4": {"times d_k ** −0.5, in NumPy float64": lambda w, d_k: w.double().numpy() * float(d_k) ** -0.5,
            "torch.rsqrt": lambda w, d_k: w * torch.rsqrt(torch.tensor(float(d_k)))},
    "3.1": {"F.scaled_dot_product_attention": lambda xd, xe, wq, wk, wv: F.scaled_dot_product_attention(
                xd @ wq, xe @ wk, xe @ wv), "einsum and logsumexp in float64": _cross_einsum64},
    "3.2": {"a sum of outer products in NumPy float64": _outer_products_numpy},
    "3.3": {"an SVD": _factor_by_svd, "NumPy's eigh in float64": _factor_numpy64},
    "3.4": {"einsum in float64": lambda wv, wo: torch.einsum("mv,vn->mn", wv.double(), wo.double())},
    "4.1": {"chunks stacked": _split_by_chunks,
            "unflatten and permute": lambda x, h: x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3)},
    "4.2": {"nn.MultiheadAttention itself, loaded": _mha_by_module, "einsum in float64": _mha_einsum64},
    "4.3": {"FlopCounterMode on meta tensors": _score_flops_by_meta_counter,
            "a 0-d tensor, summed over heads": lambda n, d, h: torch.tensor(
                [2 * n * n * (d // h)] * h, dtype=torch.int64).sum(),
            "a NumPy integer": lambda n, d, h: np.int64(2) * n * n * d},
    "4.4": {"grouped einsum in float64": _gqa_grouped_einsum64, "a loop over query heads": _gqa_loops},
    "5.1": {"loops": _cached_mask_by_loops,
            "a NumPy bool array": lambda n_q, n_k: np.tril(np.ones((n_q, n_k), dtype=bool), n_k - n_q)},
    "5.2": {"log-sum-exp by hand in float64": _smoothed_by_logsumexp64},
    "5.3": {"NumPy in float64, interleaved by stack": _positions_numpy64},
    "5.4": {"LayerNorm by hand in float64": _pre_ln_by_hand64},
    "6.1": {"torch.where on which maximum is larger, a list": _merge_by_where},
    "6.2": {"tiles over the queries too, in float64": _stream_query_tiles64},
    "6.3": {"a NumPy integer": lambda L, h, d, t, b: np.int64(2) * L * h * d * t * b,
            "a 0-d integer tensor": lambda L, h, d, t, b: torch.tensor(2 * L * h * d * t * b)},
    "6.4": {"loops": _window_by_loops,
            "a NumPy bool array": lambda n, w: (np.arange(n)[None, :] <= np.arange(n)[:, None])
            & (np.arange(n)[None, :] > np.arange(n)[:, None] - w)},
    "7.1": {"NumPy in float64, a loop over the sorted tokens": _top_p_numpy64},
    "7.2": {"log_softmax in float64, a Python float": _bits_by_log_softmax64},
    "7.3": {"an index loop, a tuple": _merge_by_index},
    "7.4": {"log_softmax and gather in float64": _next_token_loss_manual64},
}
