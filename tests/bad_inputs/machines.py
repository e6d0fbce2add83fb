"""Bad inputs for machines.py: a device is cpu, cuda or mps; threads a positive int; records are results
records; values are sequences, one per environment, of finite numbers."""

from attention_course.machines import Spread, environments, numeric_environment, same_environment, spread
from bad_inputs import case

RESULTS = (Spread,)  # what spread returns

CASES = [
    case(environments, lambda: environments({"results": {}}), TypeError, arg="record",
         id="machines.environments-no-provenance"),
    case(spread, lambda: spread(0.5), TypeError, arg="values_by_environment", id="machines.spread-scalar"),
    case(spread, lambda: spread([]), ValueError, arg="values_by_environment", id="machines.spread-empty"),
    case(spread, lambda: spread([[1.0, float("inf")]]), ValueError, arg="values_by_environment",
         id="machines.spread-inf"),
    case(numeric_environment, lambda: numeric_environment("npu"), ValueError, arg="device",
         id="machines.numeric_environment-device"),
    case(numeric_environment, lambda: numeric_environment(threads=0), ValueError, arg="threads",
         id="machines.numeric_environment-threads"),
    case(same_environment, lambda: same_environment({}, threads=1.5), TypeError, arg="threads",
         id="machines.same_environment-threads"),
]
