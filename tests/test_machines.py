"""Which numeric environment a run ran in, and how runs spread over seeds and environments
(attention_course.machines)."""

from __future__ import annotations

import pytest
import torch

from attention_course import machines
from attention_course.machines import numeric_environment


def test_numeric_environment_names_what_decides_the_last_bits():
    env = numeric_environment(threads=3)
    assert env["torch"] == torch.__version__ and env["threads"] == 3 and env["device"] == "cpu"
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machines.same_environment(env, threads=3)
    assert not machines.same_environment(env, threads=4)
    assert not machines.same_environment({**env, "cpu_capability": "NEON"}, threads=3)
    assert not machines.same_environment(None)  # a file written before environments were kept


def test_the_environment_is_what_decides_the_kernels_not_a_model_name(monkeypatch):
    env = numeric_environment(threads=1)
    assert {"cpu_id", "cpu_flags", "mkl_cbwr"} <= env.keys()
    if env["cpu_id"] and env["cpu_flags"]:  # a Linux machine that says what it is
        assert machines.same_environment({**env, "cpu_model": "Intel Xeon Processor"}, threads=1)  # a name only
        level = "DEFAULT" if env["cpu_capability"] != "DEFAULT" else "AVX2"
        for key, other in (("cpu_flags", [*env["cpu_flags"], "avx512f"]), ("cpu_id", "family 6 model 85 stepping 7"),
                           ("mkl_cbwr", "COMPATIBLE"), ("cpu_capability", level)):
            assert not machines.same_environment({**env, key: other}, threads=1), key
        assert not machines.same_environment({k: v for k, v in env.items() if k != "cpu_id"}, threads=1)
    # a processor that does not say what it is: never the same as anything
    monkeypatch.setattr(machines, "_cpuinfo", lambda: {})
    unknown = numeric_environment(threads=1)
    assert unknown["cpu_id"] == "" and not machines.same_environment(unknown, threads=1)


def test_spread_separates_the_seeds_from_the_machines():
    same = machines.spread([[1.0, 2.0, 3.0], [1.5, 2.5]])  # means 2 and 2: no machine effect
    assert same.seed_var == pytest.approx((1 + 0 + 1 + 0.25 + 0.25) / 3) and same.machine_var == 0
    assert same.center == pytest.approx(2.0) and same.sizes == (3, 2) and same.dof == 3
    apart = machines.spread([[1.0, 2.0, 3.0], [11.0, 12.0, 13.0]])  # means 2 and 12, seeds' variance 1
    # MS_between = 3 · (5² + 5²) = 150; n₀ = 3: (150 − 1) / 3
    assert apart.seed_var == pytest.approx(1.0) and apart.machine_var == pytest.approx(149 / 3)
    assert apart.center_var == pytest.approx((149 / 3 + 1 / 3) / 2)
    assert apart.predictive_var(1) == pytest.approx(1 + 149 / 3 + apart.center_var)
    one_each = machines.spread([[1.0], [3.0]])  # one run per environment: their spread is all there is
    assert one_each.seed_var == pytest.approx(2.0) and one_each.machine_var == 0


def test_a_value_every_environment_shares_has_no_spread_at_all():
    # a closed-form baseline stored in three environments: averaging 3.2539906866357606 three times does not give
    # it back exactly, and the rounding (~1e-31) must not read as a spread that a threshold then scales
    x = 3.2539906866357606
    s = machines.spread([[x], [x], [x]])
    assert (s.center, s.seed_var, s.machine_var, s.center_var) == (x, 0.0, 0.0, 0.0)
    assert s.predictive_var(1) == 0.0
    assert machines.spread([[x], [x], [x + 1e-12]]).seed_var > 0  # a real difference, however small, remains
