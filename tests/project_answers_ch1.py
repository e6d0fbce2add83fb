"""Chapter 1's project (exercise 1.5, attention's forward and backward by hand): plausible wrong answers, which its
check must reject, and correct answers written another way, which it must accept (tests/test_exercises.py)."""

from __future__ import annotations

import math

import torch


def _by_hand(q, k, v, grad_out, *, stable=True, row_sum=True, key_scale=True, in_place=False, swap=None):
    """The solution (solutions/ch01.py) with one switch per mistake."""
    swap = swap or (lambda x: x.transpose(-2, -1))
    scale = 1 / math.sqrt(q.shape[-1])
    if in_place:
        q.mul_(scale)  # scales the caller's q: the values come out right, the input does not survive
        s = q @ swap(k)
    else:
        s = q @ swap(k) * scale
    e = (s - s.amax(dim=-1, keepdim=True) if stable else s).exp()
    p = e / e.sum(dim=-1, keepdim=True)
    out = p @ v
    grad_v = swap(p) @ grad_out
    grad_p = grad_out @ swap(v)
    grad_s = p * (grad_p - (p * grad_p).sum(dim=-1, keepdim=True)) if row_sum else p * grad_p
    if in_place:
        return out, grad_s @ k * scale, swap(grad_s) @ q, grad_v  # q already carries the scale
    return out, grad_s @ k * scale, swap(grad_s) @ q * (scale if key_scale else 1), grad_v


def _with_autograd(q, k, v, grad_out):
    """Right values, by autograd: what the project forbids."""
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
        grads = torch.autograd.grad(out, (q, k, v), grad_out)
    return (out.detach(), *grads)


MUTANTS = {
    "1.5": {
        "the softmax's backward without the row-sum term": lambda *a: _by_hand(*a, row_sum=False),
        "no max subtracted: exp overflows on scores in the hundreds": lambda *a: _by_hand(*a, stable=False),
        "∂L/∂k without the 1/√d": lambda *a: _by_hand(*a, key_scale=False),
        "2-D only: transpose(0, 1) swaps a batch's leading axes, not its matrices'": lambda *a: _by_hand(
            *a, swap=lambda x: x.transpose(0, 1)),
        "scales q in place": lambda *a: _by_hand(*a, in_place=True),
        "autograd inside (torch.autograd.grad under enable_grad)": _with_autograd,
    },
}


def _einsum64(q, k, v, grad_out):
    """The same chain rule in einsum and float64, cast back; the row sum taken as grad_out · out."""
    q64, k64, v64, g64 = (t.double() for t in (q, k, v, grad_out))
    s = torch.einsum("...qd,...kd->...qk", q64, k64) / math.sqrt(q.shape[-1])
    p = torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))
    out = torch.einsum("...qk,...kv->...qv", p, v64)
    grad_p = torch.einsum("...qv,...kv->...qk", g64, v64)
    grad_s = p * (grad_p - (g64 * out).sum(-1, keepdim=True))
    grad_q = torch.einsum("...qk,...kd->...qd", grad_s, k64) / math.sqrt(q.shape[-1])
    grad_k = torch.einsum("...qk,...qd->...kd", grad_s, q64) / math.sqrt(q.shape[-1])
    grad_v = torch.einsum("...qk,...qv->...kv", p, g64)
    return tuple(t.to(q.dtype) for t in (out, grad_q, grad_k, grad_v))


def _query_by_query(q, k, v, grad_out):
    """A loop over the leading axes and the queries: exercise 1.4's one-query gradient, the softmax's Jacobian
    as a matrix diag(p) − p pᵀ, and each query's share of the keys' and the values' gradients added up."""
    lead, d = q.shape[:-2], q.shape[-1]
    qs, ks, vs, gs = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v, grad_out))
    outs, grad_qs, grad_ks, grad_vs = [], [], [], []
    for qb, kb, vb, gb in zip(qs, ks, vs, gs, strict=True):
        grad_k, grad_v = torch.zeros_like(kb), torch.zeros_like(vb)
        rows_out, rows_q = [], []
        for qa, ga in zip(qb, gb, strict=True):
            s = kb @ qa / math.sqrt(d)
            p = torch.softmax(s, dim=0)
            grad_s = (torch.diag(p) - torch.outer(p, p)) @ (vb @ ga)
            rows_out.append(p @ vb)
            rows_q.append(grad_s @ kb / math.sqrt(d))
            grad_k += torch.outer(grad_s, qa) / math.sqrt(d)
            grad_v += torch.outer(p, ga)
        outs.append(torch.stack(rows_out))
        grad_qs.append(torch.stack(rows_q))
        grad_ks.append(grad_k)
        grad_vs.append(grad_v)
    return tuple(torch.stack(x).reshape(*lead, *x[0].shape) for x in (outs, grad_qs, grad_ks, grad_vs))


ALTERNATIVES = {
    "1.5": {
        "einsum and logsumexp in float64, row sum as grad_out · out": _einsum64,
        "loops over the batch and the queries, the softmax's Jacobian as a matrix": _query_by_query,
    },
}
