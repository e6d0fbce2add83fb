"""Bad inputs for flash.py: FlashAttention's forward and backward passes (checked before autograd sees the call)."""

from __future__ import annotations

import numpy as np
import torch

from attention_course.flash import flash_attention, flash_attention_backward

from . import case

Q, K, V = torch.randn(1, 6, 4), torch.randn(1, 6, 4), torch.randn(1, 6, 5)
O, LSE, DO = torch.zeros(1, 6, 5), torch.zeros(1, 6), torch.ones(1, 6, 5)

CASES = [
    case(flash_attention, lambda: flash_attention(Q.numpy(), K, V), TypeError, arg="q", says="torch tensor",
         id="flash.flash_attention-numpy"),
    case(flash_attention, lambda: flash_attention(Q, K.long(), V), TypeError, arg="k", id="flash.flash_attention-int"),
    case(flash_attention, lambda: flash_attention(Q, K[..., :3], V), ValueError, arg="k", says="d_k",
         id="flash.flash_attention-d_k"),
    case(flash_attention, lambda: flash_attention(Q, K, V, mask=np.ones((6, 6))), TypeError, arg="mask",
         id="flash.flash_attention-float-mask"),
    case(flash_attention, lambda: flash_attention(Q, K, V, block_q=0), ValueError, arg="block_q",
         id="flash.flash_attention-block"),
    case(flash_attention, lambda: flash_attention(Q, K, V, causal="yes"), ValueError, arg="causal",
         id="flash.flash_attention-causal"),
    case(flash_attention_backward, lambda: flash_attention_backward(Q, K, V, O, LSE, DO[..., :4]), ValueError,
         arg="grad_out", says="(1, 6, 5)", id="flash.flash_attention_backward-shape"),
    case(flash_attention_backward, lambda: flash_attention_backward(Q, K, V, O, LSE.double(), DO), TypeError,
         arg="lse", says="dtype", id="flash.flash_attention_backward-dtype"),
    case(flash_attention_backward, lambda: flash_attention_backward(Q, K, V, O.tolist(), LSE, DO), TypeError,
         arg="out", id="flash.flash_attention_backward-list"),
]
