"""The numeric environment, and live re-runs compared with stored ones (attention_course.evidence)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_course import evidence, machines
from attention_course.evidence import LiveCheck
from attention_course.machines import numeric_environment


def _record(same: bool, threads: int = 1, values=None) -> dict:
    """A results record of one environment, this one (same) or another, holding ``values`` as results["v"]."""
    env = numeric_environment(threads=threads)
    values = STORED if values is None else values
    return {"provenance": {"environment": env if same else {**env, "cpu_vendor": "elsewhere"}},
            "settings": {"seeds": list(range(len(values)))}, "results": {"v": list(values)}}


STORED = [0.10, 0.12, 0.11, 0.13, 0.09]  # five seeds: mean 0.11, std 0.0158
V = lambda results: results["v"]  # noqa: E731 - the stored values, from any environment's results


def test_another_machine_is_compared_within_the_band_the_budget_allows():
    check = LiveCheck(_record(False), threads=1)
    near = check.compare("loss", [0.125, 0.10], V)  # another machine's seeds 0 and 1
    assert near.check == "spread" and near.agrees
    # threshold(sizes, live runs) predictive standard errors: s²/2 + s²/5 (one environment: no machine part)
    s = machines.spread([STORED])
    assert near.allowed == pytest.approx(evidence.threshold((5,), 2) * math.sqrt(s.predictive_var(2)))
    assert near.allowed == pytest.approx(evidence.threshold((5,), 2) * 0.0158114 * math.sqrt(1 / 2 + 1 / 5), rel=1e-4)
    # one environment leaves the machine's share unmeasured, and the threshold allows for it (about 54 predictive
    # standard errors for one live run): a broken experiment a hundred seed spreads away still fails
    far = check.compare("loss", [0.11 + 100 * 0.0158], V)
    assert not far.agrees
    with pytest.raises(AssertionError, match="disagree with the stored evidence"):
        check.verdict()
    assert "statistical" in check.report() and "DISAGREES" in check.report()


def test_the_matching_machine_is_held_to_every_seed():
    check = LiveCheck(_record(True, threads=1), threads=1)
    assert check.same_machine
    assert check.compare("loss", STORED[:2], V).agrees
    # within the spread, yet not what this machine stored for seed 1: a per-seed difference fails here
    assert not check.compare("loss", [0.10, 0.121], V).agrees
    # live seeds named explicitly
    assert check.compare("loss", [0.13], V, live_seeds=[3]).agrees
    assert "per seed" in check.report()
    # the report shows the decisive test: each live value beside its stored twin, and the tolerance
    assert f"0.13 vs {STORED[3]:.6g}, equal to rtol 1e-09" in check.report()


def test_a_threads_change_is_another_machine():
    assert not LiveCheck(_record(True, threads=1), threads=2).same_machine


def test_a_zero_spread_needs_a_stated_floor():
    check = LiveCheck(_record(False, values=[1.0] * 5))
    assert not check.compare("accuracy", [0.999], V).agrees
    assert check.compare("accuracy", [0.999], V, atol=0.002).agrees


def test_the_verdict_is_one_sentence_the_same_on_every_machine():
    texts = []
    for same in (True, False):
        check = LiveCheck(_record(same, threads=1), threads=1)
        check.compare("loss", STORED[:2], V)
        texts.append(check.verdict("seeds 0 and 1"))
    assert texts[0] == texts[1] == "seeds 0 and 1 agree with the stored evidence (1 comparison)"
    with pytest.raises(AssertionError, match="nothing was compared"):
        LiveCheck(_record(False)).verdict()


def test_live_check_refuses_bad_input():
    with pytest.raises(TypeError, match="record must be a results record"):
        LiveCheck({"results": {}})
    check = LiveCheck(_record(False))
    with pytest.raises(TypeError, match="live must be a sequence of numbers"):
        check.compare("x", 0.3, V)
    with pytest.raises(ValueError, match="stored must hold at least one finite number"):
        check.compare("x", [0.3], lambda results: [])
    with pytest.raises(ValueError, match="atol must be"):
        check.compare("x", [0.3], V, atol=-1)
    # stored values given as a list would be one environment's only, whatever the file holds
    with pytest.raises(TypeError, match="stored must be a function of a record's results"):
        check.compare("x", [0.3], STORED)
    with pytest.raises(TypeError, match="stored must be a function of a record's results"):
        check.outcome("x", 0.3, STORED, at_least=0.5)
    with pytest.raises(TypeError, match="stored must be a pair of functions"):
        check.same_sign("x", ([0.3], [0.1]), (STORED, STORED))


# --- judging seeds ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dof, level, table", [(4, 0.95, 2.776), (9, 0.95, 2.262), (1, 0.95, 12.706),
                                               (4, 0.99, 4.604), (1000, 0.95, 1.962)])
def test_t_quantile_matches_the_printed_tables(dof, level, table):
    assert evidence.t_quantile(dof, level) == pytest.approx(table, abs=1e-3)
    # and the p-value inverts it
    assert evidence.t_two_sided_p(evidence.t_quantile(dof, level), dof) == pytest.approx(1 - level, abs=1e-9)


def test_t_two_sided_p_is_one_at_zero_and_zero_at_infinity():
    assert evidence.t_two_sided_p(0.0, 4) == pytest.approx(1.0)
    assert evidence.t_two_sided_p(math.inf, 4) == 0.0
    assert evidence.t_two_sided_p(-3.0, 4) == evidence.t_two_sided_p(3.0, 4)


def test_t_interval_is_mean_plus_minus_t_times_standard_error():
    xs = [0.61, 0.72, 0.55, 0.68, 0.70]
    lo, hi = evidence.t_interval(xs)
    half = 2.7764451 * np.std(xs, ddof=1) / math.sqrt(5)
    assert (lo, hi) == pytest.approx((np.mean(xs) - half, np.mean(xs) + half), rel=1e-7)


def test_paired_judges_the_per_seed_differences_not_the_two_spreads():
    # a large seed-to-seed spread shared by both arms: unpaired intervals overlap, the pairs are all +0.05
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0]) + np.array([0.05, 0.04, 0.06, 0.05, 0.05])
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    r = evidence.paired(x, y)
    d = x - y
    assert r.mean == pytest.approx(d.mean()) and r.greater == 5 and r.n == 5
    assert r.t == pytest.approx(d.mean() / (d.std(ddof=1) / math.sqrt(5)))
    assert r.half == pytest.approx(2.7764451 * d.std(ddof=1) / math.sqrt(5), rel=1e-6)
    assert r.apart and r.p < 0.001
    lo_x, hi_x = evidence.t_interval(x)
    assert evidence.t_interval(y)[1] > lo_x  # unpaired, the intervals overlap
    # controls: the same arm against itself, and a difference within the noise
    assert not evidence.paired(y, y).apart and evidence.paired(y, y).t == 0.0
    noisy = evidence.paired(y + np.array([0.1, -0.1, 0.05, -0.05, 0.01]), y)
    assert not noisy.apart and noisy.p > 0.5
    assert evidence.paired(y + 1, y).t == math.inf  # every seed +1 exactly


def test_holm_keeps_the_small_p_values_step_by_step():
    assert evidence.holm([0.001, 0.04, 0.01, 0.5]) == {0, 2}  # 0.001 <= .05/4, 0.01 <= .05/3, 0.04 > .05/2
    assert evidence.holm([0.02, 0.03, 0.04]) == set()  # 0.02 > 0.05/3: nothing survives, though all < 0.05
    assert evidence.holm([0.02, 0.03, 0.04], alpha=0.1) == {0, 1, 2}
    # never keeps more than the uncorrected tests, never fewer than Bonferroni's
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = rng.uniform(0, 0.2, size=8)
        kept = evidence.holm(p)
        assert {k for k in range(8) if p[k] <= 0.05 / 8} <= kept <= {k for k in range(8) if p[k] <= 0.05}


def test_bootstrap_interval_stays_inside_the_values_and_covers_the_mean():
    acc = [1.0] * 9 + [0.922]  # one seed off the ceiling
    lo, hi = evidence.bootstrap_interval(acc)
    assert 0.922 <= lo < np.mean(acc) < hi <= 1.0
    assert evidence.t_interval(acc)[1] > 1.0  # the t-interval runs past the ceiling
    assert evidence.bootstrap_interval(acc) == (lo, hi)  # seeded
    assert evidence.bootstrap_interval([1.0] * 5) == (1.0, 1.0)
    xs = np.random.default_rng(1).normal(size=200)
    b, t = evidence.bootstrap_interval(xs), evidence.t_interval(xs)
    assert b == pytest.approx(t, abs=0.05)  # many values: the two agree


# --- every machine: the environment, several environments, the book's false-alarm budget (#38) ----------------


def _two_environments(first, second, *, here_second=False):
    env = numeric_environment(threads=1)
    other = {**env, "cpu_id": "family 0 model 0 stepping 0"}
    return {"provenance": {"environment": other}, "settings": {"seeds": list(range(len(first)))},
            "results": {"v": list(first)},
            "machines": [{"provenance": {"environment": env if here_second else {**other, "cpu_capability": "X"}},
                          "settings": {"seeds": list(range(len(second)))}, "results": {"v": list(second)}}]}


def _matching_second(first, second) -> LiveCheck:
    """A LiveCheck of two environments whose second is this machine's (skipped where the processor does not say
    what it is)."""
    check = LiveCheck(_two_environments(first, second, here_second=True), threads=1)
    if not check.same_machine:
        pytest.skip("this processor does not say what it is (no /proc/cpuinfo)")
    return check


@pytest.mark.parametrize("sizes", [(5, 2), (5, 10, 10)])
def test_the_threshold_holds_the_whole_book_to_its_false_alarm_budget(sizes):
    """An independent simulation of the null model (other draws than threshold's own): one comparison's false
    alarms stay within ALPHA_EACH (up to the simulation's error), so a whole run of the book's BOOK_COMPARISONS
    stays within BOOK_FALSE_ALARM — with heavy tails (Student's t, 3 degrees of freedom) and a machine effect as
    large as the seed effect. Under normal seeds the same threshold is far from the budget."""
    q = evidence.threshold(sizes)
    rng = np.random.default_rng(12345)
    unit = math.sqrt(3.0)
    draws, alarms, normal_alarms = 400_000, 0, 0
    for heavy in (True, False):
        def draw(*shape, heavy=heavy):
            return rng.standard_t(3, shape) / unit if heavy else rng.standard_normal(shape)
        groups = [draw(draws, 1) + draw(draws, n) for n in sizes]
        live = (draw(draws, 1) + draw(draws, 1)).mean(axis=1)
        center, seed_var, machine_var, center_var = machines.components(groups)
        hits = int((np.abs(live - center) > q * np.sqrt(seed_var + machine_var + center_var)).sum())
        if heavy:
            alarms = hits
        else:
            normal_alarms = hits
    expected = evidence.ALPHA_EACH * draws  # 62.5
    assert alarms <= expected + 3 * math.sqrt(expected), (alarms, expected)
    assert 1 - (1 - alarms / draws) ** evidence.BOOK_COMPARISONS <= evidence.BOOK_FALSE_ALARM * 1.25
    assert normal_alarms < expected / 4


def test_a_broken_experiment_still_fails_with_every_environment_stored():
    """Planted faults against stored runs in two environments (the shape of a file with a second machine): a
    flipped sign and a mean shifted far beyond the stored spread fail; a live run like the stored ones passes."""
    rng = np.random.default_rng(7)
    a = [list(0.50 + 0.01 * rng.standard_normal(5)), list(0.51 + 0.01 * rng.standard_normal(3))]
    b = [list(0.10 + 0.01 * rng.standard_normal(5)), list(0.10 + 0.01 * rng.standard_normal(3))]
    record = _two_environments(a[0], a[1])
    check = LiveCheck(record, threads=1)
    assert check.compare("loss", [0.505], V).agrees
    q = evidence.threshold((5, 3))
    sd = math.sqrt(machines.spread(a).predictive_var(1))
    far = 0.505 + 1.2 * q * sd  # a mean beyond the band
    assert not check.compare("loss", [far], V).agrees
    # the sign of a − b: stored +0.4, resolved by far more than the band
    both = LiveCheck({**record, "results": {"a": a[0], "b": b[0]},
                      "machines": [{**record["machines"][0], "results": {"a": a[1], "b": b[1]}}]}, threads=1)
    get_a, get_b = (lambda r: r["a"]), (lambda r: r["b"])
    assert both.same_sign("a − b", ([0.5], [0.1]), (get_a, get_b)).agrees
    assert not both.same_sign("a − b", ([0.1], [0.5]), (get_a, get_b)).agrees  # flipped
    with pytest.raises(ValueError, match="stored must resolve the difference"):
        both.same_sign("a − a", ([0.5], [0.5]), (get_a, get_a))
    with pytest.raises(AssertionError, match="disagree"):
        both.verdict()


def test_outcome_accepts_what_some_stored_run_did_and_nothing_else():
    learned = [0.99, 1.0, 0.995, 0.99, 0.985]
    mixed = [0.86, 0.994, 0.99]
    check = LiveCheck(_two_environments(learned, mixed), threads=1)
    assert check.outcome("exact match", 0.99, V, at_least=0.98).agrees
    short = check.outcome("exact match", 0.5, V, at_least=0.98)
    assert short.agrees and "stops short of 0.98, as 1 of 8 stored runs" in short.detail()
    only_learned = LiveCheck(_two_environments(learned, learned[:2]), threads=1)
    assert not only_learned.outcome("exact match", 0.9, V, at_least=0.98).agrees
    assert "NO STORED RUN SHOWS" in only_learned.report()


def test_a_matching_machine_is_held_to_its_twin_in_any_environment():
    check = _matching_second([0.50, 0.52, 0.51], [0.40, 0.42])
    assert check.compare("loss", [0.42], V, live_seeds=[1]).agrees  # seed 1 of the second environment
    assert not check.compare("loss", [0.421], V, live_seeds=[1]).agrees
    assert check.comparisons[0].check == "per seed"
    assert check.outcome("score", 0.40, V, at_least=0.45).agrees  # seed 0 here: 0.40
    assert not check.outcome("score", 0.401, V, at_least=0.45).agrees


def test_a_live_seed_the_matching_environment_did_not_store_is_judged_by_the_spread():
    check = _matching_second([0.50, 0.52, 0.51], [0.40, 0.42])
    # seeds 0-2 live; this environment stored 0-1: two twins, seed 2 only in the spread
    both = check.compare("loss", [0.40, 0.42, 0.45], V, live_seeds=[0, 1, 2])
    assert both.agrees and both.twins == ((0.40, 0.40), (0.42, 0.42))
    assert not check.compare("loss", [0.40, 0.43, 0.45], V, live_seeds=[0, 1, 2]).agrees  # seed 1 is off
    with pytest.raises(ValueError, match="live_seeds must name one seed per live run"):
        check.compare("loss", [0.40, 0.42], V, live_seeds=[0])


def test_resolves_says_whether_a_live_sign_check_would_have_power():
    rng = np.random.default_rng(3)
    a = [list(0.50 + 0.01 * rng.standard_normal(5)), list(0.50 + 0.01 * rng.standard_normal(2))]
    near = [list(0.52 + 0.01 * rng.standard_normal(5)), list(0.52 + 0.01 * rng.standard_normal(2))]
    far = [list(-0.5 + 0.01 * rng.standard_normal(5)), list(-0.5 + 0.01 * rng.standard_normal(2))]
    record = {**_two_environments(a[0], a[1]), "results": {"a": a[0], "near": near[0], "far": far[0]}}
    record["machines"][0]["results"] = {"a": a[1], "near": near[1], "far": far[1]}
    check = LiveCheck(record, threads=1)
    get = {k: (lambda r, k=k: r[k]) for k in ("a", "near", "far")}
    apart, needed = check.resolves((get["a"], get["far"]))
    sa, sf = machines.spread(a), machines.spread(far)
    assert apart == pytest.approx(abs(sa.center - sf.center) / math.sqrt(sa.predictive_var(1) + sf.predictive_var(1)))
    assert needed == evidence.threshold((5, 2)) and apart > needed
    check.same_sign("a − far", ([0.5], [-0.5]), (get["a"], get["far"]))  # resolved: it checks
    apart, needed = check.resolves((get["a"], get["near"]))
    assert apart < needed  # two spreads apart: no live run can settle it
    with pytest.raises(ValueError, match="where .* are needed"):
        check.same_sign("a − near", ([0.5], [0.52]), (get["a"], get["near"]))
    assert check.resolves((get["a"], get["near"]), n_live=3)[1] == evidence.threshold((5, 2), 3)
    with pytest.raises(TypeError, match="stored must be a pair of functions"):
        check.resolves(([0.5], [0.1]))
    with pytest.raises(ValueError, match="n_live must be a positive integer"):
        check.resolves((get["a"], get["far"]), n_live=0)


def test_each_comparison_is_logged_for_the_books_count(tmp_path, monkeypatch):
    log = tmp_path / "comparisons.log"
    monkeypatch.setenv(evidence.COMPARISON_LOG, str(log))
    check = LiveCheck(_two_environments([0.5, 0.51, 0.52], [0.5, 0.49]), threads=1)
    check.compare("loss", [0.5], V)
    check.outcome("loss", 0.5, V, at_least=0.4)
    lines = log.read_text().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["spread", "outcome"]


def test_the_books_count_of_comparisons_is_held_to_the_budget(tmp_path, capsys):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "count_comparisons", Path(__file__).resolve().parents[1] / "tools" / "count_comparisons.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    log = tmp_path / "comparisons.log"
    log.write_text("spread\tTrue\ta\nsign\tTrue\tb\n")
    assert tool.main([str(log)]) == 0
    assert "live comparisons made: 2 (sign 1, spread 1)" in capsys.readouterr().out
    log.write_text("spread\tTrue\tx\n" * (evidence.BOOK_COMPARISONS + 1))
    assert tool.main([str(log)]) == 1
    log.write_text("")
    assert tool.main([str(log)]) == 1  # nothing logged: the log never reached the notebooks


def test_by_default_the_live_runs_are_the_files_first_seeds_whatever_this_environment_stored():
    # five live runs (seeds 0-4 of the file's own settings); the matching environment stored seeds 0-1 only
    check = _matching_second([0.50, 0.52, 0.51, 0.53, 0.49], [0.40, 0.42])
    both = check.compare("loss", [0.40, 0.42, 0.50, 0.50, 0.50], V)
    assert both.twins == ((0.40, 0.40), (0.42, 0.42))
    with pytest.raises(ValueError, match="live_seeds must be given for more live runs"):
        check.compare("loss", [0.4] * 6, V)
