"""kernels/flash_triton.py compiled for a real GPU: the Triton kernels against float64 attention on CUDA, values and
gradients, over the cases a model meets — every mask (none, both causal alignments, sliding windows), grouped and
multi-query heads, n_q ≠ n_k, one query, rows that see no key, ragged tiles, head sizes from 16 to 128, scores in
the hundreds, non-contiguous inputs, three dtypes, batch × heads past 65,535 — and the backward's promise of the
same gradients on every run, and the atomic dQ of ``deterministic=False`` within the same tolerance.

tests/test_kernels.py checks the same kernels under Triton's CPU interpreter, which is what CI can run; a compiled
kernel can differ from the interpreted one (masked loads, exp2 of -inf, tensor-core rounding), and only a GPU
shows it. This file runs only where CUDA is: CI has no GPU, and `tools/gpu_check.sh` runs it on a lent one. The
kernels compile only in a process without ``TRITON_INTERPRET`` (tests/conftest.py sets it for the unit tests), so
the test runs this file as a script in a fresh Python; ``python tests/test_kernels_cuda.py`` prints each case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# scale-relative tolerance of each dtype, for outputs and for gradients (bfloat16 keeps 8 significant bits, float16
# 11; a float32 tl.dot multiplies in TF32 on a GPU, 11 bits as well)
TOLERANCE = {torch.bfloat16: (2e-2, 4e-2), torch.float16: (4e-3, 1e-2), torch.float32: (4e-3, 1e-2)}

#: (name, dtype, batch, heads, kv_heads, n_q, n_k, d, causal, window, input scale, layout)
CASES = [
    ("float32, n_q < n_k, d 24", torch.float32, 2, 3, 3, 17, 33, 24, False, None, 1.0, "bhnd"),
    ("float16, n_q > n_k, upper-left", torch.float16, 2, 3, 3, 33, 17, 24, "upper_left", None, 1.0, "bhnd"),
    ("one query, one key", torch.bfloat16, 1, 2, 2, 1, 1, 16, False, None, 1.0, "bhnd"),
    ("grouped heads 4:2, causal", torch.bfloat16, 2, 4, 2, 128, 128, 64, True, None, 1.0, "bhnd"),
    ("one key-value head, lower-right, d 128", torch.bfloat16, 1, 4, 1, 200, 300, 128, "lower_right", None, 1.0,
     "bhnd"),
    ("window 64, grouped 6:2, d 80", torch.bfloat16, 1, 6, 2, 257, 257, 80, True, 64, 1.0, "bhnd"),
    ("decoding: 1 query after 512 keys", torch.bfloat16, 1, 2, 2, 1, 513, 64, "lower_right", None, 1.0, "bhnd"),
    ("rows that see no key", torch.bfloat16, 1, 2, 2, 40, 16, 32, "lower_right", None, 1.0, "bhnd"),
    ("scores in the hundreds", torch.bfloat16, 1, 2, 2, 300, 300, 64, False, None, 12.0, "bhnd"),
    ("non-contiguous (batch, n, heads, d)", torch.bfloat16, 2, 2, 2, 100, 100, 64, True, None, 1.0, "bnhd"),
    ("float16, window 100, lower-right, d 128", torch.float16, 1, 2, 2, 1000, 1000, 128, "lower_right", 100, 1.0,
     "bhnd"),
    # batch × heads = 70,000: past the 65,535 a grid's second axis allows (the kernels' grid is one axis)
    ("batch × heads 70,000", torch.float16, 35_000, 2, 2, 4, 4, 16, False, None, 1.0, "bhnd"),
]


def _inputs(case: tuple, seed: int) -> list[torch.Tensor]:
    _, dtype, batch, heads, kv_heads, n_q, n_k, d, _, _, spread, layout = case
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for h, n in ((heads, n_q), (kv_heads, n_k), (kv_heads, n_k)):
        x = spread * torch.randn(batch, n, h, d, generator=g, device="cuda")
        x = x.to(dtype)
        x = x.transpose(1, 2) if layout == "bnhd" else x.transpose(1, 2).contiguous()
        out.append(x.requires_grad_(True))
    return out


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal, window) -> torch.Tensor:
    """float64 attention by the package's scaled_dot_product_attention (tested against PyTorch's) with the mask
    written out by masks.causal_mask; a row that sees no key gives zeros, as the kernels promise."""
    from attention_course.attention import scaled_dot_product_attention
    from attention_course.masks import causal_mask

    groups = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(groups, dim=1) for t in (k, v))
    mask = None
    if causal:
        align = "upper_left" if causal is True else causal
        mask = causal_mask(q.shape[2], k.shape[2], alignment=align, window=window, device="cuda")
    return scaled_dot_product_attention(q.double(), k, v, mask).output


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest difference over the reference's largest value (at least 1): an error relative to the scale."""
    return ((got.double() - want).abs().max() / want.abs().max().clamp(min=1)).item()


def run_cases() -> list[dict]:
    from attention_course.kernels import triton_attention

    results = []
    for seed, case in enumerate(CASES):
        name, dtype, *_, causal, window, _, _ = case
        q, k, v = _inputs(case, seed)
        out = triton_attention(q, k, v, causal=causal, window=window).output
        want = _reference(q, k, v, causal, window)
        d_out = torch.randn(out.shape, generator=torch.Generator(device="cuda").manual_seed(99), device="cuda")
        grads = torch.autograd.grad(out, (q, k, v), d_out.to(out.dtype))
        want_grads = torch.autograd.grad(want, (q, k, v), d_out.double())
        again = torch.autograd.grad(triton_attention(q, k, v, causal=causal, window=window).output, (q, k, v),
                                    d_out.to(out.dtype))
        # FlashAttention-2's order: dQ added atomically by the dK, dV programs (deterministic=False)
        atomic = torch.autograd.grad(triton_attention(q, k, v, causal=causal, window=window,
                                                      deterministic=False).output, (q, k, v), d_out.to(out.dtype))
        tol_out, tol_grad = TOLERANCE[dtype]
        errors = {"output": _error(out, want), **{f"d{n}": _error(g, w) for n, g, w in
                                                  zip("qkv", grads, want_grads, strict=True)}}
        results.append({"case": name, "dtype": str(dtype).removeprefix("torch."), "errors": errors,
                        "finite": all(bool(t.isfinite().all()) for t in (out, *grads)),
                        "within": errors["output"] <= tol_out and max(errors.values()) <= tol_grad,
                        "atomic_within": max(_error(g, w) for g, w in zip(atomic, want_grads, strict=True))
                        <= tol_grad,
                        "deterministic": all(torch.equal(a, b) for a, b in zip(grads, again, strict=True))})
    return results


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none; tools/gpu_check.sh "
                    "runs this on a lent one); tests/test_kernels.py checks the kernels under the CPU interpreter")
def test_compiled_kernels_match_float64_attention_on_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, __file__, "--json"], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(CASES)
    bad = [r for r in results if not (r["within"] and r["finite"] and r["deterministic"] and r["atomic_within"])]
    assert not bad, bad


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("run without TRITON_INTERPRET: this file compiles the kernels for the GPU")
    found = run_cases()
    if "--json" in sys.argv:
        print(json.dumps(found))
    else:
        for r in found:
            flags = "ok" if r["within"] and r["finite"] and r["deterministic"] and r["atomic_within"] else "FAIL"
            errs = ", ".join(f"{k} {v:.1e}" for k, v in r["errors"].items())
            print(f"{flags:4} {r['case']} ({r['dtype']}): {errs}; deterministic {r['deterministic']}, "
                  f"atomic dQ within tolerance {r['atomic_within']}")
