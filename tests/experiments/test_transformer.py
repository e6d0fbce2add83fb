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
