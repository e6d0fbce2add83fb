"""Bad inputs for experiments/at_scale.py: chapter 6's race of attention implementations (checked before anything
runs)."""

from __future__ import annotations

import torch

from attention_course.device import DeviceInfo
from attention_course.experiments.at_scale import (
    RacePlan,
    attention_implementations,
    compare_implementations,
    plain_attention,
    race_plan,
)

from . import case

Q, K, V = torch.randn(1, 8, 4), torch.randn(1, 8, 4), torch.randn(1, 8, 4)
A100 = DeviceInfo("cuda", "NVIDIA A100-SXM4-40GB", 40 * 2**30, 39 * 2**30, (8, 0))
RESULTS = (RacePlan,)

CASES = [
    case(attention_implementations, lambda: attention_implementations(Q.tolist(), K, V), TypeError, arg="q",
         says="torch tensor", id="at_scale.attention_implementations-list"),
    case(attention_implementations, lambda: attention_implementations(Q, K.long(), V), TypeError, arg="k",
         says="floating", id="at_scale.attention_implementations-integer-k"),
    case(attention_implementations, lambda: attention_implementations(Q, K[..., :3], V), ValueError, arg="k",
         says="d_k", id="at_scale.attention_implementations-d_k-mismatch"),
    case(attention_implementations, lambda: attention_implementations(Q, K, V.double()), TypeError, arg="v",
         says="share a dtype", id="at_scale.attention_implementations-dtype"),
    case(attention_implementations, lambda: attention_implementations(Q, K, V.to("meta")), ValueError, arg="v",
         says="meta", id="at_scale.attention_implementations-device"),
    case(attention_implementations, lambda: attention_implementations(Q, K, V, block=0), ValueError, arg="block",
         id="at_scale.attention_implementations-block-zero"),
    case(attention_implementations, lambda: attention_implementations(Q, K, V, causal=None), TypeError,
         arg="causal", id="at_scale.attention_implementations-causal-none"),
    case(compare_implementations, lambda: compare_implementations(Q.numpy(), K, V), TypeError, arg="q",
         says="numpy array", id="at_scale.compare_implementations-numpy"),
    case(compare_implementations, lambda: compare_implementations(Q[:, :0], K, V), ValueError, arg="q",
         says="non-empty", id="at_scale.compare_implementations-empty"),
    case(compare_implementations, lambda: compare_implementations(Q, K, V, reps=0), ValueError, arg="reps",
         id="at_scale.compare_implementations-reps-zero"),
    case(compare_implementations, lambda: compare_implementations(Q, K, V, warmup=-1), ValueError, arg="warmup",
         id="at_scale.compare_implementations-warmup-negative"),
    case(compare_implementations, lambda: compare_implementations(Q, K, V, num_threads=1.0), TypeError,
         arg="num_threads", id="at_scale.compare_implementations-num_threads-float"),
    case(compare_implementations, lambda: compare_implementations(Q, K, V, measure_memory="yes"), TypeError,
         arg="measure_memory", id="at_scale.compare_implementations-measure_memory-str"),
    case(compare_implementations, lambda: compare_implementations(*(t.to("meta") for t in (Q, K, V))), ValueError,
         arg="q", says="measure_memory=False", id="at_scale.compare_implementations-memory-on-meta"),
    case(compare_implementations, lambda: compare_implementations(Q, K, V, block=2.5), TypeError, arg="block",
         id="at_scale.compare_implementations-block-float"),
    case(attention_implementations, lambda: attention_implementations(Q, K, V, backends="flash"), TypeError,
         arg="backends", says="iterable", id="at_scale.attention_implementations-backends-string"),
    case(compare_implementations, lambda: compare_implementations(Q, K, V, backends=["flashy"]), ValueError,
         arg="backends", says="flashy", id="at_scale.compare_implementations-backends-unknown"),
    case(race_plan, lambda: race_plan(A100, sizes=[1024, 0]), ValueError, arg="sizes[1]",
         id="at_scale.race_plan-size-zero"),
    case(race_plan, lambda: race_plan(A100, sizes=4096), TypeError, arg="sizes", id="at_scale.race_plan-int"),
    case(race_plan, lambda: race_plan(A100, heads=1.5), TypeError, arg="heads", id="at_scale.race_plan-heads"),
    case(race_plan, lambda: race_plan("A100"), TypeError, arg="info", id="at_scale.race_plan-info"),
    case(plain_attention, lambda: plain_attention(Q, K, V.double()), TypeError, arg="v", says="share a dtype",
         id="at_scale.plain_attention-dtype"),
    case(plain_attention, lambda: plain_attention(Q, K, V, mask=torch.ones(8, 8)), TypeError, arg="mask",
         id="at_scale.plain_attention-float-mask"),
]
