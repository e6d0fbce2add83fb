"""Stored evidence that stays true on every reader's machine (chapters 2–7; ``EVIDENCE.md`` rules 14–16).

* :func:`numeric_environment` / :func:`same_environment` — what decides the last bits of a training run: the
  PyTorch version, the device, the CPU's vendor, model and PyTorch's kernel level (``ATEN_CPU_CAPABILITY``), and
  the thread count. Seeds fix a run on one such environment only.
* :class:`LiveCheck` — compares a live re-run with the stored runs as another machine would: per seed to the
  stored precision where this environment matches the stored one, otherwise statistically (the live mean within
  the stored seeds' spread, or the same sign of a difference the stored interval resolves). Its ``report`` says
  which check ran (a cell nbval ignores); its ``verdict`` is the same sentence on every machine.
* The few statistics the chapters judge seeds with, one copy: :func:`t_quantile`, :func:`t_interval` (of a mean
  over seeds), :func:`paired` (a difference judged seed by seed), :func:`holm` (many tests at once) and
  :func:`bootstrap_interval` (a mean near a bound such as accuracy 1, where a t-interval can run past it).

The fingerprint that makes a stale results file fail is :mod:`attention_course.fingerprint`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import platform
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

from ._checks import check_device, check_int, check_real, describe

__all__ = ["Comparison", "LiveCheck", "Paired", "bootstrap_interval", "holm", "numeric_environment", "paired",
           "same_environment", "t_interval", "t_quantile", "t_two_sided_p"]


# ---------------------------------------------------------------------------------------------------------------
# The numeric environment: what decides the last bits of a run
# ---------------------------------------------------------------------------------------------------------------


def _cpu_field(field: str) -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith(field):
                return line.split(":", 1)[1].strip()
    return ""


def numeric_environment(device: str | torch.device = "cpu", threads: int | None = None) -> dict[str, object]:
    """What decides a training run's last bits besides its seed, as a JSON-ready dict.

    Keys: ``torch`` (version), ``device`` (``cpu`` or the GPU's name), ``cpu_vendor`` and ``cpu_model`` (from
    ``/proc/cpuinfo``, else :mod:`platform`), ``cpu_capability`` (the vector kernels PyTorch runs, which
    ``ATEN_CPU_CAPABILITY`` changes: ``DEFAULT``, ``AVX2``, ``AVX512``...) and ``threads`` (``threads`` if
    given, else PyTorch's current CPU threads).
    """
    device = check_device("device", device)
    threads = None if threads is None else check_int("threads", threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {
        "torch": torch.__version__,
        "device": name,
        "cpu_vendor": _cpu_field("vendor_id") or platform.machine(),
        "cpu_model": _cpu_field("model name") or platform.processor(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads() if threads is None else int(threads),
    }


def same_environment(stored: Mapping[str, object] | None, device: str | torch.device = "cpu",
                     threads: int | None = None) -> bool:
    """Whether this process would repeat the stored runs bit for bit: every key of :func:`numeric_environment`
    equal. A record without that information (written before it was kept) never matches."""
    here = numeric_environment(device, threads)  # checks device and threads
    if not isinstance(stored, Mapping):
        return False
    return all(stored.get(key) == value for key, value in here.items())


# ---------------------------------------------------------------------------------------------------------------
# A live re-run against the stored runs
# ---------------------------------------------------------------------------------------------------------------

#: How many (estimated) standard errors apart two means of the same experiment may lie on two machines. With five
#: stored seeds the spreads are themselves estimates, so the false-alarm rate is that of a t statistic, not of a
#: normal one: simulated for normal seeds, 1.6 % of comparisons for one live seed, 0.9 % for three, 0.4 % for five
#: (tests/test_evidence.py). The price of five seeds is power: a shift must be several seed spreads large to fail
#: reliably, so this catches a broken experiment, not a subtle one; more stored seeds narrow it.
Z_AGREE = 4.0
#: How many standard errors a stored difference must exceed for its sign to count as resolved (about 90 % with
#: the few degrees of freedom of five seeds).
Z_RESOLVED = 2.0


def _floats(name: str, values: object) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of numbers, got {describe(values)}")
    out = tuple(float(v) for v in values)
    if not out or not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} must hold at least one finite number, got {list(out)}")
    return out


def _standard_error(a: Sequence[float], b: Sequence[float]) -> float:
    """Welch's standard error of mean(a) − mean(b); a single value borrows the other side's spread."""
    sa = statistics.stdev(a) if len(a) > 1 else None
    sb = statistics.stdev(b) if len(b) > 1 else None
    sa = sb if sa is None else sa
    sb = sa if sb is None else sb
    if sa is None:
        return 0.0
    return math.sqrt(sa**2 / len(a) + sb**2 / len(b))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One quantity of a live re-run against its stored runs (see :class:`LiveCheck`)."""

    name: str
    check: str  # "per seed" (this environment matches the stored one) or "spread" / "sign"
    agrees: bool
    live: tuple[float, ...]
    stored: tuple[float, ...]
    allowed: float  # the largest difference of means (spread), or the stored difference (sign)
    difference: float  # mean(live) − mean(stored) (spread, per seed) or the live difference (sign)
    twins: tuple[tuple[float, float], ...] = ()  # per seed: (live, its stored twin), compared to ``rtol``
    rtol: float = 0.0

    def detail(self) -> str:
        def show(xs: Sequence[float]) -> str:
            return f"mean {statistics.fmean(xs):.4g} over {len(xs)}"
        if self.check == "sign":
            return (f"{self.name}: stored difference {self.allowed:+.4g}, live {self.difference:+.4g} "
                    f"({'same sign' if self.agrees else 'SIGN DIFFERS'})")
        verdict = "" if self.agrees else "  DISAGREES"
        if self.twins:  # the decisive test: each live run equals its stored twin
            pairs = ", ".join(f"{a:.6g} vs {b:.6g}" for a, b in self.twins)
            return (f"{self.name}: live vs its stored seed {pairs}, equal to rtol {self.rtol:g} (per seed; "
                    f"and within the seeds' spread: difference of means {self.difference:+.3g}, allowed "
                    f"±{self.allowed:.3g})" + verdict)
        return (f"{self.name}: live {show(self.live)}, stored {show(self.stored)}; "
                f"difference {self.difference:+.3g}, allowed ±{self.allowed:.3g} ({self.check})" + verdict)


class LiveCheck:
    """Compares runs re-made live on this machine with the stored runs of a results file.

    Give it the record (:func:`attention_course.measure.read_results`) and the thread count the live runs used.
    Where this process's :func:`numeric_environment` equals the record's, every live seed must equal its stored
    entry (to ``stored_rtol``, the precision the file keeps); elsewhere the machine counts as one more seed:
    :meth:`compare` asks that the live mean lie within :data:`Z_AGREE` standard errors of the stored mean (the
    stored seeds' spread, and the live seeds' where there are several) plus ``atol``, a floor the caller states
    (a metric's resolution, say); :meth:`same_sign` asks a difference the stored runs resolve to keep its sign.

    Print :meth:`report` in a cell whose output nbval ignores (it names the check and shows live numbers); then
    :meth:`verdict` in a compared cell: it raises ``AssertionError`` with the report when anything disagrees, and
    returns one sentence that is the same on every machine.
    """

    def __init__(self, record: Mapping[str, object], *, threads: int | None = None,
                 device: str | torch.device = "cpu"):
        if not isinstance(record, Mapping) or "provenance" not in record:
            raise TypeError(f"record must be a results record (read_results), got {describe(record)}")
        stored = record["provenance"].get("environment")
        self.same_machine = same_environment(stored, device, threads)
        self.comparisons: list[Comparison] = []

    def compare(self, name: str, live: Sequence[float], stored: Sequence[float], *,
                atol: float = 0.0, stored_rtol: float = 1e-9,
                live_seeds: Sequence[int] | None = None, stored_seeds: Sequence[int] | None = None) -> Comparison:
        """Live values of one quantity against the stored ones. On a matching machine, per seed: ``live_seeds``
        (default: the first ``len(live)`` of ``stored_seeds``, default 0, 1, ...) picks each live run's entry."""
        live, stored = _floats("live", live), _floats("stored", stored)
        atol = check_real("atol", atol, low=0.0)
        difference = statistics.fmean(live) - statistics.fmean(stored)
        allowed = Z_AGREE * _standard_error(live, stored) + atol
        agrees = abs(difference) <= allowed
        check, twins = "spread", ()
        if self.same_machine:
            check = "per seed"
            seeds = list(stored_seeds) if stored_seeds is not None else list(range(len(stored)))
            mine = list(live_seeds) if live_seeds is not None else seeds[: len(live)]
            pairs = [(v, stored[seeds.index(s)]) for v, s in zip(live, mine, strict=True)]
            agrees = agrees and all(math.isclose(a, b, rel_tol=stored_rtol, abs_tol=1e-12) for a, b in pairs)
            twins = tuple(pairs)
        result = Comparison(name, check, agrees, live, stored, allowed, difference, twins, stored_rtol)
        self.comparisons.append(result)
        return result

    def same_sign(self, name: str, live: tuple[Sequence[float], Sequence[float]],
                  stored: tuple[Sequence[float], Sequence[float]]) -> Comparison:
        """Whether the live runs reproduce the sign of mean(a) − mean(b), which the stored runs resolve.

        Raises:
            ValueError: the stored runs do not resolve the difference (within :data:`Z_RESOLVED` standard errors
                of zero): there is no sign to reproduce.
        """
        for what, pair in (("live", live), ("stored", stored)):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"{what} must be a pair (values of a, values of b), got {describe(pair)}")
        la, lb = (_floats("live", x) for x in live)
        sa, sb = (_floats("stored", x) for x in stored)
        stored_diff = statistics.fmean(sa) - statistics.fmean(sb)
        if abs(stored_diff) <= Z_RESOLVED * _standard_error(sa, sb):
            raise ValueError(f"stored must resolve the difference to have a sign, got {stored_diff:+.4g} within "
                             f"{Z_RESOLVED:g} standard errors of zero")
        live_diff = statistics.fmean(la) - statistics.fmean(lb)
        result = Comparison(name, "sign", live_diff * stored_diff > 0, la + lb, sa + sb, stored_diff, live_diff)
        self.comparisons.append(result)
        return result

    @property
    def check(self) -> str:
        return ("per seed: this machine matches the stored runs' environment" if self.same_machine else
                "statistical: this machine differs from the stored runs' environment (or the file predates it)")

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
    xs = _floats("values", values)
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
    xs, ys = _floats("x", x), _floats("y", y)
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
    ps = _floats("p_values", p_values)
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
    xs = _floats("values", values)
    if len(xs) < 2:
        raise ValueError(f"values must hold at least two numbers to resample, got {len(xs)}")
    level = _level(level)
    resamples = check_int("resamples", resamples, low=100)
    g = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    idx = torch.randint(len(xs), (resamples, len(xs)), generator=g)
    means = torch.tensor(xs, dtype=torch.float64)[idx].mean(dim=1)
    lo, hi = torch.quantile(means, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return float(lo), float(hi)
