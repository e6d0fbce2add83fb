"""Bad inputs for device.py and the package's setup_notebook: device names torch knows and this machine has,
seeds that every generator accepts."""

import torch

import attention_course
from attention_course.device import get_device, seed_everything, seeded
from bad_inputs import case


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
]
