"""The device choice and the seeding helpers."""

import os

import pytest
import torch
from fake_devices import A100, CPU, H100, MPS, P100, T4, GiB

from attention_course.device import (
    DeviceInfo,
    compute_dtype,
    device_info,
    memory_budget,
    sdpa_backends,
    seed_everything,
    seeded,
)


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


# --- choosing sizes and dtypes from a device's properties (chapters 5 and 6) ---------------------------------------


@pytest.mark.parametrize(
    ("info", "dtype"),
    [(T4, torch.float16), (P100, torch.float16), (A100, torch.bfloat16), (H100, torch.bfloat16),
     (MPS, torch.float16), (CPU, torch.float32),
     (DeviceInfo("cuda", "Tesla K80", 11 * GiB, 11 * GiB, (3, 7)), torch.float32)],
)
def test_compute_dtype_follows_the_capability(info, dtype):
    assert compute_dtype(info) == dtype


def test_sdpa_backends_skip_what_the_device_lacks_with_a_reason():
    assert sdpa_backends(A100) == (["flash", "mem-efficient", "cuDNN"], {})
    assert sdpa_backends(H100)[0] == ["flash", "mem-efficient", "cuDNN"]
    usable, skipped = sdpa_backends(T4)
    assert usable == ["mem-efficient"] and set(skipped) == {"flash", "cuDNN"}
    assert skipped["flash"] == "flash: needs compute capability 8.0, Tesla T4 has 7.5"
    for info in (MPS, CPU):
        usable, skipped = sdpa_backends(info)
        assert usable == [] and all(info.type in why and "\n" not in why for why in skipped.values())


def test_memory_budget_is_a_share_of_the_free_memory():
    assert memory_budget(T4) == int(0.5 * T4.free_bytes)
    assert memory_budget(H100, share=1.0) == H100.free_bytes
    assert memory_budget(CPU) is None


def test_device_info_reads_the_cpu_and_a_faked_cuda_device(monkeypatch):
    cpu = device_info("cpu")
    assert cpu.type == "cpu" and cpu.total_bytes is None and cpu.capability is None and cpu.name

    class Props:  # what torch.cuda.get_device_properties returns on a T4
        name, major, minor = "Tesla T4", 7, 5

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props())
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (T4.free_bytes, T4.total_bytes))
    assert device_info("cuda") == T4


def test_setup_notebook_asks_triton_for_its_interpreter_without_cuda(monkeypatch):
    import attention_course

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    attention_course.setup_notebook(seed=0)
    assert os.environ["TRITON_INTERPRET"] == "1"
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a reader's own choice is kept
    attention_course.setup_notebook(seed=0)
    assert os.environ["TRITON_INTERPRET"] == "0"
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU compiles the kernels
    attention_course.setup_notebook(seed=0)
    assert "TRITON_INTERPRET" not in os.environ
