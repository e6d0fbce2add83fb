"""The properties torch reports for the devices readers have (issue #16); none of them is on the CI machine.

The tests of the GPU cells' choices (dtype, backends, sizes) run on the CPU with these.
"""

from attention_course.device import DeviceInfo

GiB = 2**30
T4 = DeviceInfo("cuda", "Tesla T4", int(14.7 * GiB), int(14.5 * GiB), (7, 5))  # Colab, Kaggle
P100 = DeviceInfo("cuda", "Tesla P100-PCIE-16GB", int(15.9 * GiB), int(15.6 * GiB), (6, 0))  # Kaggle
A100 = DeviceInfo("cuda", "NVIDIA A100-SXM4-40GB", int(39.4 * GiB), int(39.0 * GiB), (8, 0))
H100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", int(79.1 * GiB), int(78.5 * GiB), (9, 0))
MPS = DeviceInfo("mps", "Apple MPS", int(10.7 * GiB), int(10.0 * GiB))  # a 16 GB Mac
CPU = DeviceInfo("cpu", "cpu: some x86_64", None, None)
