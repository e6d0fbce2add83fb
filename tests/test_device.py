"""The device choice and the seeding helpers."""

import pytest
import torch

from attention_course.device import seed_everything, seeded


def test_seeded_fixes_the_block_and_restores_the_callers_stream():
    seed_everything(1)
    expected = torch.rand(3)
    seed_everything(1)
    with seeded(7):
        inside = torch.randn(4)
    assert torch.equal(torch.rand(3), expected)  # as if the block had not run
    torch.manual_seed(7)
    assert torch.equal(inside, torch.randn(4))  # the block drew seed 7's stream
    with seeded(7):
        assert torch.equal(torch.randn(4), inside)


def test_seeded_restores_after_an_error_and_checks_its_seed():
    seed_everything(2)
    expected = torch.rand(3)
    seed_everything(2)
    with pytest.raises(RuntimeError), seeded(0):
        torch.rand(5)
        raise RuntimeError
    assert torch.equal(torch.rand(3), expected)
    for bad in (1.0, "3", True, None):
        with pytest.raises(TypeError, match="seed must be an integer"), seeded(bad):
            pass


def test_get_device_names_what_it_returns(monkeypatch):
    from attention_course.device import get_device

    monkeypatch.delenv("ATTENTION_COURSE_DEVICE", raising=False)
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setenv("ATTENTION_COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.setenv("ATTENTION_COURSE_DEVICE", "tpu")
    with pytest.raises(ValueError, match="ATTENTION_COURSE_DEVICE"):
        get_device()
