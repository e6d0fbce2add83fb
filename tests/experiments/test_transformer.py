"""experiments/transformer.py (chapter 5): the training plan chosen from fake devices, and the head ablation."""

from __future__ import annotations

import pytest
import torch
from fake_devices import A100, CPU, H100, MPS, P100, T4, GiB

from attention_course.device import DeviceInfo
from attention_course.experiments.transformer import (
    REVERSAL_BYTES,
    REVERSAL_CONFIG,
    ablated_head,
    mean_head_outputs,
    reversal_plan,
)
from attention_course.multihead import MultiHeadAttention


@pytest.mark.parametrize("info", [T4, P100, A100, H100, MPS, CPU], ids=lambda i: i.name)
def test_every_device_trains_the_verified_configuration_in_float32(info):
    plan = reversal_plan(info)
    assert plan.config == REVERSAL_CONFIG  # the results asserted on the CPU carry over
    assert plan.dtype == torch.float32
    assert plan.device == info.type and plan.note is None
    assert plan.threads == (1 if info.type == "cpu" else None)


def test_a_full_gpu_falls_back_to_the_cpu_with_one_line():
    full = DeviceInfo("cuda", "Tesla T4", T4.total_bytes, 100 * 2**20, (7, 5))
    plan = reversal_plan(full)
    assert plan.device == "cpu" and plan.threads == 1
    assert "\n" not in plan.note and "Tesla T4" in plan.note and "CPU" in plan.note
    roomy = full._replace(free_bytes=2 * REVERSAL_BYTES)
    assert reversal_plan(roomy).device == "cuda" and GiB > REVERSAL_BYTES


def test_the_configuration_is_not_shared_between_plans():
    plan = reversal_plan(CPU)
    plan.config["steps"] = 1
    assert reversal_plan(CPU).config["steps"] == REVERSAL_CONFIG["steps"]


@pytest.mark.parametrize("need_weights", [True, False])
def test_zero_ablation_removes_exactly_that_head(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    before = mha.out_proj.weight.detach().clone()
    with torch.no_grad():
        full, _ = mha(x, x, x, need_weights=need_weights)
        with ablated_head(mha, 1):
            ablated, _ = mha(x, x, x, need_weights=need_weights)
    assert torch.equal(mha.out_proj.weight, before)  # restored
    heads = _head_outputs(mha, x)  # by hand: the heads' outputs before out_proj, head 1 zeroed
    heads[..., 4:] = 0
    expected = heads @ mha.out_proj.weight.T + mha.out_proj.bias
    torch.testing.assert_close(ablated, expected, rtol=0, atol=1e-12)
    assert not torch.allclose(full, ablated)


def _head_outputs(mha, x):
    """The concatenated heads' outputs before out_proj, from the weights the layer returns."""
    with torch.no_grad():
        _, w = mha(x, x, x, need_weights=True, average_attn_weights=False)
        v = torch.nn.functional.linear(x, mha.in_projections()[2], mha._in_biases()[2])
        v = v.view(2, 5, 2, 4).transpose(1, 2)
        return (w @ v).transpose(1, 2).reshape(2, 5, 8)


def test_ablated_head_restores_on_error():
    mha = MultiHeadAttention(8, 2)
    before = mha.out_proj.weight.detach().clone()
    with pytest.raises(RuntimeError), ablated_head(mha, 0):
        raise RuntimeError("inside")
    assert torch.equal(mha.out_proj.weight, before)



@pytest.mark.parametrize("need_weights", [True, False])
def test_mean_ablation_puts_the_heads_mean_in_place_of_its_output(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    means = mean_head_outputs(mha, lambda: mha(x, x, x, need_weights=need_weights), where=keep)
    heads = _head_outputs(mha, x)
    torch.testing.assert_close(means, heads[keep].mean(0).view(2, 4), rtol=0, atol=1e-12)  # the mean, by hand
    w_before, b_before = mha.out_proj.weight.detach().clone(), mha.out_proj.bias.detach().clone()
    with torch.no_grad(), ablated_head(mha, 0, means[0]):
        ablated, _ = mha(x, x, x, need_weights=need_weights)
    assert torch.equal(mha.out_proj.weight, w_before) and torch.equal(mha.out_proj.bias, b_before)
    heads[..., :4] = means[0]  # by hand: head 0's output replaced by its mean at every position
    torch.testing.assert_close(ablated, heads @ w_before.T + b_before, rtol=0, atol=1e-12)
    assert mean_head_outputs(mha, lambda: mha(x, x, x)).shape == (2, 4)  # every position when where is None


def test_mean_ablation_of_a_constant_head_changes_nothing():
    """A head whose output is the same at every position carries no information: mean-ablating it is exact."""
    torch.manual_seed(1)
    mha = MultiHeadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        mha.in_projections()[2][:4] = 0  # head 0's values: zero weights ...
        mha._in_biases()[2][:4] = torch.arange(4.0)  # ... and a bias, so its output is that bias everywhere
    x = torch.randn(3, 6, 8, dtype=torch.float64)
    means = mean_head_outputs(mha, lambda: mha(x, x, x))
    with torch.no_grad():
        full, _ = mha(x, x, x)
        with ablated_head(mha, 0, means[0]):
            ablated, _ = mha(x, x, x)
        with ablated_head(mha, 0):
            zeroed, _ = mha(x, x, x)
    torch.testing.assert_close(ablated, full, rtol=0, atol=1e-12)
    assert not torch.allclose(zeroed, full)  # a zero-ablation moves the output all the same


# --- opening the model up (§5.7): one code for the page's run and the stored seeds -------------------------------

from attention_course import data  # noqa: E402
from attention_course.experiments import transformer as tr  # noqa: E402
from attention_course.seq2seq import AttentionMaps, Seq2SeqTransformer  # noqa: E402


class _DesignedMaps(Seq2SeqTransformer):
    """A reversal model whose cross-attention maps are set by hand: layer 1 head 0 exactly on the anti-diagonal,
    layer 1 head 1 one position off it, every other head uniform over the real source tokens."""

    def attention_maps(self, src, tgt):
        b, n_src = src.shape
        n_tgt = tgt.shape[1]
        lengths = (src != data.PAD_ID).sum(1)
        real = (torch.arange(n_src)[None] < lengths[:, None]).float()
        uniform = (real / lengths[:, None])[:, None, None].expand(b, 2, n_tgt, n_src)
        layers = [uniform.clone(), uniform.clone()]
        for row in range(b):
            m = int(lengths[row])
            for t in range(n_tgt):
                j = m - 1 - t
                layers[1][row, 0, t] = 0
                layers[1][row, 1, t] = 0
                layers[1][row, 0, t, max(j, 0)] = 1
                layers[1][row, 1, t, min(max(j + 1, 0), m - 1)] = 1
        return AttentionMaps(encoder=[], decoder_self=[], cross=layers)


def _batch(n=40, seed=0):
    return data.reverse_digits(n, 1, 10, torch.Generator().manual_seed(seed), split="test")


def test_anti_diagonal_shares_of_designed_heads():
    torch.manual_seed(0)
    model = _DesignedMaps(13, d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2,
                          dim_feedforward=8, dropout=0.0, max_len=32)
    b = _batch()
    ad = tr.anti_diagonal_shares(model, b.src, b.tgt, b.lengths)
    assert ad.exact.shape == (2, 2) and ad.best == (1, 0)
    assert ad.exact[1, 0].item() == pytest.approx(1.0) and ad.near[1, 0].item() == pytest.approx(1.0)
    assert ad.near[1, 1].item() == pytest.approx(1.0) and ad.exact[1, 1].item() < 0.5  # off by one
    for h in range(2):  # layer 0: uniform heads score the uniform baseline
        assert ad.exact[0, h].item() == pytest.approx(ad.uniform_exact)
        assert ad.near[0, h].item() == pytest.approx(ad.uniform_near)
    for m, (exact, uni, near, uni_near) in ad.by_length.items():
        assert exact == pytest.approx(1.0) and uni == pytest.approx(1 / m) and near == pytest.approx(1.0)
        # ±1 holds 3 real tokens, 2 at the two ends: (3(m - 2) + 2 · 2) / m over the m rows, / m
        assert uni_near == pytest.approx((3 * m - 2) / m**2)
    assert ad.by_length[2][3] == pytest.approx(1.0)  # two digits: ±1 is the whole string


def test_ablation_study_rows_groups_and_control():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(13, d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=2,
                               dim_feedforward=16, dropout=0.0, max_len=32).eval()
    b = _batch(30, 1)
    exact = torch.tensor([[0.2, 0.1], [0.95, 0.3]])
    study = tr.ablation_study(model, b.src, b.tgt, exact)
    assert list(study.table) == ["none", "0.0", "0.1", "1.0", "1.1", "anti-diagonal: 1.0",
                                 f"control: {study.control[0][0]}.{study.control[0][1]}"]
    assert study.anti_diagonal == [(1, 0)] and len(study.control) == 1
    assert study.needed not in study.control and (1, 0) not in study.control
    base = tr.exact_match(model, b.src, b.tgt, bos_id=data.BOS_ID, eos_id=data.EOS_ID)
    assert study.table["none"]["zero"] == (base, tr.held_out_loss(model, b.src, b.tgt))
    # the ablations leave the model as it was
    assert tr.exact_match(model, b.src, b.tgt, bos_id=data.BOS_ID, eos_id=data.EOS_ID) == base
    # zero-ablating head 1.0 alone is what the table's row says
    with tr.ablated_head(model.transformer.decoder.layers[1].multihead_attn, 0):
        assert tr.held_out_loss(model, b.src, b.tgt) == study.table["1.0"]["zero"][1]


def test_train_reversal_is_the_seeded_recipe(monkeypatch):
    """Seed s initialises with torch.manual_seed(s) and draws batches from Generator(1 + s): checked on the first
    steps with the budget cut short."""
    monkeypatch.setitem(tr.REVERSAL_CONFIG, "steps", 3)
    torch.set_num_threads(1)
    m1, h1 = tr.train_reversal(2)
    m2, h2 = tr.train_reversal(2)
    assert h1.loss == h2.loss and len(h1.loss) == 3
    assert tr.train_reversal(3)[1].loss != h1.loss
    smooth = tr.train_reversal(2, smooth_over=list(range(2, 13)))[1].loss
    assert smooth[0] != h1.loss[0]  # another target distribution, another loss
