"""experiments/recall.py (chapters 2 and 3): one attention head whose projections can be tied and whose scores can
go unscaled, and the associative-recall model built on it, against PyTorch's attention."""

import math

import pytest
import torch
import torch.nn.functional as F

from attention_course.data import recall_sampler
from attention_course.experiments.recall import AttentionHead, RecallModel
from attention_course.train import accuracy, run_seeds


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- the head, tied or not -------------------------------------------------------------------------------------

def test_attention_head_matches_torch_and_ties_parameters():
    torch.manual_seed(0)
    head = AttentionHead(8, 4, 3).double()
    x = _randn(2, 5, 8)
    out, _ = head(x)
    ref = F.scaled_dot_product_attention(x @ head.w_q, x @ head.w_k, x @ head.w_v)
    torch.testing.assert_close(out, ref)
    assert sum(p.numel() for p in head.parameters()) == 8 * 4 * 2 + 8 * 3

    tied_qk = AttentionHead(8, 4, tie_qk=True)
    assert tied_qk.w_k is tied_qk.w_q and tied_qk.w_v is not tied_qk.w_q
    assert sum(p.numel() for p in tied_qk.parameters()) == 2 * 8 * 4
    tied_kv = AttentionHead(8, 4, tie_kv=True)
    assert tied_kv.w_v is tied_kv.w_k and tied_kv.w_k is not tied_kv.w_q
    with pytest.raises(ValueError, match="tie_kv needs d_v == d_k"):
        AttentionHead(8, 4, 3, tie_kv=True)
    with pytest.raises(ValueError, match="d_model=8"):
        head(_randn(2, 5, 7))


def test_tied_qk_scores_are_a_gram_matrix():
    torch.manual_seed(1)
    head = AttentionHead(6, 3, tie_qk=True).double()
    x = _randn(9, 6)
    s = (x @ head.w_q) @ (x @ head.w_k).T
    torch.testing.assert_close(s, s.T)
    assert torch.linalg.eigvalsh(s.detach()).min() > -1e-10
    d = s.diagonal()
    assert (d[:, None] + d[None, :] - 2 * s >= -1e-10).all()


def test_attention_head_scale():
    torch.manual_seed(0)
    scaled, plain = AttentionHead(8, 16).double(), AttentionHead(8, 16, scaled=False).double()
    assert (scaled.scale, plain.scale) == (0.25, 1.0)
    plain.load_state_dict(scaled.state_dict())
    x = _randn(2, 5, 8)
    ref = F.scaled_dot_product_attention(x @ plain.w_q, x @ plain.w_k, x @ plain.w_v, scale=1.0)
    torch.testing.assert_close(plain(x)[0], ref)
    with pytest.raises(ValueError, match="d_k must be a positive integer, got 0"):
        AttentionHead(8, 0)


# --- the recall model -------------------------------------------------------------------------------------------

def test_recall_model_shapes_invariance_and_errors():
    torch.manual_seed(0)
    model = RecallModel(10, 7, d_model=16, d_k=4)
    (keys, values, query), target = recall_sampler(5, 6, 10, 7, seed=0)(0)
    logits = model(keys, values, query)
    assert logits.shape == (5, 7)
    weights = model.attention(keys, values, query)
    assert weights.shape == (5, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5))
    perm = torch.randperm(6)
    torch.testing.assert_close(model(keys[:, perm], values[:, perm], query), logits)  # pairs are a set
    with pytest.raises(ValueError, match="expected keys, values"):
        model(keys, values[:, :3], query)
    with pytest.raises(TypeError, match="integer ids"):
        model(keys.float(), values, query)


def test_recall_model_options_and_parameter_order():
    tied = RecallModel(10, 7, d_model=16, d_k=4, tie_qk=True, tie_kv=True)
    assert tied.head.w_q is tied.head.w_k is tied.head.w_v
    assert sum(p.numel() for p in tied.parameters()) == (10 + 7 + 1) * 16 + 16 * 4 + 4 * 7
    # "unit" redraws the tables after the marker; the head's projections come next, from the same stream
    torch.manual_seed(3)
    a = RecallModel(10, 7, d_model=16, d_k=4, init="torch")
    torch.manual_seed(3)
    b = RecallModel(10, 7, d_model=16, d_k=4, init="unit")
    torch.testing.assert_close(b.query_marker, a.query_marker / 2**0.5, rtol=0, atol=0)
    assert not torch.equal(a.key_embed.weight / 2**0.5, b.key_embed.weight)
    torch.manual_seed(3)
    torch.randn(10 * 16 + 7 * 16 + 16 + 10 * 16 + 7 * 16)  # the draws before the head's
    torch.testing.assert_close(b.head.w_q, torch.randn(16, 4) / 16**0.5, rtol=0, atol=0)
    with pytest.raises(ValueError, match="init must be one of"):
        RecallModel(10, 7, init="xavier")
    with pytest.raises(ValueError, match="key_vocab must be a positive integer, got 0"):
        RecallModel(0, 7)


def test_run_seeds_learns_recall_and_is_deterministic():
    test = recall_sampler(500, 4, 8, 8, seed=100)(0)

    def run():
        return run_seeds(lambda: RecallModel(8, 8, d_model=16, d_k=8), lambda s: recall_sampler(32, 4, 8, 8, s),
                         test, seeds=(0, 1), steps=150, lr=1e-2)

    runs = run()
    assert [r.seed for r in runs] == [0, 1] and all(len(r.history.loss) == 150 for r in runs)
    assert min(r.accuracy for r in runs) > 0.9  # chance is 1/8
    assert [r.accuracy for r in runs] == [r.accuracy for r in run()]
    assert math.isclose(runs[0].accuracy, accuracy(runs[0].model, *test))
