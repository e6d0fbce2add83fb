"""Bad inputs for experiments/recall.py: the attention head and the associative-recall model."""

from __future__ import annotations

import numpy as np
import torch

from attention_course.experiments.recall import AttentionHead, RecallModel

from . import case


def _head() -> AttentionHead:
    return AttentionHead(8, 4)


def _model() -> RecallModel:
    return RecallModel(10, 7, d_model=8, d_k=4)


def _ids(*shape: int, high: int = 7, dtype: torch.dtype = torch.long, device: str = "cpu") -> torch.Tensor:
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(0)).to(dtype=dtype, device=device)


X = torch.zeros(2, 5, 8)

CASES = [
    # the head's constructor
    case(AttentionHead, lambda: AttentionHead(0, 4), ValueError, arg="d_model", says="positive",
         id="recall.AttentionHead-d_model-zero"),
    case(AttentionHead, lambda: AttentionHead(8, -2), ValueError, arg="d_k", id="recall.AttentionHead-d_k-negative"),
    case(AttentionHead, lambda: AttentionHead(8, 4.0), TypeError, arg="d_k", says="integer",
         id="recall.AttentionHead-d_k-float"),
    case(AttentionHead, lambda: AttentionHead(8, 4, 0), ValueError, arg="d_v", id="recall.AttentionHead-d_v-zero"),
    case(AttentionHead, lambda: AttentionHead(8, 4, 3, tie_kv=True), ValueError, arg="d_v", says="tie_kv",
         id="recall.AttentionHead-tie_kv-needs-d_v-equal-d_k"),
    case(AttentionHead, lambda: AttentionHead(8, 4, tie_qk=1), TypeError, arg="tie_qk",
         id="recall.AttentionHead-tie_qk-int"),
    case(AttentionHead, lambda: AttentionHead(8, 4, scaled="yes"), TypeError, arg="scaled",
         id="recall.AttentionHead-scaled-str"),
    # the head's forward pass
    case(AttentionHead, lambda: _head()(X.tolist()), TypeError, arg="x_q", says="torch tensor",
         id="recall.AttentionHead.forward-list"),
    case(AttentionHead, lambda: _head()(X.numpy()), TypeError, arg="x_q", id="recall.AttentionHead.forward-numpy"),
    case(AttentionHead, lambda: _head()(X.long()), TypeError, arg="x_q", says="floating",
         id="recall.AttentionHead.forward-integer"),
    case(AttentionHead, lambda: _head()(torch.zeros(8)), ValueError, arg="x_q", says="at least 2",
         id="recall.AttentionHead.forward-1d"),
    case(AttentionHead, lambda: _head()(X, torch.zeros(2, 5, 6)), ValueError, arg="x_kv", says="d_model=8",
         id="recall.AttentionHead.forward-x_kv-width"),
    case(AttentionHead, lambda: _head()(X.double()), TypeError, arg="x_q", says="float32",
         id="recall.AttentionHead.forward-dtype"),
    case(AttentionHead, lambda: _head()(X, X.to("meta")), ValueError, arg="x_kv", says="meta",
         id="recall.AttentionHead.forward-device"),
    case(AttentionHead, lambda: _head()(X, mask=torch.ones(5, 5, dtype=torch.bool, device="meta")), ValueError,
         arg="mask", id="recall.AttentionHead.forward-mask-device"),
    # the model's constructor
    case(RecallModel, lambda: RecallModel(0, 7), ValueError, arg="key_vocab", id="recall.RecallModel-key_vocab-zero"),
    case(RecallModel, lambda: RecallModel(10, np.float64(7)), TypeError, arg="value_vocab",
         id="recall.RecallModel-value_vocab-float"),
    case(RecallModel, lambda: RecallModel(10, 7, d_model=-1), ValueError, arg="d_model",
         id="recall.RecallModel-d_model-negative"),
    case(RecallModel, lambda: RecallModel(10, 7, d_k=0), ValueError, arg="d_k", id="recall.RecallModel-d_k-zero"),
    case(RecallModel, lambda: RecallModel(10, 7, init="xavier"), ValueError, arg="init", says=("'torch'", "'unit'"),
         id="recall.RecallModel-init-unknown"),
    case(RecallModel, lambda: RecallModel(10, 7, tie_kv=None), TypeError, arg="tie_kv",
         id="recall.RecallModel-tie_kv-none"),
    # the model's inputs (forward, attention, scores, queries_keys all go through states)
    case(RecallModel, lambda: _model()(_ids(3, 4).float(), _ids(3, 4), _ids(3)), TypeError, arg="keys",
         says="integer", id="recall.RecallModel.forward-float-keys"),
    case(RecallModel, lambda: _model()(_ids(3, 4).tolist(), _ids(3, 4), _ids(3)), TypeError, arg="keys",
         says="torch tensor", id="recall.RecallModel.forward-list"),
    case(RecallModel, lambda: _model()(_ids(3, 4), _ids(3, 5), _ids(3)), ValueError, arg="keys",
         says="(batch, n_pairs)", id="recall.RecallModel.forward-shape"),
    case(RecallModel, lambda: _model()(_ids(12), _ids(12), _ids(3)), ValueError, arg="keys", says="-D",
         id="recall.RecallModel.forward-1d-keys"),
    case(RecallModel, lambda: _model().attention(_ids(3, 4) + 10, _ids(3, 4), _ids(3)), ValueError, arg="keys",
         says="[0, 10)", id="recall.RecallModel.attention-key-id-out-of-range"),
    case(RecallModel, lambda: _model().scores(_ids(3, 4), _ids(3, 4) - 1, _ids(3)), ValueError, arg="values",
         says="[0, 7)", id="recall.RecallModel.scores-negative-value-id"),
    case(RecallModel, lambda: _model().queries_keys(_ids(3, 4), _ids(3, 4), _ids(3, device="meta")), ValueError,
         arg="query", says="meta", id="recall.RecallModel.queries_keys-device"),
]
