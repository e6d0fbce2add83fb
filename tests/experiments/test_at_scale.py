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
    assert set(fns) == {"plain", "naive", "tiled", "F.sdpa"}
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
    with pytest.raises(TypeError, match="q must be a torch tensor .*, got float32 numpy array"):
        compare_implementations(q.numpy(), k, v)


def test_compare_implementations_at_the_edges():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 64, 16, generator=gen) for _ in range(3))
    # bfloat16: every implementation answers in bfloat16, within bfloat16's rounding of the float32 answer
    low = [t.bfloat16() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(q, k, v)
    for name, fn in attention_implementations(*low, block=32).items():
        out = fn()
        assert out.dtype == torch.bfloat16, name
        torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)
    res = compare_implementations(*low, block=32, reps=1, warmup=0, measure_memory=False)
    assert all(r["max_abs_err"] < 3e-2 for r in res.values()) and res["naive"]["max_abs_err"] == 0
    # an empty problem has nothing to race (the naive-vs-others error would be a max over nothing)
    with pytest.raises(ValueError, match="must be non-empty to be raced"):
        compare_implementations(q[:, :0], k, v)
    with pytest.raises(ValueError, match="one device"):
        attention_implementations(q, k.to("meta"), v)
    with pytest.raises(TypeError, match="q, k and v must share a dtype"):
        attention_implementations(q, k.double(), v)


def test_race_plan_sizes_the_gpu_race_for_the_devices_readers_have():
    from fake_devices import A100, CPU, H100, MPS, P100, T4

    from attention_course.experiments.at_scale import NAIVE_BYTES_PER_PAIR, race_plan

    t4 = race_plan(T4)  # Colab: float16, no FlashAttention backend, a shorter sequence
    assert (t4.n, t4.batch, t4.dtype, t4.backends) == (2048, 4, torch.float16, ["mem-efficient"])
    assert set(t4.skipped) == {"flash", "cuDNN"}
    for big in (A100, H100):
        plan = race_plan(big)
        assert (plan.n, plan.batch, plan.dtype, plan.skipped) == (4096, 4, torch.bfloat16, {})
    assert race_plan(P100).dtype == torch.float16
    for plan, info in ((t4, T4), (race_plan(A100), A100)):
        assert plan.planned_bytes <= info.free_bytes // 2
        assert plan.planned_bytes >= NAIVE_BYTES_PER_PAIR * plan.batch * plan.heads * plan.n**2
    assert race_plan(MPS) is None and race_plan(CPU) is None  # the race times CUDA kernels
    small = T4._replace(free_bytes=700 * 2**20)  # a busy GPU: batch shrinks before giving up
    plan = race_plan(small)
    assert (plan.n, plan.batch) == (1024, 1)
    assert race_plan(T4._replace(free_bytes=100 * 2**20)) is None


def test_attention_implementations_races_only_the_backends_asked_for():
    from attention_course.experiments.at_scale import attention_implementations

    q = torch.randn(1, 8, 4)
    assert list(attention_implementations(q, q, q, backends=[])) == ["plain", "naive", "tiled", "F.sdpa"]


def test_plain_attention_is_the_two_matrix_baseline():
    from attention_course.experiments.at_scale import plain_attention
    from attention_course.measure import peak_memory_bytes

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 256, 16, generator=g) for _ in range(3))
    torch.testing.assert_close(plain_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    mask = torch.rand(1, 256, 256, generator=g) > 0.5
    torch.testing.assert_close(plain_attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, mask))
    pairs = 256 * 256 * 4  # bytes of one n × n float32 matrix
    assert 2 * pairs <= peak_memory_bytes(lambda: plain_attention(q, k, v)) < 3 * pairs
