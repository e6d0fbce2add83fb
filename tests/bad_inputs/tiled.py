"""Bad inputs for tiled.py: the (m, ℓ, acc) states and their merge, the online softmax, tiled attention."""

from __future__ import annotations

import numpy as np
import torch

from attention_course.tiled import (
    SoftmaxState,
    TiledOutput,
    TileStep,
    empty_state,
    merge_states,
    online_softmax,
    softmax_state,
    state_logsumexp,
    state_output,
    tiled_attention,
    tiled_attention_steps,
)

from . import case

RESULTS = (TiledOutput, TileStep)

Q, K, V = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 6)
S, VALUES = torch.randn(3, 5), torch.randn(5, 2)
M, L, ACC = torch.zeros(3), torch.ones(3), torch.zeros(3, 2)
STATE, PLAIN = SoftmaxState(M, L, ACC), SoftmaxState(M, L)
steps = tiled_attention_steps

CASES = [
    # SoftmaxState
    case(SoftmaxState, lambda: SoftmaxState(M.numpy(), L), TypeError, arg="m", says="torch tensor",
         id="tiled.SoftmaxState-numpy"),
    case(SoftmaxState, lambda: SoftmaxState(M, torch.ones(4)), ValueError, arg="l", says="(3,)",
         id="tiled.SoftmaxState-l-shape"),
    case(SoftmaxState, lambda: SoftmaxState(M, L, torch.zeros(4, 2)), ValueError, arg="acc", says="d_v",
         id="tiled.SoftmaxState-acc-shape"),
    case(SoftmaxState, lambda: SoftmaxState(M, L.long()), TypeError, arg="l", says="floating-point",
         id="tiled.SoftmaxState-integer"),
    case(SoftmaxState, lambda: SoftmaxState(M, L, ACC.to("meta")), ValueError, arg="acc", says="meta",
         id="tiled.SoftmaxState-device"),
    # empty_state
    case(empty_state, lambda: empty_state(3), TypeError, arg="rows", says="tuple", id="tiled.empty_state-int"),
    case(empty_state, lambda: empty_state((2, -1)), ValueError, arg="rows", says="non-negative",
         id="tiled.empty_state-negative"),
    case(empty_state, lambda: empty_state((2,), d_v=-1), ValueError, arg="d_v", id="tiled.empty_state-d_v"),
    case(empty_state, lambda: empty_state((2,), d_v=2.0), TypeError, arg="d_v", id="tiled.empty_state-d_v-float"),
    case(empty_state, lambda: empty_state((2,), dtype=torch.int64), TypeError, arg="dtype", says="floating-point",
         id="tiled.empty_state-dtype"),
    case(empty_state, lambda: empty_state((2,), device="gpu7"), ValueError, arg="device",
         id="tiled.empty_state-device"),
    # softmax_state
    case(softmax_state, lambda: softmax_state(S.tolist()), TypeError, arg="scores", id="tiled.softmax_state-list"),
    case(softmax_state, lambda: softmax_state(torch.tensor(1.0)), ValueError, arg="scores",
         says="at least 1 dimensions", id="tiled.softmax_state-scalar"),
    case(softmax_state, lambda: softmax_state(S, torch.randn(4, 2)), ValueError, arg="values", says="n = 5",
         id="tiled.softmax_state-values-n"),
    case(softmax_state, lambda: softmax_state(S, torch.randn(2, 5, 2)), ValueError, arg="values",
         says="leading dimensions", id="tiled.softmax_state-values-batch"),
    case(softmax_state, lambda: softmax_state(S, VALUES.double()), TypeError, arg="values", says="float32",
         id="tiled.softmax_state-values-dtype"),
    case(softmax_state, lambda: softmax_state(S, VALUES.to("meta")), ValueError, arg="values", says="meta",
         id="tiled.softmax_state-device"),
    case(softmax_state, lambda: softmax_state(S, mask=torch.ones(3, 5)), TypeError, arg="mask", says="boolean",
         id="tiled.softmax_state-float-mask"),
    case(softmax_state, lambda: softmax_state(S, mask=torch.ones(5, 3, dtype=torch.bool)), ValueError, arg="mask",
         id="tiled.softmax_state-mask-shape"),
    # merge_states
    case(merge_states, lambda: merge_states(STATE, (M, L, ACC)), TypeError, arg="b", says="SoftmaxState",
         id="tiled.merge_states-tuple"),
    case(merge_states, lambda: merge_states(STATE, PLAIN), ValueError, arg="acc", id="tiled.merge_states-acc"),
    case(merge_states, lambda: merge_states(PLAIN, SoftmaxState(torch.zeros(4), torch.ones(4))), ValueError,
         arg="rows", id="tiled.merge_states-rows"),
    case(merge_states, lambda: merge_states(STATE, SoftmaxState(M, L, torch.zeros(3, 5))), ValueError, arg="d_v",
         id="tiled.merge_states-d_v"),
    case(merge_states, lambda: merge_states(PLAIN, SoftmaxState(M.to("meta"), L.to("meta"))), ValueError, arg="b",
         says="meta", id="tiled.merge_states-device"),
    # state_output, state_logsumexp
    case(state_output, lambda: state_output(PLAIN), ValueError, arg="state", says="acc",
         id="tiled.state_output-no-values"),
    case(state_output, lambda: state_output((M, L, ACC)), TypeError, arg="state", says="SoftmaxState",
         id="tiled.state_output-tuple"),
    case(state_logsumexp, lambda: state_logsumexp(None), TypeError, arg="state", says="SoftmaxState",
         id="tiled.state_logsumexp-none"),
    case(state_logsumexp, lambda: state_logsumexp(M), TypeError, arg="state", id="tiled.state_logsumexp-tensor"),
    # online_softmax
    case(online_softmax, lambda: online_softmax(S, block_size=0), ValueError, arg="block_size",
         says="positive", id="tiled.online_softmax-block-zero"),
    case(online_softmax, lambda: online_softmax(S, block_size=2.0), TypeError, arg="block_size",
         id="tiled.online_softmax-block-float"),
    case(online_softmax, lambda: online_softmax(S, axis=2), ValueError, arg="axis", id="tiled.online_softmax-axis"),
    case(online_softmax, lambda: online_softmax([1.0, 2.0]), TypeError, arg="x", id="tiled.online_softmax-list"),
    case(online_softmax, lambda: online_softmax(np.arange(3)), TypeError, arg="x", says="floating-point",
         id="tiled.online_softmax-integer"),
    case(online_softmax, lambda: online_softmax(S, mask=S), TypeError, arg="mask",
         id="tiled.online_softmax-float-mask"),
    case(online_softmax, lambda: online_softmax(S, mask=torch.ones(3, 5, dtype=torch.bool, device="meta")),
         ValueError, arg="mask", says="meta", id="tiled.online_softmax-device"),
    # tiled_attention
    case(tiled_attention, lambda: tiled_attention(Q, K, V, block_q=0), ValueError, arg="block_q",
         says="positive", id="tiled.tiled_attention-block_q-zero"),
    case(tiled_attention, lambda: tiled_attention(Q, K, V, block_k=2.5), TypeError, arg="block_k",
         id="tiled.tiled_attention-block_k-float"),
    case(tiled_attention, lambda: tiled_attention(Q, K, V, block_k=True), TypeError, arg="block_k",
         id="tiled.tiled_attention-block_k-bool"),
    case(tiled_attention, lambda: tiled_attention(Q, K, V, causal=1), TypeError, arg="causal",
         says=("True, False", "'lower_right'"), id="tiled.tiled_attention-causal-int"),
    case(tiled_attention, lambda: tiled_attention(Q, K, V, causal="lower-right"), ValueError, arg="causal",
         says="'lower_right'", id="tiled.tiled_attention-causal-str"),
    case(tiled_attention, lambda: tiled_attention(Q, K.to("meta"), V.to("meta")), ValueError, arg="k",
         says="meta", id="tiled.tiled_attention-device"),
    case(tiled_attention, lambda: tiled_attention(Q, K, V, mask=torch.zeros(3, 5)), TypeError, arg="mask",
         says="boolean", id="tiled.tiled_attention-float-mask"),
    case(tiled_attention, lambda: tiled_attention(Q, K, torch.randn(4, 6)), ValueError, arg="n_k",
         id="tiled.tiled_attention-n_k"),
    case(tiled_attention, lambda: tiled_attention(Q.half(), K, V), TypeError, arg="q", says="share a dtype",
         id="tiled.tiled_attention-dtypes"),
    case(tiled_attention, lambda: tiled_attention(Q, K, V, scale=float("inf")), ValueError, arg="scale",
         id="tiled.tiled_attention-scale"),
    # tiled_attention_steps: checked at the call, not at the first step
    case(steps, lambda: steps(Q, K, V, block=8), TypeError, arg="options", says="block_q",
         id="tiled.tiled_attention_steps-option"),
    case(steps, lambda: steps(Q, K, V, block_q=-1), ValueError, arg="block_q", id="tiled.tiled_attention_steps-block"),
    case(steps, lambda: steps(Q, K.tolist(), V), TypeError, arg="k", id="tiled.tiled_attention_steps-list"),
    case(steps, lambda: steps(Q, K, V, causal=None), TypeError, arg="causal", id="tiled.tiled_attention_steps-causal"),
]

CASES += [
    case(SoftmaxState, lambda: SoftmaxState(torch.zeros(2), torch.ones(2, dtype=torch.float64), None), TypeError,
         arg="l", says="share a dtype", id="tiled.SoftmaxState-dtypes"),
]
