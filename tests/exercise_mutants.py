"""Plausible wrong answers to every exercise — the mistakes the chapters warn about — which each exercise's check must
reject (tests/test_exercises.py). Each is a small edit of the solution in solutions/chNN.py."""

from __future__ import annotations

import math

import sympy
import torch
import torch.nn.functional as F


def _softmax_attention(q, k, v, scale, dim=-1):
    return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=dim) @ v


def _naive_softmax_attention(q, k, v):
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).exp()  # no max subtracted: overflows
    return w / w.sum(-1, keepdim=True) @ v


def _bisect(f, target):
    low, high = 0.0, 64.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) > target else (low, mid)
    return (low + high) / 2


def _entropy_bits(scores, target):
    def h(beta):
        p = torch.softmax(beta * scores.double(), -1)
        return float(-(p * p.clamp_min(1e-300).log2()).sum())  # bits, where the target is in nats
    return _bisect(h, target)


def _temperature_not_inverse(scores, target):
    def h(beta):
        p = torch.softmax(beta * scores.double(), -1)
        return float(-(p * p.clamp_min(1e-300).log()).sum())
    return 1 / _bisect(h, target)  # returns T = 1/β where β is asked for


def _grad(q, k, v, g, *, centred=True, scaled=True):
    d = q.shape[-1]
    p = torch.softmax(k @ q / math.sqrt(d), -1)
    ds = p * (v @ g - ((p @ v) @ g if centred else 0))
    return ds @ k / (math.sqrt(d) if scaled else 1)


def _mha(x, w, b, ow, ob, heads, *, scale_by_model=False, bias=True, stable=True):
    batch, n, d = x.shape
    d_h = d // heads
    q, k, v = (x @ w.T + (b if bias else 0)).split(d, -1)
    q, k, v = (t.reshape(batch, n, heads, d_h).transpose(1, 2) for t in (q, k, v))
    if not stable:
        return (_naive_softmax_attention(q, k, v).transpose(1, 2).reshape(batch, n, d)) @ ow.T + ob
    a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d if scale_by_model else d_h), -1)
    return (a @ v).transpose(1, 2).reshape(batch, n, d) @ ow.T + ob


def _gqa(q, k, v, *, group=None, stable=True):
    group = group or q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    if k.shape[1] != q.shape[1]:  # a hard-coded group: as many key-value heads as it makes, cut or tiled to fit
        k, v = (t[:, : q.shape[1]].repeat(1, -(-q.shape[1] // t.shape[1]), 1, 1)[:, : q.shape[1]] for t in (k, v))
    return _naive_softmax_attention(q, k, v) if not stable else _softmax_attention(q, k, v, q.shape[-1] ** -0.5)


def _merge(m1, l1, a1, m2, l2, a2, *, rescale=True):
    m = torch.maximum(m1, m2)
    r1, r2 = torch.exp(m1 - m), torch.exp(m2 - m)  # NaN when both are −inf
    if not rescale:
        r1 = r2 = torch.ones_like(m)
    return m, r1 * l1 + r2 * l2, r1[:, None] * a1 + r2[:, None] * a2


def _stream(q, k, v, block, *, rescale_acc=True):
    scale = 1 / math.sqrt(q.shape[-1])
    m, ell, acc = torch.full((q.shape[0],), -math.inf), torch.zeros(q.shape[0]), torch.zeros(q.shape[0], v.shape[1])
    for j in range(0, k.shape[0], block):
        s = q @ k[j:j + block].T * scale
        m_new = torch.maximum(m, s.amax(-1))
        r, p = torch.exp(m - m_new), torch.exp(s - m_new[:, None])
        ell = r * ell + p.sum(-1)
        acc = (r[:, None] if rescale_acc else 1) * acc + p @ v[j:j + block]
        m = m_new
    return acc / ell[:, None]


def _collected(q, k, v, block):
    s = [q @ k[i:i + block].T / math.sqrt(q.shape[-1]) for i in range(0, len(k), block)]
    m = torch.stack([b.amax(-1) for b in s]).amax(0)
    p = [torch.exp(b - m[:, None]) for b in s]
    return sum(pi @ v[j * block:(j + 1) * block] for j, pi in enumerate(p)) / sum(pi.sum(-1) for pi in p)[:, None]


def _top_p(logits, p, *, include_crossing=True, ascending=False):
    probs = torch.softmax(logits, -1)
    sp_, order = probs.sort(descending=not ascending)
    cum = sp_.cumsum(-1)
    keep_sorted = (cum - sp_ < p) if include_crossing else (cum <= p)
    keep = torch.zeros_like(logits, dtype=torch.bool)
    keep[order] = keep_sorted
    return logits.masked_fill(~keep, -math.inf)


def _merge_ids(ids, pair, new, *, overlapping=False, first_only=False):
    out, i, done = [], 0, False
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair) and not done:
            out.append(new)
            i += 1 if overlapping else 2
            done = first_only
        else:
            out.append(ids[i])
            i += 1
    return out


def _positions(n, d, *, swap=False, exponent=2):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) * (exponent / 2) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    pe[:, 0::2], pe[:, 1::2] = first(pos * freq), second(pos * freq)
    return pe.float()


def _one_max_attention(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = (s - s.max()).exp()  # one max for the whole matrix: a row far below it underflows to 0/0
    return w / w.sum(-1, keepdim=True) @ v


def _temperature_fixed_range(scores, target):
    def h(beta):
        p = torch.softmax(beta * scores.double(), -1)
        return float(-(p * p.clamp_min(1e-300).log()).sum())

    low, high = 0.0, 100.0  # never widened: a target that needs β > 100 is missed
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if h(mid) > target else (low, mid)
    return (low + high) / 2


def _merge_all_or_nothing(m1, l1, a1, m2, l2, a2):
    m = torch.maximum(m1, m2)
    if torch.isinf(m).all():  # handles every row empty, not some rows empty
        return m, l1 + l2, a1 + a2
    r1, r2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return m, r1 * l1 + r2 * l2, r1[:, None] * a1 + r2[:, None] * a2


def _two_pass(q, k, v, block):
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.stack([(q @ k[j:j + block].T * scale).amax(-1) for j in range(0, len(k), block)]).amax(0)
    ell, acc = torch.zeros(q.shape[0]), torch.zeros(q.shape[0], v.shape[1])
    for j in range(0, len(k), block):  # the scores again, now that the max is known
        p = torch.exp(q @ k[j:j + block].T * scale - m[:, None])
        ell, acc = ell + p.sum(-1), acc + p @ v[j:j + block]
    return acc / ell[:, None]


def _batched_blocks(q, k, v, block):
    n = len(k) // block * block  # the whole blocks at once, as one (blocks, n_q, block) product; then the rest
    kb, vb = k[:n].reshape(-1, block, k.shape[1]), v[:n].reshape(-1, block, v.shape[1])
    s = torch.einsum("qd,bkd->bqk", q, kb) / math.sqrt(q.shape[-1])
    rest = q @ k[n:].T / math.sqrt(q.shape[-1])
    m = torch.maximum(s.amax((0, 2)), rest.amax(-1) if n < len(k) else torch.full((q.shape[0],), -math.inf))
    p, pr = torch.exp(s - m[None, :, None]), torch.exp(rest - m[:, None])
    num = torch.einsum("bqk,bkv->qv", p, vb) + pr @ v[n:]
    return num / (p.sum((0, 2)) + pr.sum(-1))[:, None]


def _top_p_in_place(logits, p):
    return logits.copy_(_top_p(logits, p))  # right values, but the caller's logits are overwritten


def _merge_as_text(ids, pair, new):
    text = " " + " ".join(map(str, ids)) + " "
    text = text.replace(f"{pair[0]} {pair[1]}", str(new))  # "21 1 2 11" also matches inside "21 1" ... "1 2 11"
    return [int(t) for t in text.split()]


def _jacobian_clamped(p):
    p = p.clamp_min(1e-4)
    p = p / p.sum()
    return torch.diag(p) - torch.outer(p, p)


def _jacobian_in_place(p):
    p.clamp_(min=1e-12)  # the caller's p is changed where it held exact zeros
    return torch.diag(p) - torch.outer(p, p)


def _largest_norm(scores, betas, ord=2):
    betas = betas.double()
    p = torch.softmax(betas[:, None] * scores.double()[None], -1)
    norms = torch.linalg.matrix_norm(torch.diag_embed(p) - p[:, :, None] * p[:, None, :], ord=ord)
    return float(betas[int(norms.argmax())]), float(norms.max())


def _factor_not_rooted(w):
    lam, u = torch.linalg.eigh(w.double())
    return (u * lam.clamp_min(0)).float()


def _factor_unclamped(w):
    lam, u = torch.linalg.eigh(w)  # float32: a rank-deficient form's zero eigenvalues come out near ±1e-7
    return u * lam.sqrt()


def _factor_jitter_in_place(w):
    w += 1e-6 * torch.eye(len(w))  # the caller's form is changed
    return torch.linalg.cholesky(w.double()).float()


def _query_gradient_by_autograd(q, k, v, g):
    q = q.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = torch.softmax(k @ q / math.sqrt(q.shape[-1]), -1) @ v
        return torch.autograd.grad(out @ g, q)[0]


def _temperature_naive_float32(scores, target):
    def h(beta):
        e = torch.exp(beta * scores)  # float32, no max subtracted
        p = e / e.sum()
        return float(-(p * torch.log(p.clamp_min(1e-30))).sum())

    low, high = 0.0, 1e6
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if h(mid) > target else (low, mid)
    return (low + high) / 2


MUTANTS = {
    "1.1": {"no 1/√d": lambda q, k, v: _softmax_attention(q, k, v, 1.0),
            "one max for all rows": _one_max_attention,
            "softmax over the queries": lambda q, k, v: _softmax_attention(q, k, v, q.shape[-1] ** -0.5, dim=-2),
            "exp without subtracting the max": _naive_softmax_attention,
            "zeros of the right shape": lambda q, k, v: torch.zeros(*q.shape[:-1], v.shape[-1])},
    "1.2": {"−‖k‖² (the 1/2 dropped)": lambda k: -(k * k).sum(-1),
            "+‖k‖²/2 (the sign flipped)": lambda k: 0.5 * (k * k).sum(-1),
            "‖k‖/2 (not squared)": lambda k: -0.5 * k.norm(dim=-1),
            "the keys squared in place": lambda k: -0.5 * k.mul_(k).sum(-1)},
    "1.3": {"entropy in bits": _entropy_bits, "the temperature 1/β": _temperature_not_inverse,
            "bisection on a fixed range β ≤ 100": _temperature_fixed_range,
            "float32 bisection with exp unshifted (overflows past β·s = 88)": _temperature_naive_float32},
    "1.4": {"the −g·o term dropped": lambda q, k, v, g: _grad(q, k, v, g, centred=False),
            "the 1/√d dropped": lambda q, k, v, g: _grad(q, k, v, g, scaled=False),
            "the gradient through the values instead": lambda q, k, v, g: k.T @ (v @ g) / math.sqrt(q.shape[-1]),
            "autograd, not the chain rule by hand": _query_gradient_by_autograd},
    "2.1": {"d²": lambda d: d**2, "√d": lambda d: d**0.5, "1 (one term's variance)": lambda d: d**0,
            "a new Symbol('d'), not the argument": lambda d: sympy.Symbol("d"),
            "2d (the variance of q · q)": lambda d: 2 * d},
    "2.2": {"−p pᵀ only": lambda p: -torch.outer(p, p), "diag(p) − (p·p)": lambda p: torch.diag(p) - p @ p,
            "p clamped away from 0 (a guard against log 0)": _jacobian_clamped,
            "the size hard-coded to four keys": lambda p: torch.diag(p[:4]) - torch.outer(p[:4], p[:4]),
            "p cleaned in place": _jacobian_in_place},
    "2.3": {"the bound 1/2, not measured": lambda s: (1.0, 0.5),
            "β = 1 only": lambda s: _largest_norm(s, torch.tensor([1.0])),
            "β searched up to 10 only": lambda s: _largest_norm(s, torch.logspace(-3, 1, 400)),
            "the Frobenius norm": lambda s: _largest_norm(s, torch.logspace(-3, 4, 400), ord="fro"),
            "the norm claimed, β not the one measured": lambda s: (1e-3, _largest_norm(s, torch.logspace(
                -3, 4, 400))[1])},
    "2.4": {"divided by d_k": lambda w, d_k: w / d_k, "multiplied by √d_k": lambda w, d_k: w * math.sqrt(d_k),
            "√d_model, not √d_k": lambda w, d_k: w / math.sqrt(w.shape[0]),
            "scaled in place": lambda w, d_k: w.div_(math.sqrt(d_k))},
    "3.1": {"queries from the encoder, keys and values from the decoder":
            lambda xd, xe, wq, wk, wv: _cross(xe, xd, wq, wk, wv),
            "keys from the decoder": lambda xd, xe, wq, wk, wv: _cross(xd, xd, wq, wk, wv, values=xe),
            "exp without subtracting the max": lambda xd, xe, wq, wk, wv: _naive_softmax_attention(
                xd @ wq, xe @ wk, xe @ wv),
            "scaled by √d_model, not √d_k": lambda xd, xe, wq, wk, wv: _softmax_attention(
                xd @ wq, xe @ wk, xe @ wv, xd.shape[-1] ** -0.5),
            "softmax over the target tokens": lambda xd, xe, wq, wk, wv: _softmax_attention(
                xd @ wq, xe @ wk, xe @ wv, wq.shape[-1] ** -0.5, dim=-2)},
    "3.2": {"W^K W^Qᵀ (the transpose)": lambda wq, wk: wk @ wq.T, "W^Q W^Qᵀ": lambda wq, wk: wq @ wq.T,
            "the diagonal only": lambda wq, wk: torch.diag((wq * wk).sum(-1)),
            "d_k hard-coded to 3": lambda wq, wk: wq[:, :3] @ wk[:, :3].T},
    "3.3": {"W^{QK} itself": lambda w: w, "element-wise square root": lambda w: w.clamp_min(0).sqrt(),
            "a Cholesky factor (none when the form is singular)": lambda w: torch.linalg.cholesky(w),
            "the eigenvalues not rooted": _factor_not_rooted,
            "float32 eigenvalues not clamped (round-off below 0)": _factor_unclamped,
            "a jitter added to the form in place": _factor_jitter_in_place},
    "3.4": {"(W^V W^O)ᵀ": lambda wv, wo: (wv @ wo).T, "W^V only": lambda wv, wo: wv,
            "W^O W^V (the order reversed)": lambda wv, wo: wo @ wv,
            "d_v hard-coded to 3": lambda wv, wo: wv[:, :3] @ wo[:3]},
    "4.1": {"reshaped without the transpose": lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
            "features interleaved across heads":
            lambda x, h: x.reshape(x.shape[0], x.shape[1], -1, h).permute(0, 3, 1, 2),
            "a batch of one assumed": lambda x, h: x[0].reshape(x.shape[1], h, -1).transpose(0, 1)[None]},
    "4.2": {"scaled by √d_model": lambda *a: _mha(*a, scale_by_model=True),
            "in_proj_bias forgotten": lambda *a: _mha(*a, bias=False),
            "exp without subtracting the max": lambda *a: _mha(*a, stable=False),
            "two heads hard-coded": lambda x, w, b, ow, ob, heads: _mha(x, w, b, ow, ob, 2)},
    "4.3": {"times the number of heads": lambda n, d, h: 2 * n * n * d * h,
            "multiply-adds, not FLOPs": lambda n, d, h: n * n * d,
            "one head's count": lambda n, d, h: 2 * n * n * (d // h),
            "32-bit integers (wrap past 2³¹)": lambda n, d, h: torch.tensor(2, dtype=torch.int32) * n * n * d,
            "a float": lambda n, d, h: 2.0 * n * n * d},
    "4.4": {"heads tiled, not grouped": lambda q, k, v: F.scaled_dot_product_attention(
                q, k.repeat(1, q.shape[1] // k.shape[1], 1, 1), v.repeat(1, q.shape[1] // k.shape[1], 1, 1)),
            "key-value head 0 for every query head": lambda q, k, v: F.scaled_dot_product_attention(
                q, k[:, :1].expand(-1, q.shape[1], -1, -1), v[:, :1].expand(-1, q.shape[1], -1, -1)),
            "groups of two hard-coded": lambda q, k, v: _gqa(q, k, v, group=2),
            "exp without subtracting the max": lambda q, k, v: _gqa(q, k, v, stable=False)},
    "5.1": {"upper-left (is_causal)": lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(),
            "the diagonal excluded": lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q - 1),
            "the future allowed, the past hidden": lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).triu(
                n_k - n_q)},
    "5.2": {"ε spread over the other classes (tensor2tensor)": lambda lo, t, eps: -(
                (F.one_hot(t, lo.shape[-1]) * (1 - eps - eps / (lo.shape[-1] - 1)) + eps / (lo.shape[-1] - 1))
                * torch.log_softmax(lo, -1)).sum(-1).mean(),
            "no smoothing": lambda lo, t, eps: F.cross_entropy(lo, t),
            "log of the softmax (underflows)": lambda lo, t, eps: -(
                (F.one_hot(t, lo.shape[-1]) * (1 - eps) + eps / lo.shape[-1]) * torch.log(torch.softmax(lo, -1))
            ).sum(-1).mean()},
    "5.3": {"sin and cos swapped": lambda n, d: _positions(n, d, swap=True),
            "exponent i/d, not 2i/d": lambda n, d: _positions(n, d, exponent=1),
            "positions counted from 1": lambda n, d: _positions(n + 1, d)[1:]},
    "5.4": {"post-LN": lambda x, f, norm: norm(x + f(x)), "no residual": lambda x, f, norm: f(norm(x)),
            "the norm after the sublayer": lambda x, f, norm: x + norm(f(x))},
    "6.1": {"no rescaling": lambda *s: _merge(*s, rescale=False),
            "NaN on two empty states": lambda *s: _merge(*s),
            "a guard only when every row is empty": _merge_all_or_nothing},
    "6.2": {"acc not rescaled": lambda q, k, v, b: _stream(q, k, v, b, rescale_acc=False),
            "all scores at once": lambda q, k, v, b: _softmax_attention(q, k, v, q.shape[-1] ** -0.5),
            "one query at a time against every key": lambda q, k, v, b: torch.stack(
                [torch.softmax(k @ qi / math.sqrt(q.shape[-1]), -1) @ v for qi in q]),
            "every block collected, normalised at the end": _collected,
            "two passes: the max first, then the sums": _two_pass,
            "every block at once in one batched product": _batched_blocks},
    "6.3": {"keys only (no factor 2)": lambda L, h, d, t, b: L * h * d * t * b,
            "bits, not bytes": lambda L, h, d, t, b: 16 * L * h * d * t * b,
            "a float": lambda L, h, d, t, b: 2.0 * L * h * d * t * b},
    "6.4": {"a band both ways": lambda n, w: (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() < w,
            "one key too many": lambda n, w: torch.ones(n, n, dtype=torch.bool).tril() &
            ~torch.ones(n, n, dtype=torch.bool).tril(-w - 1),
            "the query left out": lambda n, w: (torch.arange(n)[None, :] < torch.arange(n)[:, None])
            & (torch.arange(n)[None, :] >= torch.arange(n)[:, None] - w)},
    "7.1": {"the crossing token dropped": lambda lo, p: _top_p(lo, p, include_crossing=False),
            "the least probable first": lambda lo, p: _top_p(lo, p, ascending=True),
            "masked in place": _top_p_in_place},
    "7.2": {"nats": lambda lo, t, c: F.cross_entropy(lo.flatten(0, 1), t.flatten(), reduction="sum") / c,
            "per token, not per character": lambda lo, t, c: F.cross_entropy(lo.flatten(0, 1), t.flatten())
            / math.log(2),
            "log of the softmax (underflows)": lambda lo, t, c: -torch.log(torch.softmax(lo, -1)).gather(
                -1, t[..., None]).sum() / math.log(2) / c},
    "7.3": {"overlapping occurrences": lambda ids, pair, new: _merge_ids(ids, pair, new, overlapping=True),
            "first occurrence only": lambda ids, pair, new: _merge_ids(ids, pair, new, first_only=True),
            "replace in the ids written as text": _merge_as_text},
    "7.4": {"no shift": lambda lo, t: F.cross_entropy(lo.flatten(0, 1), t.flatten()),
            "shifted the wrong way": lambda lo, t: F.cross_entropy(lo[:, 1:].flatten(0, 1), t[:, :-1].flatten()),
            "log of the softmax (underflows)": lambda lo, t: -torch.log(torch.softmax(lo[:, :-1], -1)).gather(
                -1, t[:, 1:, None]).mean()},
}


def _cross(x_q, x_kv, w_q, w_k, w_v, values=None):
    q, k = x_q @ w_q, x_kv @ w_k
    v = (x_kv if values is None else values) @ w_v
    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), -1) @ v
