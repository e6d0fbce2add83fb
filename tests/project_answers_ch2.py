"""Chapter 2's project (exercise 2.5, the saturation curves measured from scratch): plausible wrong answers, which its
check must reject, and correct answers written another way, which it must accept (tests/test_exercises.py)."""

from __future__ import annotations

import math

import numpy as np
import torch


def _curves(d_ks, n_keys, rows, generator, *, scale=None, stable=True, log_of_p=False, axis=-1, one_row=False,
            units=1.0, k_first=False, outside=False, own_rng=True, per_row_keys=False, ready_made=False):
    """The solution (solutions/ch02.py) with one switch per mistake."""
    scale = scale or (lambda d: 1 / math.sqrt(d))
    draw = generator if own_rng else None  # None: the global random state
    scaled, unscaled = [], []
    for d_k in d_ks:
        if per_row_keys:  # every row its own keys: other draws
            q = torch.randn(rows, d_k, generator=draw)
            raw = (torch.randn(rows, n_keys, d_k, generator=draw) @ q[:, :, None])[..., 0]
        else:
            if k_first:
                k = torch.randn(n_keys, d_k, generator=draw)
                q = torch.randn(rows, d_k, generator=draw)
            else:
                q = torch.randn(rows, d_k, generator=draw)
                k = torch.randn(n_keys, d_k, generator=draw)
            raw = q @ k.T
        factor = 1.0 if outside else scale(d_k)
        for curve, scores in ((scaled, raw * factor), (unscaled, raw)):
            if ready_made:
                log_p = torch.log_softmax(scores, dim=axis)
                p = log_p.exp()
            else:
                shifted = scores - scores.amax(dim=axis, keepdim=True) if stable else scores
                e = shifted.exp()
                total = e.sum(dim=axis, keepdim=True)
                p = e / total
                log_p = p.log() if log_of_p else shifted - total.log()
            if outside and curve is scaled:  # the factor on the weights, after the softmax
                p, log_p = p * scale(d_k), log_p + math.log(scale(d_k))
            entropy = -(p * log_p).sum(dim=-1) / units
            largest = p.amax(dim=-1)
            jacobian = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
            size = jacobian.pow(2).sum(dim=(-2, -1)).sqrt()
            stats = (entropy[0], largest[0], size[0]) if one_row else (entropy.mean(), largest.mean(), size.mean())
            curve.append(torch.stack(stats))
    return torch.stack(scaled), torch.stack(unscaled)


MUTANTS = {
    "2.5": {
        "the scale 1/d_k instead of 1/√d_k": lambda *a: _curves(*a, scale=lambda d: 1 / d),
        "no max subtracted: exp overflows on unscaled scores near 100": lambda *a: _curves(*a, stable=False),
        "log p as log(p): a weight that underflows to 0 gives 0 · log 0 = NaN": lambda *a: _curves(*a, log_of_p=True),
        "the softmax over the rows (dim=0), not over the keys": lambda *a: _curves(*a, axis=0),
        "the first row's statistics, not the mean over the rows": lambda *a: _curves(*a, one_row=True),
        "the entropy in bits, not nats": lambda *a: _curves(*a, units=math.log(2)),
        "k drawn before q": lambda *a: _curves(*a, k_first=True),
        "each row its own keys, k of shape (rows, n_keys, d_k)": lambda *a: _curves(*a, per_row_keys=True),
        "the factor outside the softmax: the unscaled weights times 1/√d_k": lambda *a: _curves(*a, outside=True),
        "draws from the global random state, not the generator": lambda *a: _curves(*a, own_rng=False),
        "torch.log_softmax instead of the softmax written out": lambda *a: _curves(*a, ready_made=True),
    },
}


def _closed_forms64(d_ks, n_keys, rows, generator):
    """float64 after the draws, einsum for the scores; the entropy as log Z − Σ p s (s shifted by its max) and
    ‖J‖_F² = Σp² − 2Σp³ + (Σp²)², which cancels badly in float32 near one-hot rows but not in float64."""
    out = {"scaled": [], "unscaled": []}
    for d_k in d_ks:
        q = torch.randn(rows, d_k, generator=generator).double()
        k = torch.randn(n_keys, d_k, generator=generator).double()
        raw = torch.einsum("rd,nd->rn", q, k)
        for name, factor in (("scaled", d_k**-0.5), ("unscaled", 1.0)):
            s = raw * factor
            s = s - s.max(dim=1, keepdim=True).values
            z = s.exp().sum(dim=1)
            p = s.exp() / z[:, None]
            entropy = z.log() - (p * s).sum(dim=1)
            two, three = (p**2).sum(dim=1), (p**3).sum(dim=1)
            frobenius = (two - 2 * three + two**2).clamp_min(0).sqrt()
            out[name].append([entropy.mean(), p.max(dim=1).values.mean(), frobenius.mean()])
    return tuple(torch.tensor(out[name]) for name in ("scaled", "unscaled"))


def _numpy_lists(d_ks, n_keys, rows, generator):
    """The draws from the generator, then NumPy in float64 (np.linalg.norm for ‖J‖_F); returns nested lists of
    Python floats."""
    curves = ([], [])
    for d_k in d_ks:
        q = torch.randn(rows, d_k, generator=generator).numpy().astype(np.float64)
        k = torch.randn(n_keys, d_k, generator=generator).numpy().astype(np.float64)
        raw = q @ k.T
        for curve, scores in zip(curves, (raw / np.sqrt(d_k), raw), strict=True):
            shifted = scores - scores.max(axis=1, keepdims=True)
            log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            p = np.exp(log_p)
            jacobian = p[:, :, None] * np.eye(n_keys) - p[:, :, None] * p[:, None, :]
            curve.append([float(-(p * log_p).sum(axis=1).mean()), float(p.max(axis=1).mean()),
                          float(np.linalg.norm(jacobian, axis=(1, 2)).mean())])
    return curves


ALTERNATIVES = {
    "2.5": {
        "float64 and einsum, the entropy and ‖J‖_F from closed forms": _closed_forms64,
        "NumPy in float64, nested lists of floats": _numpy_lists,
    },
}
