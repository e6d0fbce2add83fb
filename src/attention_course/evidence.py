"""Stored evidence that stays true on every reader's machine (chapters 2–7; ``EVIDENCE.md`` rules 14–16).

* Which numeric environment a run ran in, the environments a results file holds and how runs spread across
  them (a seed and a machine component) are :mod:`attention_course.machines`'.
* :class:`LiveCheck` — compares a live re-run with the stored runs as another machine would: per seed where this
  environment is one of the stored ones, and everywhere statistically, with a threshold (:func:`threshold`) that
  holds the chance of any false alarm in a whole run of the book to :data:`BOOK_FALSE_ALARM` under heavy-tailed
  seeds and machines. Its ``report`` says which check ran (a cell nbval ignores); its ``verdict`` is the same
  sentence on every machine.
* The few statistics the chapters judge seeds with, one copy: :func:`t_quantile`, :func:`t_interval` (of a mean
  over seeds), :func:`paired` (a difference judged seed by seed), :func:`holm` (many tests at once) and
  :func:`bootstrap_interval` (a mean near a bound such as accuracy 1, where a t-interval can run past it).

The fingerprint that makes a stale results file fail is :mod:`attention_course.fingerprint`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from ._checks import check_int, check_numbers, check_real, describe
from .machines import components, environments, same_environment, spread

__all__ = ["BOOK_COMPARISONS", "BOOK_FALSE_ALARM", "Comparison", "LiveCheck", "Paired", "bootstrap_interval", "holm",
           "paired", "t_interval", "t_quantile", "t_two_sided_p", "threshold"]


# ---------------------------------------------------------------------------------------------------------------
# A live re-run against the stored runs
# ---------------------------------------------------------------------------------------------------------------

#: The chance, on a new machine with nothing wrong, that one full run of the book raises at least one live
#: comparison: 1 %. Split evenly (Bonferroni) over :data:`BOOK_COMPARISONS`.
BOOK_FALSE_ALARM = 0.01
#: The live comparisons one full run of the book may make (``LiveCheck.compare``, ``same_sign`` and ``outcome``
#: calls, loops counted). It makes 64 today: chapter 2 30, chapter 3 10, chapter 4 10, chapter 5 4 (6 where the
#: machine is one of the stored environments: its ablations are compared seed by seed too), chapter 7 8. The
#: budget was set at 73 when the book made that many; a smaller count spends less than the budget, so it stays
#: conservative. ``make nbval`` logs each comparison and ``tools/count_comparisons.py`` fails if the book makes more.
BOOK_COMPARISONS = 73
#: One comparison's false-alarm rate.
ALPHA_EACH = BOOK_FALSE_ALARM / BOOK_COMPARISONS
#: The environment variable naming a file to which every comparison appends one line (``make nbval`` sets it).
COMPARISON_LOG = "ATTENTION_COURSE_COMPARISON_LOG"


#: The null model :func:`threshold` is calibrated on. A run's value is centre + machine effect + seed effect, each
#: effect drawn from Student's t with ``TAIL_DOF`` degrees of freedom (scaled to unit variance; infinite
#: kurtosis), the machine effect as large as the seed effect. Measured on the stored runs (2026-11-27, every
#: results file's per-seed losses, accuracies, bits per character and exact matches, each seed left out in turn
#: and compared with the others' t prediction interval, the floors the chapters use included): 2.2 % of seeds fall
#: outside the 99 % interval and 0.9 % outside the 99.9 % one; without the quantities whose seeds split between
#: outcomes, 1.5 % and 0.3 %. This model gives 2.0 % and 0.32 % for five seeds, so its tails are at least as heavy
#: as those of a quantity whose seeds reach one outcome. A quantity whose seeds split (a run that learns the task
#: and one that stalls) has tails no such model covers, and is judged by its outcome (:meth:`LiveCheck.outcome`).
TAIL_DOF = 3
MACHINE_TO_SEED = 1.0
_DRAWS, _CHUNK = 1_000_000, 100_000


@functools.cache
def _threshold(sizes: tuple[int, ...], n_live: int) -> float:
    rng = np.random.default_rng(0)
    unit = math.sqrt(TAIL_DOF / (TAIL_DOF - 2))
    # the value exceeded by ALPHA_EACH · _DRAWS − 2·sqrt(ALPHA_EACH · _DRAWS) draws: an upper bound (about 97.5 %)
    # on the quantile, whose own estimate from a million heavy-tailed draws is uncertain by several per cent
    expected = ALPHA_EACH * _DRAWS
    keep = int(math.ceil(expected - 2 * math.sqrt(expected))) + 1
    top = np.empty(0)

    def draw(*shape: int) -> np.ndarray:
        return rng.standard_t(TAIL_DOF, shape) / unit

    for _ in range(_DRAWS // _CHUNK):
        groups = [MACHINE_TO_SEED * draw(_CHUNK, 1) + draw(_CHUNK, n) for n in sizes]
        live = (MACHINE_TO_SEED * draw(_CHUNK, 1) + draw(_CHUNK, n_live)).mean(axis=1)
        center, seed_var, machine_var, center_var = components(groups)
        z = np.abs(live - center) / np.sqrt(seed_var / n_live + machine_var + center_var)
        top = np.sort(np.concatenate([top, np.partition(z, -keep)[-keep:]]))[-keep:]
    return float(top[-(keep - 1)])


def threshold(sizes: Sequence[int], n_live: int = 1) -> float:
    """How many predictive standard errors (:meth:`Spread.predictive_var`) the mean of ``n_live`` live runs may
    lie from the centre of stored runs of ``sizes`` seeds per environment: the value a run under the heavy-tailed
    null model (:data:`TAIL_DOF`, :data:`MACHINE_TO_SEED`) exceeds with probability :data:`ALPHA_EACH`, found by
    simulating a million such comparisons (seeded; cached per sizes) and taken at the upper end of that
    estimate's own uncertainty."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        raise TypeError(f"sizes must be the runs per environment (a sequence of ints), got {describe(sizes)}")
    sizes = tuple(check_int("sizes", s) for s in sizes)
    if not sizes or sum(sizes) < 2:
        raise ValueError(f"sizes must hold at least two runs in all (one gives no spread), got {list(sizes)}")
    return _threshold(sizes, check_int("n_live", n_live))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One quantity of a live re-run against its stored runs (see :class:`LiveCheck`)."""

    name: str
    check: str  # "per seed" (this environment matches a stored one), "spread", "sign" or "outcome"
    agrees: bool
    live: tuple[float, ...]
    stored: tuple[float, ...]
    allowed: float  # the largest difference from the stored centre (spread), or the stored difference (sign)
    difference: float  # mean(live) − stored centre (spread, per seed) or the live difference (sign)
    twins: tuple[tuple[float, float], ...] = ()  # per seed: (live, its stored twin), compared to ``rtol``
    rtol: float = 0.0
    environments: int = 1  # how many numeric environments the stored runs came from
    resolution: tuple[float, float] = ()  # sign: the stored difference's distance from zero, and the one needed

    def detail(self) -> str:
        def show(xs: Sequence[float]) -> str:
            return f"mean {statistics.fmean(xs):.4g} over {len(xs)}"
        where = f"{len(self.stored)} stored runs from {self.environments} environments"
        if self.check == "outcome":
            side = "reaches" if self.live[0] >= self.allowed else "stops short of"
            return (f"{self.name}: live {self.live[0]:.4g} {side} {self.allowed:g}, as {self.difference:.0f} of "
                    f"{where} did" + ("" if self.agrees else " — AN OUTCOME NO STORED RUN SHOWS")
                    + (f" (per seed: live vs its stored twin {self.twins[0][0]:.6g} vs {self.twins[0][1]:.6g})"
                       if self.twins else ""))
        if self.check == "sign":
            apart, needed = self.resolution
            return (f"{self.name}: stored difference {self.allowed:+.4g} ({where}; {apart:.3g} predictive standard "
                    f"errors from zero, {needed:.3g} needed), live {self.difference:+.4g} "
                    f"({'same sign' if self.agrees else 'SIGN DIFFERS'})")
        verdict = "" if self.agrees else "  DISAGREES"
        if self.twins:  # the decisive test: each live run equals its stored twin
            pairs = ", ".join(f"{a:.6g} vs {b:.6g}" for a, b in self.twins)
            return (f"{self.name}: live vs its stored seed {pairs}, equal to rtol {self.rtol:g} (per seed; "
                    f"and within the spread: difference {self.difference:+.3g}, allowed "
                    f"±{self.allowed:.3g})" + verdict)
        return (f"{self.name}: live {show(self.live)}, {where}; difference from their centre "
                f"{self.difference:+.3g}, allowed ±{self.allowed:.3g} ({self.check})" + verdict)


def _log(comparison: Comparison) -> None:
    path = os.environ.get(COMPARISON_LOG)
    if path:
        with open(path, "a") as f:  # one short line per write: appends from two processes do not interleave
            f.write(f"{comparison.check}\t{comparison.agrees}\t{comparison.name}\n")


Extract = Callable[[Mapping[str, object]], Sequence[float]]


class LiveCheck:
    """Compares runs re-made live on this machine with the stored runs of a results file.

    Give it the record (:func:`attention_course.measure.read_results`), which should hold runs of at least two
    numeric environments (:func:`environments`; a file measured on one only gives no machine component), and the
    thread count the live runs used. Each comparison takes the stored values as a function of a record's
    ``results``, applied to every environment's. Where this process's :func:`numeric_environment` equals a stored
    one, every live seed that environment stored must also equal its stored twin (to ``stored_rtol``, the
    precision the file keeps); everywhere the machine counts as one more seed and one more machine:
    :meth:`compare` asks that the live mean lie within :func:`threshold` predictive standard errors of the stored
    centre (:class:`Spread`: the seed and the machine components) plus ``atol``, a floor the caller states (a
    metric's resolution, say); :meth:`same_sign` asks a difference the stored runs resolve to keep its sign
    (:meth:`resolves` says whether they do). The threshold holds the chance of any false alarm in a whole run of
    the book to :data:`BOOK_FALSE_ALARM`.

    Print :meth:`report` in a cell whose output nbval ignores (it names the check and shows live numbers); then
    :meth:`verdict` in a compared cell: it raises ``AssertionError`` with the report when anything disagrees, and
    returns one sentence that is the same on every machine.
    """

    def __init__(self, record: Mapping[str, object], *, threads: int | None = None,
                 device: str | torch.device = "cpu"):
        if not isinstance(record, Mapping) or "provenance" not in record:
            raise TypeError(f"record must be a results record (read_results), got {describe(record)}")
        self.environments = environments(record)
        self._here = next((i for i, (env, _, _) in enumerate(self.environments)
                           if same_environment(env, device, threads)), None)
        self.same_machine = self._here is not None
        self.comparisons: list[Comparison] = []

    def _stored(self, stored: object) -> list[tuple[float, ...]]:
        """The stored values per environment: ``stored`` applied to each one's results. (A plain sequence would
        be one environment's values only, whatever else the file holds, so it is refused.)"""
        if not callable(stored):
            raise TypeError(f"stored must be a function of a record's results (applied to every environment's), "
                            f"got {describe(stored)}")
        return [check_numbers("stored", stored(results)) for _, _, results in self.environments]

    def _add(self, result: Comparison) -> Comparison:
        self.comparisons.append(result)
        _log(result)
        return result

    def compare(self, name: str, live: Sequence[float], stored: Extract, *, atol: float = 0.0,
                stored_rtol: float = 1e-9, live_seeds: Sequence[int] | None = None,
                stored_seeds: Sequence[int] | None = None) -> Comparison:
        """Live values of one quantity against the stored ones: ``stored(results)`` in every environment. On a
        matching machine, also per seed: ``live_seeds`` (default: the first ``len(live)`` seeds of the file's own
        settings) picks each live run's stored twin among ``stored_seeds`` (default: the matching environment's
        ``settings["seeds"]``); a live seed that environment did not store is judged by the spread only."""
        live, groups = check_numbers("live", live), self._stored(stored)
        atol = check_real("atol", atol, low=0.0)
        s = spread(groups)
        difference = statistics.fmean(live) - s.center
        var = s.predictive_var(len(live))
        # no spread measured: only the floor remains
        allowed = atol + (threshold(s.sizes, len(live)) * math.sqrt(var) if var > 0 else 0.0)
        twins = self._twins(groups, live, live_seeds, stored_seeds)
        agrees = abs(difference) <= allowed and all(math.isclose(a, b, rel_tol=stored_rtol, abs_tol=1e-12)
                                                    for a, b in twins)
        flat = tuple(v for g in groups for v in g)
        return self._add(Comparison(name, "per seed" if twins else "spread", agrees, live, flat, allowed, difference,
                                    twins, stored_rtol, len(groups)))

    def _twins(self, groups: list[tuple[float, ...]], live: tuple[float, ...],
               live_seeds: Sequence[int] | None,
               stored_seeds: Sequence[int] | None) -> tuple[tuple[float, float], ...]:
        """(live, its stored twin) per live run where this machine is one of the stored environments, else ()."""
        here = self._here
        if here is None:
            return ()
        values = groups[here]
        seeds = list(stored_seeds if stored_seeds is not None else
                     self.environments[here][1].get("seeds", range(len(values))))
        if len(seeds) != len(values):
            raise ValueError(f"stored must give one value per seed of the matching environment ({len(seeds)}), "
                             f"got {len(values)}")
        if live_seeds is None:  # the live runs re-make the experiment's first seeds (the file's own settings)
            first = list(self.environments[0][1].get("seeds", range(len(live))))
            if len(first) < len(live):
                raise ValueError(f"live_seeds must be given for more live runs ({len(live)}) than the file's "
                                 f"seeds ({len(first)}), got None")
            live_seeds = first[: len(live)]
        mine = list(live_seeds)
        if len(mine) != len(live):
            raise ValueError(f"live_seeds must name one seed per live run ({len(live)}), got {len(mine)}")
        # a live seed this environment did not store has no twin; it is still judged by the spread
        return tuple((v, values[seeds.index(seed)]) for v, seed in zip(live, mine, strict=True) if seed in seeds)

    def outcome(self, name: str, live: float, stored: Extract, *, at_least: float,
                stored_rtol: float = 1e-9, live_seed: int | None = None) -> Comparison:
        """Whether the live run's outcome is one the stored runs show, for a quantity that splits into outcomes
        rather than spreading around one value: a run reaches ``at_least`` or stops short of it (a model that
        learns a task, or stalls). A spread would read the runs that stopped short as heavy tails and allow
        anything; this asks only that some stored run, in any environment, had the same outcome. It cannot tell
        a broken run from one that stopped short, so use it beside :meth:`compare` of a quantity that does not
        split (a training loss). On a matching machine the live run must also equal its stored twin."""
        value = check_numbers("live", [live])
        at_least = check_real("at_least", at_least, low=None)
        groups = self._stored(stored)
        flat = tuple(v for g in groups for v in g)
        reached = value[0] >= at_least
        same = sum((v >= at_least) == reached for v in flat)
        twins = self._twins(groups, value, None if live_seed is None else [live_seed], None)
        agrees = same > 0 and all(math.isclose(a, b, rel_tol=stored_rtol, abs_tol=1e-12) for a, b in twins)
        return self._add(Comparison(name, "outcome", agrees, value, flat, at_least, float(same), twins, stored_rtol,
                                    len(groups)))

    def same_sign(self, name: str, live: tuple[Sequence[float], Sequence[float]],
                  stored: tuple[Extract, Extract]) -> Comparison:
        """Whether the live runs reproduce the sign of mean(a) − mean(b), which the stored runs resolve.

        The stored difference must lie more than :func:`threshold` predictive standard errors from zero (seeds and
        machines of both arms, for as many live runs as given): then a live difference of the other sign is as
        rare as a false alarm of :meth:`compare`, and a flipped sign always fails.

        Raises:
            ValueError: the stored runs do not resolve the difference that well: the check would have no power;
                store more seeds or environments, or compare more live runs.
        """
        if not isinstance(live, (tuple, list)) or len(live) != 2:
            raise TypeError(f"live must be a pair (for a, for b), got {describe(live)}")
        la, lb = (check_numbers("live", x) for x in live)
        live_diff = statistics.fmean(la) - statistics.fmean(lb)
        stored_diff, apart, needed, runs, environments_ = self._resolution(stored, len(la), len(lb))
        if not apart > needed:
            raise ValueError(f"stored must resolve the difference to have a sign, got {stored_diff:+.4g}, "
                             f"{apart:.3g} predictive standard errors from zero where {needed:.3g} are needed")
        return self._add(Comparison(name, "sign", live_diff * stored_diff > 0, la + lb, runs, stored_diff,
                                    live_diff, environments=environments_, resolution=(apart, needed)))

    def _resolution(self, stored: tuple[Extract, Extract], n_a: int,
                    n_b: int) -> tuple[float, float, float, tuple[float, ...], int]:
        """(stored difference, its distance from zero in predictive standard errors for n_a and n_b live runs,
        the distance :meth:`same_sign` needs, the stored runs of both arms, environments)."""
        if not isinstance(stored, (tuple, list)) or len(stored) != 2 or not all(callable(f) for f in stored):
            raise TypeError(f"stored must be a pair of functions of a record's results, got {describe(stored)}")
        groups = [self._stored(f) for f in stored]
        sa, sb = (spread(g) for g in groups)
        runs = tuple(v for g in groups for values in g for v in values)
        stored_diff = sa.center - sb.center
        se = math.sqrt(sa.predictive_var(n_a) + sb.predictive_var(n_b))
        # an arm of one value (a closed-form baseline) has no spread and adds none
        qs = [threshold(x.sizes, n) for x, n in ((sa, n_a), (sb, n_b)) if x.predictive_var(n) > 0]
        if not qs or se == 0:  # no spread measured on either arm: nothing says how far a live run may stray
            return stored_diff, 0.0, math.inf, runs, len(sa.sizes)
        return stored_diff, abs(stored_diff) / se, max(qs), runs, len(sa.sizes)

    def resolves(self, stored: tuple[Extract, Extract], n_live: int = 1) -> tuple[float, float]:
        """How far the stored difference mean(a) − mean(b) lies from zero, in predictive standard errors of a
        difference of ``n_live`` live runs per arm, and how far :meth:`same_sign` needs it to lie: a difference
        below that is one no such live re-run can check at the book's false-alarm budget (the stored runs'
        own paired test carries it)."""
        n_live = check_int("n_live", n_live)
        _, apart, needed, _, _ = self._resolution(stored, n_live, n_live)
        return apart, needed

    @property
    def check(self) -> str:
        n = len(self.environments)
        return (f"per seed: this machine matches one of the {n} stored environments" if self.same_machine else
                f"statistical: this machine is none of the {n} stored environments")

    def report(self) -> str:
        """Which check ran, and every comparison with its numbers (machine-dependent: print it where nbval
        ignores the output)."""
        return "\n".join([self.check, *("  " + c.detail() for c in self.comparisons)])

    def verdict(self, what: str = "the live runs") -> str:
        """One machine-independent sentence; raises ``AssertionError`` (with :meth:`report`) if any comparison
        disagrees, or if nothing was compared."""
        if not self.comparisons:
            raise AssertionError("nothing was compared")
        if not all(c.agrees for c in self.comparisons):
            raise AssertionError(f"{what} disagree with the stored evidence:\n{self.report()}")
        n = len(self.comparisons)
        return f"{what} agree with the stored evidence ({n} comparison{'s' * (n != 1)})"



# ---------------------------------------------------------------------------------------------------------------
# Judging seeds: Student's t, paired differences, Holm's correction, a bootstrap near a bound (chapters 2-4)
# ---------------------------------------------------------------------------------------------------------------

def _level(level: object) -> float:
    return check_real("level", level, low=0.0, high=1.0, open_low=True, open_high=True)


@functools.cache
def _t_cdf(dof: int):
    import sympy
    from sympy import stats
    x = sympy.Symbol("x", real=True)
    return x, stats.cdf(stats.StudentT("T", dof))(x)


@functools.cache
def _t_quantile(dof: int, level: float) -> float:
    import sympy
    x, cdf = _t_cdf(dof)
    return float(sympy.nsolve(cdf - (1 + level) / 2, x, 2.0))


def t_quantile(dof: int, level: float = 0.95) -> float:
    """The two-sided ``level`` quantile of Student's t with ``dof`` degrees of freedom (SymPy's exact CDF, solved
    numerically): 2.776 for 4 (five seeds) and 2.262 for 9 (ten seeds) at 95 %."""
    return _t_quantile(check_int("dof", dof, low=1), _level(level))


def t_two_sided_p(t: float, dof: int) -> float:
    """P(|T| >= |t|) for Student's t with ``dof`` degrees of freedom; 0 for an infinite ``t``."""
    dof = check_int("dof", dof, low=1)
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isinf(t):
        return 0.0
    t = check_real("t", t)
    x, cdf = _t_cdf(dof)
    return float(2 * (1 - cdf.subs(x, abs(t)).evalf()))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The ``level`` t-interval of the mean of ``values`` (at least two, e.g. one per seed)."""
    xs = check_numbers("values", values)
    if len(xs) < 2:
        raise ValueError(f"values must hold at least two numbers for a spread, got {len(xs)}")
    half = t_quantile(len(xs) - 1, level) * statistics.stdev(xs) / math.sqrt(len(xs))
    mean = statistics.fmean(xs)
    return mean - half, mean + half


@dataclasses.dataclass(frozen=True)
class Paired:
    """A difference x − y judged seed by seed (see :func:`paired`)."""

    mean: float  # mean of the per-seed differences
    half: float  # half-width of its t-interval at ``level``
    t: float  # mean / standard error (±inf when every seed differs by the same amount)
    greater: int  # seeds with x > y
    n: int  # seeds
    level: float

    @property
    def apart(self) -> bool:
        """The interval excludes zero: the difference is beyond the seed noise (one test at ``level``)."""
        return abs(self.t) > t_quantile(self.n - 1, self.level)

    @property
    def p(self) -> float:
        """The two-sided p-value of the paired t-test."""
        return t_two_sided_p(self.t, self.n - 1)


def paired(x: Sequence[float], y: Sequence[float], level: float = 0.95) -> Paired:
    """The per-seed differences x − y (seed i of ``x`` against seed i of ``y``, the runs sharing their initial
    weights and batches): their mean, the half-width of its ``level`` t-interval, the t statistic and how many
    seeds have x > y."""
    xs, ys = check_numbers("x", x), check_numbers("y", y)
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"x and y must hold the same number (at least 2) of seeds, got {len(xs)} and {len(ys)}")
    d = [a - b for a, b in zip(xs, ys, strict=True)]
    mean, se = statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))
    t = mean / se if se > 0 else (math.copysign(math.inf, mean) if mean else 0.0)
    half = t_quantile(len(d) - 1, level) * se
    return Paired(mean, half, t, sum(v > 0 for v in d), len(d), _level(level))


def holm(p_values: Sequence[float], alpha: float = 0.05) -> set[int]:
    """Holm's step-down correction: the indices of the tests that stay significant at family-wise level ``alpha``
    when all ``len(p_values)`` are made at once."""
    ps = check_numbers("p_values", p_values)
    if not all(0.0 <= p <= 1.0 for p in ps):
        raise ValueError(f"p_values must lie in [0, 1], got {list(ps)}")
    alpha = check_real("alpha", alpha, low=0.0, high=1.0, open_low=True, open_high=True)
    kept: set[int] = set()
    for rank, k in enumerate(sorted(range(len(ps)), key=ps.__getitem__)):
        if ps[k] > alpha / (len(ps) - rank):
            break
        kept.add(k)
    return kept


def bootstrap_interval(values: Sequence[float], level: float = 0.95, *, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values``: resample the seeds with replacement
    ``resamples`` times and take the central ``level`` of the means. It stays inside the values' range (a mean of
    accuracies never runs past 1, as a t-interval can at the ceiling); with few seeds it is narrower than it
    should be, so read it as a description, not a test."""
    xs = check_numbers("values", values)
    if len(xs) < 2:
        raise ValueError(f"values must hold at least two numbers to resample, got {len(xs)}")
    level = _level(level)
    resamples = check_int("resamples", resamples, low=100)
    g = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    idx = torch.randint(len(xs), (resamples, len(xs)), generator=g)
    means = torch.tensor(xs, dtype=torch.float64)[idx].mean(dim=1)
    lo, hi = torch.quantile(means, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return float(lo), float(hi)
