"""Bad inputs for attention.py: softmax, scaled dot-product attention, the per-query loop, the hard lookup, the
entropy of attention rows."""

from __future__ import annotations

import numpy as np
import torch

from attention_course.attention import (
    AttentionOutput,
    argmax_attention,
    attention_entropy,
    attention_per_query,
    hard_lookup,
    scaled_dot_product_attention,
    softmax,
)

from . import case

RESULTS = (AttentionOutput,)

Q, K, V = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 6)
MASK = torch.ones(3, 5, dtype=torch.bool)
X = torch.randn(3, 5)
KEYS, VALUES = ["a", "b"], [np.ones(2), np.zeros(2)]
sdpa = scaled_dot_product_attention

CASES = [
    # softmax
    case(softmax, lambda: softmax([1.0, 2.0]), TypeError, arg="x", says="numpy array", id="attention.softmax-list"),
    case(softmax, lambda: softmax(torch.arange(3)), TypeError, arg="x", says="floating-point",
         id="attention.softmax-integer"),
    case(softmax, lambda: softmax(X, axis=2), ValueError, arg="axis", says="[-2, 1]", id="attention.softmax-axis"),
    case(softmax, lambda: softmax(X, axis=1.0), TypeError, arg="axis", id="attention.softmax-axis-float"),
    case(softmax, lambda: softmax(X, mask=torch.zeros(3, 5)), TypeError, arg="mask",
         says="boolean", id="attention.softmax-float-mask"),
    case(softmax, lambda: softmax(X, mask=torch.ones(5, 3, dtype=torch.bool)), ValueError, arg="mask",
         says="(3, 5)", id="attention.softmax-mask-shape"),
    case(softmax, lambda: softmax(X, mask=torch.ones(3, 5, dtype=torch.bool, device="meta")), ValueError, arg="mask",
         says="meta", id="attention.softmax-mask-device"),
    # scaled_dot_product_attention
    case(sdpa, lambda: sdpa(Q.tolist(), K, V), TypeError, arg="q", says="numpy array", id="attention.sdpa-list"),
    case(sdpa, lambda: sdpa(Q.long(), K.long(), V.long()), TypeError, arg="q", says="floating-point",
         id="attention.sdpa-integer"),
    case(sdpa, lambda: sdpa(Q.double(), K, V), TypeError, arg="q", says="share a dtype", id="attention.sdpa-dtypes"),
    case(sdpa, lambda: sdpa(Q, torch.randn(5, 7), V), ValueError, arg="d_k", id="attention.sdpa-d_k"),
    case(sdpa, lambda: sdpa(Q, K, torch.randn(4, 6)), ValueError, arg="n_k", id="attention.sdpa-n_k"),
    case(sdpa, lambda: sdpa(Q[0], K, V), ValueError, arg="q", says="at least 2 dimensions", id="attention.sdpa-1d"),
    case(sdpa, lambda: sdpa(Q.expand(2, 3, 4), K.expand(3, 5, 4), V), ValueError, arg="q", says="broadcastable",
         id="attention.sdpa-batch"),
    case(sdpa, lambda: sdpa(Q, K.to("meta"), V), ValueError, arg="k", says="meta", id="attention.sdpa-device"),
    case(sdpa, lambda: sdpa(Q, K, V, mask=torch.zeros(3, 5)), TypeError, arg="mask", says="additive",
         id="attention.sdpa-float-mask"),
    case(sdpa, lambda: sdpa(Q, K, V, mask=torch.ones(5, 3, dtype=torch.bool)), ValueError, arg="mask",
         says="(3, 5)", id="attention.sdpa-mask-shape"),
    case(sdpa, lambda: sdpa(Q, K, V, mask=MASK.to("meta")), ValueError, arg="mask", says="meta",
         id="attention.sdpa-mask-device"),
    case(sdpa, lambda: sdpa(Q, K, V, scale=float("nan")), ValueError, arg="scale", id="attention.sdpa-scale-nan"),
    case(sdpa, lambda: sdpa(Q, K, V, scale="0.5"), TypeError, arg="scale", id="attention.sdpa-scale-str"),
    # attention_per_query
    case(attention_per_query, lambda: attention_per_query(Q[None], K[None], V[None]), ValueError, arg="q",
         says="(n_q, d_k)", id="attention.attention_per_query-3d"),
    case(attention_per_query, lambda: attention_per_query(Q, K, V.tolist()), TypeError, arg="v",
         id="attention.attention_per_query-list"),
    case(attention_per_query, lambda: attention_per_query(Q, K, V[:4]), ValueError, arg="n_k",
         id="attention.attention_per_query-n_k"),
    case(attention_per_query, lambda: attention_per_query(Q, K, V, scale=float("inf")), ValueError, arg="scale",
         id="attention.attention_per_query-scale-inf"),
    case(attention_per_query, lambda: attention_per_query(Q, K.to("meta"), V), ValueError, arg="k", says="meta",
         id="attention.attention_per_query-device"),
    # argmax_attention
    case(argmax_attention, lambda: argmax_attention(Q, torch.randn(5, 7), V), ValueError, arg="d_k",
         id="attention.argmax_attention-d_k"),
    case(argmax_attention, lambda: argmax_attention(Q.tolist(), K, V), TypeError, arg="q", says="numpy array",
         id="attention.argmax_attention-list"),
    case(argmax_attention, lambda: argmax_attention(Q, K, V, scale=float("nan")), ValueError, arg="scale",
         id="attention.argmax_attention-scale-nan"),
    # hard_lookup
    case(hard_lookup, lambda: hard_lookup("a", KEYS, VALUES[:1]), ValueError, arg="keys", says="one value per key",
         id="attention.hard_lookup-lengths"),
    case(hard_lookup, lambda: hard_lookup("a", ["a", "a"], VALUES), ValueError, arg="keys", says="distinct",
         id="attention.hard_lookup-repeated"),
    case(hard_lookup, lambda: hard_lookup(["a"], KEYS, VALUES), TypeError, arg="query", says="hashable",
         id="attention.hard_lookup-unhashable-query"),
    case(hard_lookup, lambda: hard_lookup("a", [["a"], ["b"]], VALUES), TypeError, arg="keys", says="hashable",
         id="attention.hard_lookup-unhashable-keys"),
    case(hard_lookup, lambda: hard_lookup("a", 3, VALUES), TypeError, arg="keys", id="attention.hard_lookup-int"),
    case(hard_lookup, lambda: hard_lookup("a", KEYS, [np.ones(2), np.ones(3)]), ValueError, arg="values",
         says="one shape", id="attention.hard_lookup-ragged"),
    case(hard_lookup, lambda: hard_lookup("a", KEYS, ["x", "y"]), ValueError, arg="values", says="real vectors",
         id="attention.hard_lookup-strings"),
    # attention_entropy
    case(attention_entropy, lambda: attention_entropy([0.5, 0.5]), TypeError, arg="weights",
         id="attention.attention_entropy-list"),
    case(attention_entropy, lambda: attention_entropy(torch.ones(3, dtype=torch.long)), TypeError, arg="weights",
         says="floating-point", id="attention.attention_entropy-integer"),
    case(attention_entropy, lambda: attention_entropy(torch.tensor(1.0)), ValueError, arg="weights",
         id="attention.attention_entropy-scalar"),
    case(attention_entropy, lambda: attention_entropy(X, axis=-3), ValueError, arg="axis",
         id="attention.attention_entropy-axis"),
]

# Found by an adversarial read (issue #13): values that np.asarray(dtype=float) would have mangled.
CASES += [
    case(hard_lookup, lambda: hard_lookup("a", ["a"], [np.array([1j])]), ValueError, arg="values",
         says="real vectors", id="attention.hard_lookup-complex"),
    case(hard_lookup, lambda: hard_lookup("a", ["a", "b"], [np.ones((2, 2)), np.ones((2, 2))]), ValueError,
         arg="values", says="(d_v,)", id="attention.hard_lookup-matrices"),
    case(softmax, lambda: softmax(np.array(["a", "b"], dtype=object)), TypeError, arg="x", says="numbers",
         id="attention.softmax-object-array"),
]
