"""Bad inputs for circuits.py: a head's matrices and its QK and OV circuits."""

from __future__ import annotations

import torch

from attention_course.circuits import HeadWeights, head_weights, ov_circuit, qk_circuit, reparametrized
from attention_course.multihead import MultiHeadAttention

from . import case

RESULTS = (HeadWeights,)

W_Q, W_K = torch.randn(6, 2), torch.randn(5, 2)
W_V, W_O = torch.randn(6, 3), torch.randn(3, 6)
MHA = MultiHeadAttention(8, 2)

CASES = [
    # head_weights
    case(head_weights, lambda: head_weights(torch.nn.Linear(2, 2)), TypeError, arg="mha", says="MultiHeadAttention",
         id="circuits.head_weights-module"),
    case(head_weights, lambda: head_weights(None), TypeError, arg="mha", id="circuits.head_weights-none"),
    case(head_weights, lambda: head_weights(MHA, "float64"), TypeError, arg="dtype", says="torch.dtype",
         id="circuits.head_weights-dtype-str"),
    case(head_weights, lambda: head_weights(MHA, torch.int32), TypeError, arg="dtype", says="floating-point",
         id="circuits.head_weights-dtype-int"),
    # qk_circuit
    case(qk_circuit, lambda: qk_circuit(W_Q, torch.randn(5, 3)), ValueError, arg="w_q", says="share d_k",
         id="circuits.qk_circuit-d_k"),
    case(qk_circuit, lambda: qk_circuit(W_Q[0], W_K), ValueError, arg="w_q", says="stack of matrices",
         id="circuits.qk_circuit-1d"),
    case(qk_circuit, lambda: qk_circuit(W_Q.tolist(), W_K), TypeError, arg="w_q", id="circuits.qk_circuit-list"),
    case(qk_circuit, lambda: qk_circuit(W_Q.double(), W_K), TypeError, arg="w_q", says="share a dtype",
         id="circuits.qk_circuit-dtypes"),
    case(qk_circuit, lambda: qk_circuit(W_Q, W_K.to("meta")), ValueError, arg="w_k", says="meta",
         id="circuits.qk_circuit-device"),
    case(qk_circuit, lambda: qk_circuit(W_Q.expand(2, 6, 2), W_K.expand(3, 5, 2)), ValueError, arg="w_q",
         says="broadcast", id="circuits.qk_circuit-heads"),
    # ov_circuit
    case(ov_circuit, lambda: ov_circuit(W_V, torch.randn(4, 6)), ValueError, arg="w_v", says="share d_v",
         id="circuits.ov_circuit-d_v"),
    case(ov_circuit, lambda: ov_circuit(W_V.long(), W_O.long()), TypeError, arg="w_v", says="floating-point",
         id="circuits.ov_circuit-integer"),
    case(ov_circuit, lambda: ov_circuit(W_V.to("meta"), W_O), ValueError, arg="w_v", says="meta",
         id="circuits.ov_circuit-device"),
    case(ov_circuit, lambda: ov_circuit(W_V.expand(2, 6, 3), W_O.expand(3, 3, 6)), ValueError, arg="w_o",
         says="broadcast", id="circuits.ov_circuit-heads"),
    case(ov_circuit, lambda: ov_circuit(W_V, "W_O"), TypeError, arg="w_o", id="circuits.ov_circuit-str"),
    # reparametrized
    case(reparametrized, lambda: reparametrized(torch.nn.Linear(2, 2), torch.eye(4).expand(2, 4, 4)), TypeError,
         arg="mha", says="MultiHeadAttention", id="circuits.reparametrized-module"),
    case(reparametrized, lambda: reparametrized(MHA, torch.eye(4).tolist()), TypeError, arg="m",
         id="circuits.reparametrized-list"),
    case(reparametrized, lambda: reparametrized(MHA, torch.eye(4)), ValueError, arg="m", says="3-D",
         id="circuits.reparametrized-2d"),
    case(reparametrized, lambda: reparametrized(MHA, torch.eye(4).expand(2, 4, 4), torch.eye(3).expand(2, 3, 3)),
         ValueError, arg="n", says="(num_heads, head_dim, head_dim)", id="circuits.reparametrized-shape"),
    case(reparametrized, lambda: reparametrized(MHA, torch.zeros(2, 4, 4)), ValueError, arg="m", says="singular",
         id="circuits.reparametrized-singular"),
    case(reparametrized, lambda: reparametrized(MultiHeadAttention(8, 2, num_kv_heads=1), torch.eye(4).expand(2, 4, 4)),
         ValueError, arg="mha", says="one key and value head", id="circuits.reparametrized-grouped"),
    case(reparametrized, lambda: reparametrized(MHA, torch.eye(4, dtype=torch.long).expand(2, 4, 4)), TypeError,
         arg="m", says="floating-point", id="circuits.reparametrized-integer"),
]
