"""Bad inputs for kernels/flash_triton.py: every check runs before triton is imported, so these cases run (and
pass) on machines without triton too."""

from __future__ import annotations

import torch

from attention_course.kernels.flash_triton import triton_attention

from . import case

Q = torch.randn(1, 2, 5, 16)
KV = torch.randn(1, 2, 7, 16)

CASES = [
    case(triton_attention, lambda: triton_attention(Q.numpy(), KV, KV), TypeError, arg="q", says="torch tensor",
         id="kernels.triton_attention-numpy"),
    case(triton_attention, lambda: triton_attention(Q[0], KV, KV), ValueError, arg="q", says="4-D",
         id="kernels.triton_attention-3d"),
    case(triton_attention, lambda: triton_attention(Q.double(), KV.double(), KV.double()), TypeError, arg="q",
         says="float32, float16 or bfloat16", id="kernels.triton_attention-float64"),
    case(triton_attention, lambda: triton_attention(Q, KV.half(), KV), TypeError, arg="k", says="dtype of q",
         id="kernels.triton_attention-mixed-dtypes"),
    case(triton_attention, lambda: triton_attention(Q, KV.long(), KV), TypeError, arg="k",
         id="kernels.triton_attention-int"),
    case(triton_attention, lambda: triton_attention(Q, KV[..., :8], KV), ValueError, arg="k",
         says="(1, kv_heads, n_k, 16)",
         id="kernels.triton_attention-d"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV[:, :1]), ValueError, arg="v", says="(1, 2, 7, 16)",
         id="kernels.triton_attention-v-shape"),
    case(triton_attention, lambda: triton_attention(Q[:, :, :0], KV, KV), ValueError, arg="q", says="empty",
         id="kernels.triton_attention-empty"),
    case(triton_attention, lambda: triton_attention(*(torch.zeros(1, 1, 2, 300),) * 3), ValueError, arg="q",
         says="256", id="kernels.triton_attention-head-size"),
    case(triton_attention, lambda: triton_attention(Q.to("meta"), KV, KV), ValueError, arg="q", says="one device",
         id="kernels.triton_attention-devices"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, causal="yes"), ValueError, arg="causal",
         id="kernels.triton_attention-causal"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, causal=1.0), TypeError, arg="causal",
         id="kernels.triton_attention-causal-float"),
    case(triton_attention, lambda: triton_attention(Q, KV[:, :1].expand(1, 3, 7, 16)[:, :3], KV), ValueError,
         arg="k", says="dividing q's 2 heads", id="kernels.triton_attention-kv-heads"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, causal=True, window=0), ValueError, arg="window",
         id="kernels.triton_attention-window-zero"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, causal=True, window=2.5), TypeError, arg="window",
         id="kernels.triton_attention-window-float"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, window=4), ValueError, arg="window",
         says="causal", id="kernels.triton_attention-window-not-causal"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, scale=float("nan")), ValueError, arg="scale",
         id="kernels.triton_attention-scale"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, block_q=24), ValueError, arg="block_q",
         says="power of two", id="kernels.triton_attention-block_q"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, autotune="yes"), TypeError, arg="autotune",
         id="kernels.triton_attention-autotune"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, block_k=8), ValueError, arg="block_k",
         id="kernels.triton_attention-block_k"),
    case(triton_attention, lambda: triton_attention(Q, KV, KV, deterministic=None), TypeError, arg="deterministic",
         id="kernels.triton_attention-deterministic"),
    case(triton_attention, lambda: triton_attention(Q, torch.zeros(1, 2, 1, 16).expand(1, 2, 2**30 + 1, 16),
                                                    torch.zeros(1, 2, 1, 16).expand(1, 2, 2**30 + 1, 16)),
         ValueError, arg="q", says="1073741824 positions", id="kernels.triton_attention-too-long"),
]
