"""Shared test settings: Hypothesis runs derandomised (the same examples on every machine and every run, as
every number in the course is), without a per-example deadline (a 2-core CI machine is slow, not wrong)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "course",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
settings.load_profile("course")
