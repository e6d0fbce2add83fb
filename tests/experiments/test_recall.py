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
    with pytest.raises(ValueError, match="d_v must equal d_k when tie_kv=True"):
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


def test_attention_head_at_the_edges_matches_torch():
    head = AttentionHead(6, 4, 5).double()
    for n_q, batch in ((0, 2), (3, 0)):  # no queries, an empty batch: empty outputs of the right shape
        x_q, x_kv = _randn(batch, n_q, 6), _randn(batch, 7, 6, seed=1)
        out, weights = head(x_q, x_kv)
        ref = F.scaled_dot_product_attention(x_q @ head.w_q, x_kv @ head.w_k, x_kv @ head.w_v)
        assert out.shape == (batch, n_q, 5) and weights.shape == (batch, n_q, 7)
        torch.testing.assert_close(out, ref)
    # a float16 head computes its softmax in float32 and answers in float16, close to the float64 answer
    x = _randn(2, 5, 6)
    out, _ = head.half()(x.half())
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), head.double()(x)[0], atol=5e-3, rtol=5e-3)
    # a fully masked query row: zero weights and a zero output, not NaN
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[2] = False
    out, weights = head(x, mask=mask)
    assert torch.equal(weights[:, 2], torch.zeros(2, 5)) and torch.equal(out[:, 2], torch.zeros(2, 5, dtype=x.dtype))


def test_attention_head_refuses_inputs_it_would_compute_wrongly():
    head = AttentionHead(6, 4)  # float32
    with pytest.raises(TypeError, match="the head's dtype torch.float32"):
        head(_randn(2, 5, 6))  # float64: torch's matmul would raise a raw RuntimeError
    with pytest.raises(ValueError, match="one device"):
        head(torch.zeros(2, 5, 6, device="meta"))
    with pytest.raises(TypeError, match="x_q must be a torch tensor"):
        head([[0.0] * 6])


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
    with pytest.raises(TypeError, match="integer tensor of token ids"):
        model(keys.float(), values, query)
    # any integer dtype is a token id: int32 (or uint8) ids give the int64 answer
    torch.testing.assert_close(model(keys.int(), values.to(torch.uint8), query.int()), logits, rtol=0, atol=0)


def test_recall_model_at_the_edges():
    torch.manual_seed(0)
    model = RecallModel(10, 7, d_model=16, d_k=4)
    (keys, values, query), _ = recall_sampler(5, 6, 10, 7, seed=0)(0)
    # no stored pairs: the query attends to itself alone
    weights = model.attention(keys[:, :0], values[:, :0], query)
    assert torch.equal(weights, torch.ones(5, 1))
    assert model(keys[:, :0], values[:, :0], query).shape == (5, 7)
    # an empty batch: empty logits
    assert model(keys[:0], values[:0], query[:0]).shape == (0, 7)
    with pytest.raises(ValueError, match=r"values must hold token ids in \[0, 7\), got ids in \[7, 7\]"):
        model(keys, torch.full_like(values, 7), query)  # nn.Embedding would raise an IndexError
    with pytest.raises(ValueError, match="one device"):
        model(keys.to("meta"), values.to("meta"), query.to("meta"))


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
