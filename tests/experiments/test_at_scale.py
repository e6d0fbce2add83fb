"""experiments/at_scale.py (chapter 6): the race of naive, tiled and fused attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attention_course.experiments.at_scale import attention_implementations, compare_implementations


@pytest.mark.parametrize("causal", [False, True])
def test_compare_implementations_on_cpu(causal):
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 96, 16, generator=gen) for _ in range(3))
    fns = attention_implementations(q, k, v, causal=causal, block=40)
    assert set(fns) == {"naive", "tiled", "F.sdpa"}
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for fn in fns.values():
        torch.testing.assert_close(fn(), ref, atol=1e-5, rtol=1e-5)
    res = compare_implementations(q, k, v, causal=causal, block=40, reps=2, warmup=0, num_threads=1)
    assert set(res) == set(fns)
    for r in res.values():
        assert r["max_abs_err"] < 1e-5 and r["median_s"] > 0 and r["tflops"] > 0
    assert res["naive"]["max_abs_err"] == 0
    assert res["naive"]["peak_bytes"] >= 2 * 96 * 96 * 4  # it stores the weights of both batch entries
    assert res["tiled"]["peak_bytes"] < res["naive"]["peak_bytes"]
    with pytest.raises(TypeError, match="q must be a torch tensor, got ndarray"):
        compare_implementations(q.numpy(), k, v)
