"""Shared test settings: Hypothesis runs derandomised (the same examples on every machine and every run, as
every number in the course is), without a per-example deadline (a 2-core CI machine is slow, not wrong).

The Triton kernels are tested on CPU tensors in Triton's interpreter, which triton chooses when it is first
imported. Test modules import PyTorch's FLOP counter, which imports triton, at collection; so the variable is set
here, before any test module is imported.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "course",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
settings.load_profile("course")
