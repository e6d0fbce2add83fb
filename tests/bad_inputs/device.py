"""Bad inputs for device.py and the package's setup_notebook: device names torch knows and this machine has,
seeds that every generator accepts."""

import torch

import attention_course
from attention_course.device import (
    DeviceInfo,
    compute_dtype,
    device_info,
    get_device,
    memory_budget,
    sdpa_backends,
    seed_everything,
    seeded,
)
from bad_inputs import case

T4 = DeviceInfo("cuda", "Tesla T4", 15 * 2**30, 14 * 2**30, (7, 5))


def _enter(seed):
    with seeded(seed):
        pass


CASES = [
    case(get_device, lambda: get_device("gpu"), ValueError, arg="prefer", says="'cuda'", id="device.get_device-name"),
    case(get_device, lambda: get_device(0), TypeError, arg="prefer", id="device.get_device-int"),
    case(get_device, lambda: get_device("cuda:7" if torch.cuda.device_count() < 8 else "xla"), ValueError,
         arg="prefer", says="machine has", id="device.get_device-missing"),
    case(seed_everything, lambda: seed_everything(2**40), ValueError, arg="seed", id="device.seed_everything-large"),
    case(seed_everything, lambda: seed_everything(-1), ValueError, arg="seed", id="device.seed_everything-negative"),
    case(seed_everything, lambda: seed_everything(0.5), TypeError, arg="seed", id="device.seed_everything-float"),
    case(seeded, lambda: _enter("0"), TypeError, arg="seed", id="device.seeded-string"),
    case(seeded, lambda: _enter(-3), ValueError, arg="seed", id="device.seeded-negative"),
    case(attention_course.setup_notebook, lambda: attention_course.setup_notebook(seed=None), TypeError, arg="seed",
         id="package.setup_notebook-none"),
    case(device_info, lambda: device_info("gpu"), ValueError, arg="device", id="device.device_info-name"),
    case(device_info, lambda: device_info(3), TypeError, arg="device", id="device.device_info-int"),
    case((compute_dtype, DeviceInfo), lambda: compute_dtype({"type": "cuda"}), TypeError, arg="info",
         says="DeviceInfo", id="device.compute_dtype-dict"),
    case((compute_dtype, DeviceInfo), lambda: compute_dtype(T4._replace(type="tpu")), ValueError, arg="info",
         says="tpu", id="device.compute_dtype-type"),
    case((sdpa_backends, DeviceInfo), lambda: sdpa_backends(T4._replace(capability=None)), ValueError, arg="info",
         says="capability", id="device.sdpa_backends-no-capability"),
    case(memory_budget, lambda: memory_budget(T4, share=0), ValueError, arg="share", id="device.memory_budget-zero"),
    case(memory_budget, lambda: memory_budget(T4, share="half"), TypeError, arg="share",
         id="device.memory_budget-string"),
    case(memory_budget, lambda: memory_budget(T4._replace(free_bytes=-1)), ValueError, arg="info.free_bytes",
         id="device.memory_budget-negative-free"),
]
