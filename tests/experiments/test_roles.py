"""experiments/roles.py (chapter 3): AttentionAlt and its absorption, cross-attention (against PyTorch's
``nn.MultiheadAttention``) and the previous-token model. (The QK and OV circuits: tests/test_circuits.py.)"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course import scaled_dot_product_attention
from attention_course.data import previous_token_sampler, recall_sampler
from attention_course.device import seeded
from attention_course.experiments.recall import RecallModel
from attention_course.experiments.roles import (
    AltRecallModel,
    PreviousTokenModel,
    absorb_alt_weight,
    attention_alt,
    cross_attention,
    train_budgets,
)
from attention_course.train import run_seeds


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- AttentionAlt ---------------------------------------------------------------------------------------------

def test_attention_alt_is_the_seeds_formula():
    q, k, v, w = _randn(2, 5, 4, seed=1), _randn(2, 7, 4, seed=2), _randn(2, 7, 3, seed=3), _randn(6, 3, seed=4)
    out, weights = attention_alt(q, k, v, w)
    expected = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) @ v @ w.T / 2.0  # d_k = 4: √d_k = 2
    assert out.shape == (2, 5, 6) and weights.shape == (2, 5, 7)
    torch.testing.assert_close(out, expected)


def test_attention_alt_equals_attention_with_absorbed_value_projection():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 8))
    w_q, w_k, w_v, w = (rng.normal(size=s) for s in ((8, 4), (8, 4), (8, 5), (3, 5)))
    alt, a_alt = attention_alt(x @ w_q, x @ w_k, x @ w_v, w)
    w_v2 = absorb_alt_weight(w_v, w, d_k=4)
    assert isinstance(alt, np.ndarray) and w_v2.shape == (8, 3)
    std, a_std = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v2)
    np.testing.assert_allclose(alt, std, atol=1e-12)
    np.testing.assert_allclose(a_alt, a_std)


def test_attention_alt_shrinks_outputs_out_of_the_value_range():
    v = torch.rand(10, 4, dtype=torch.float64) + 1.0  # values in [1, 2]
    q, k = _randn(3, 16), _randn(10, 16, seed=1)
    out, _ = attention_alt(q, k, v, torch.eye(4, dtype=torch.float64))
    assert (out < 1.0).all()  # 1/√16 = 1/4 of a convex combination of values <= 2


def test_attention_alt_mask_and_errors():
    q, k, v = _randn(3, 4), _randn(5, 4, seed=1), _randn(5, 2, seed=2)
    mask = torch.tensor([True, True, False, False, True]).expand(3, 5)
    _, weights = attention_alt(q, k, v, torch.eye(2, dtype=torch.float64), mask=mask)
    assert (weights[:, 2:4] == 0).all()
    with pytest.raises(ValueError, match=r"\(d_out, d_v\)"):
        attention_alt(q, k, v, torch.eye(3, dtype=torch.float64))  # d_v = 2, w has 3 columns
    with pytest.raises(TypeError, match="all numpy arrays or all torch tensors"):
        attention_alt(q, k, v, np.eye(2))
    with pytest.raises(ValueError, match="share d_v"):
        absorb_alt_weight(np.ones((8, 5)), np.ones((3, 4)), d_k=4)
    with pytest.raises(ValueError, match="d_k must be a positive"):
        absorb_alt_weight(np.ones((8, 5)), np.ones((3, 5)), d_k=0)


# --- cross-attention ------------------------------------------------------------------------------------------

def test_cross_attention_matches_torch_multihead_attention():
    # nn.MultiheadAttention with one head: queries from the decoder (width embed_dim), keys and values from the
    # encoder (width kdim = vdim), no biases, identity output projection.
    embed, d_enc, n_tgt, n_src = 4, 6, 3, 5
    mha = nn.MultiheadAttention(embed, 1, bias=False, kdim=d_enc, vdim=d_enc, batch_first=True).double()
    with torch.no_grad():
        mha.out_proj.weight.copy_(torch.eye(embed))
    y, x = _randn(2, n_tgt, embed, seed=1), _randn(2, n_src, d_enc, seed=2)
    ref_out, ref_w = mha(y, x, x)
    out, weights = cross_attention(
        y, x, mha.q_proj_weight.detach().T, mha.k_proj_weight.detach().T, mha.v_proj_weight.detach().T
    )
    assert weights.shape == (2, n_tgt, n_src) and out.shape == (2, n_tgt, embed)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_w)


def test_cross_attention_with_dv_different_from_dk_and_a_padding_mask():
    y, x = _randn(3, 8), _randn(5, 8, seed=1)
    w_q, w_k, w_v = _randn(8, 4, seed=2), _randn(8, 4, seed=3), _randn(8, 6, seed=4)
    keep = torch.tensor([True, True, True, False, False])  # the last two source positions are padding
    out, weights = cross_attention(y, x, w_q, w_k, w_v, mask=keep)
    ref = F.scaled_dot_product_attention(y @ w_q, x @ w_k, x @ w_v, attn_mask=keep)
    assert out.shape == (3, 6) and weights.shape == (3, 5) and (weights[:, 3:] == 0).all()
    torch.testing.assert_close(out, ref)
    # The decoder decides where to look; the encoder alone decides the values.
    _, weights2 = cross_attention(_randn(3, 8, seed=9), x, w_q, w_k, w_v)
    assert not torch.allclose(weights2, cross_attention(y, x, w_q, w_k, w_v)[1])


def test_cross_attention_errors_and_the_seeds_wiring():
    y, x = _randn(3, 8), _randn(5, 7, seed=1)
    w_q, w_k, w_v = _randn(8, 4), _randn(7, 4), _randn(7, 6)
    with pytest.raises(ValueError, match=r"w_q must have shape \(d_dec, d_k\)"):
        cross_attention(y, x, w_k, w_k, w_v)
    with pytest.raises(ValueError, match="same d_k"):
        cross_attention(y, x, w_q, _randn(7, 3), w_v)
    with pytest.raises(ValueError, match="encoder_states must have at least 2 dimensions"):
        cross_attention(y, x[0], w_q, w_k, w_v)
    # Q and K from the encoder, V from the decoder: 5 keys but 3 values.
    with pytest.raises(ValueError, match="same length n_k"):
        scaled_dot_product_attention(x @ w_k, x @ w_k, y @ w_q)


# --- the previous-token model ----------------------------------------------------------------------------------

def test_previous_token_model_masks():
    torch.manual_seed(0)
    (tokens,), _ = previous_token_sampler(4, 8, 5, seed=0)(0)
    causal = PreviousTokenModel(5, 8, d_model=16, d_k=4)
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 5
    torch.testing.assert_close(causal(changed)[:, :5], causal(tokens)[:, :5])  # the future is invisible
    assert (causal.attention(tokens).triu(1) == 0).all()

    no_self = PreviousTokenModel(5, 8, d_model=16, d_k=4, tie_qk=True, mask_self=True)
    w = no_self.attention(tokens)
    assert (w.diagonal(dim1=1, dim2=2) == 0).all() and (w[:, 0] == 0).all()  # row 0 has nothing to attend to
    torch.testing.assert_close(w[:, 1:].sum(-1), torch.ones(4, 7))

    bidirectional = PreviousTokenModel(5, 8, d_model=16, d_k=4, causal=False)
    assert (bidirectional.attention(tokens).triu(1) > 0).any()
    assert bidirectional(tokens[:, :6]).shape == (4, 6, 5)
    with pytest.raises(ValueError, match="length <= 8"):
        bidirectional(torch.zeros(2, 9, dtype=torch.long))
    with pytest.raises(TypeError):
        bidirectional(tokens.float())


# --- at the edges ------------------------------------------------------------------------------------------------

def test_attention_alt_at_the_edges_matches_torch():
    w = _randn(5, 6, seed=3)
    for q_shape, kv_batch in (((0, 4), ()), ((0, 3, 4), (0,))):  # no queries; an empty batch
        q, k, v = _randn(*q_shape), _randn(*kv_batch, 7, 4, seed=1), _randn(*kv_batch, 7, 6, seed=2)
        out, weights = attention_alt(q, k, v, w)
        ref = F.scaled_dot_product_attention(q, k, v) @ w.T / 2
        assert out.shape == ref.shape and weights.shape == (*q_shape[:-1], 7)
        torch.testing.assert_close(out, ref)
    # float16 in, float16 out, computed like the float64 answer
    q, k, v = _randn(3, 4), _randn(7, 4, seed=1), _randn(7, 6, seed=2)
    out, _ = attention_alt(q.half(), k.half(), v.half(), w.half())
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), attention_alt(q, k, v, w)[0], atol=1e-2, rtol=1e-2)
    with pytest.raises(ValueError, match="d_k >= 1"):  # 1/√0
        attention_alt(q[:, :0], k[:, :0], v, w)
    with pytest.raises(TypeError, match=r"w must have the dtype of q \(torch.float64\)"):
        attention_alt(q, k, v, w.float())  # was silently converted to the output's dtype


def test_absorb_alt_weight_at_the_edges():
    # d_v = 0: an empty sum, zeros, as torch.matmul gives
    absorbed = absorb_alt_weight(_randn(8, 0), _randn(5, 0), 4)
    assert torch.equal(absorbed, torch.zeros(8, 5, dtype=torch.float64))
    assert absorb_alt_weight(np.ones((8, 6), np.float32), np.ones((5, 6), np.float32), np.int64(4)).dtype == np.float32
    with pytest.raises(TypeError, match="d_k must be an integer"):
        absorb_alt_weight(_randn(8, 6), _randn(5, 6), 4.0)


def test_cross_attention_at_the_edges_matches_torch():
    x, w_q, w_k, w_v = _randn(5, 7, seed=1), _randn(8, 4), _randn(7, 4, seed=2), _randn(7, 6, seed=3)
    for y in (_randn(0, 8), _randn(0, 3, 8)):  # no target positions; an empty batch of decoder states
        out, weights = cross_attention(y, x, w_q, w_k, w_v)
        ref = F.scaled_dot_product_attention(y @ w_q, x @ w_k, x @ w_v)
        assert out.shape == ref.shape and weights.shape == (*y.shape[:-1], 5)
        torch.testing.assert_close(out, ref)
    with pytest.raises(TypeError, match="w_q must have the dtype of decoder_states"):
        cross_attention(_randn(3, 8), x, w_q.float(), w_k, w_v)  # torch's matmul: a raw RuntimeError
    with pytest.raises(ValueError, match="one device"):
        cross_attention(_randn(3, 8).to("meta"), x, w_q, w_k, w_v)


def test_previous_token_model_at_the_edges():
    torch.manual_seed(0)
    (tokens,), _ = previous_token_sampler(4, 8, 5, seed=0)(0)
    model = PreviousTokenModel(5, 8, d_model=16, d_k=4, tie_qk=True, mask_self=True)
    logits = model(tokens)
    # position 0 may attend to nothing: zero weights, zero head output, zero logits (not NaN)
    assert torch.equal(logits[:, 0], torch.zeros(4, 5))
    assert torch.equal(model(tokens.int()), logits)  # any integer dtype is a token id
    assert model(tokens[:0]).shape == (0, 8, 5)  # an empty batch
    with pytest.raises(ValueError, match=r"tokens must hold token ids in \[0, 5\)"):
        model(tokens + 5)  # nn.Embedding: a raw IndexError (a device-side assert on a GPU)


# --- AttentionAlt in the recall model, and the budget sweep ------------------------------------------------------

def _recall_batch():
    return recall_sampler(6, 3, 5, 5, seed=3)(0)


def test_alt_recall_model_starts_as_the_plain_model_and_applies_the_question_formula():
    with seeded(0):
        plain = RecallModel(5, 5, d_model=8, d_k=4)
    with seeded(0):
        alt = AltRecallModel(5, 5, d_model=8, d_k=4)
    with seeded(0):
        unscaled = AltRecallModel(5, 5, d_model=8, d_k=4, outside_scale=False)
    for name, p in plain.named_parameters():  # the shared parameters are drawn first, identically
        torch.testing.assert_close(dict(alt.named_parameters())[name], p, rtol=0, atol=0)
    assert alt.w.shape == (4, 4) and len(list(alt.parameters())) == len(list(plain.parameters())) + 1
    (keys, values, query), _ = _recall_batch()
    x_q, seq = alt.states(keys, values, query)
    h = alt.head
    a = torch.softmax((x_q @ h.w_q) @ (seq @ h.w_k).transpose(1, 2) / 2.0, dim=-1)  # √d_k = 2
    expected = alt.unembed((a @ (seq @ h.w_v) @ alt.w.T / 2.0)[:, 0])
    torch.testing.assert_close(alt(keys, values, query), expected)
    torch.testing.assert_close(unscaled.unembed.weight, alt.unembed.weight)
    out_u = unscaled(keys, values, query)
    torch.testing.assert_close(out_u, unscaled.unembed((a @ (seq @ h.w_v) @ alt.w.T)[:, 0]))


def test_train_budgets_scores_each_budget_as_a_run_of_that_length():
    test = recall_sampler(50, 3, 5, 5, seed=9)(0)

    def build():
        return RecallModel(5, 5, d_model=8, d_k=4, tie_kv=True)

    def make(seed):
        return recall_sampler(8, 3, 5, 5, seed)

    runs = train_budgets(build, make, test, (0, 1), budgets=(5, 12), lr=1e-2)
    assert [r.seed for r in runs] == [0, 1] and all(len(r.loss) == 12 for r in runs)
    for budget in (5, 12):
        reference = run_seeds(build, make, test, (0, 1), steps=budget, lr=1e-2)
        for r, ref in zip(runs, reference, strict=True):
            assert r.accuracy[budget] == ref.accuracy and r.test_loss[budget] == ref.test_loss
            assert r.loss[:budget] == ref.history.loss
    assert not runs[0].model.training
