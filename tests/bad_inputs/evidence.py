"""Bad inputs for evidence.py and fingerprint.py: code is functions, classes or paths; records are results
records; live and stored values are non-empty sequences of finite numbers."""

from attention_course.evidence import (
    Comparison,
    LiveCheck,
    Paired,
    bootstrap_interval,
    holm,
    paired,
    t_interval,
    t_quantile,
    t_two_sided_p,
    threshold,
)
from attention_course.fingerprint import code_closure, code_fingerprint, fingerprint_names, recompute_fingerprint
from bad_inputs import case

RESULTS = (Comparison, Paired)  # what LiveCheck.compare and paired return


def _check():
    return LiveCheck({"provenance": {}})


def _two_env_check():
    return LiveCheck({"provenance": {}, "results": {}, "machines": [{"provenance": {}, "results": {}}]})


CASES = [
    case(threshold, lambda: threshold(3), TypeError, arg="sizes", id="evidence.threshold-int"),
    case(threshold, lambda: threshold([1]), ValueError, arg="sizes", id="evidence.threshold-one-run"),
    case(threshold, lambda: threshold([5, 2.5]), TypeError, arg="sizes", id="evidence.threshold-float"),
    case(threshold, lambda: threshold([5], n_live=0), ValueError, arg="n_live", id="evidence.threshold-no-live"),
    case(LiveCheck, lambda: _two_env_check().outcome("x", 0.5, lambda r: [0.9], at_least="high"), TypeError,
         arg="at_least", id="evidence.outcome-at-least"),
    case(code_fingerprint, lambda: code_fingerprint([3]), TypeError, arg="code", id="evidence.code_fingerprint-int"),
    case(code_fingerprint, lambda: code_fingerprint([len], {"x": object()}), TypeError, arg="code",
         id="evidence.code_fingerprint-builtin"),
    case(code_fingerprint, lambda: code_fingerprint([_check], {"x": object()}), TypeError, arg="settings",
         id="evidence.code_fingerprint-settings"),
    case(code_closure, lambda: code_closure([3.5]), TypeError, arg="code", id="evidence.code_closure-float"),
    case(fingerprint_names, lambda: fingerprint_names(["main"]), TypeError, arg="code",
         id="evidence.fingerprint_names-string"),
    case(recompute_fingerprint, lambda: recompute_fingerprint([], "."), TypeError, arg="record",
         id="evidence.recompute_fingerprint-list"),
    case(recompute_fingerprint, lambda: recompute_fingerprint({"provenance": {}, "settings": {}}, "."), ValueError,
         arg="record", says="fingerprint", id="evidence.recompute_fingerprint-unstamped"),
    case(LiveCheck, lambda: LiveCheck({"results": {}}), TypeError, arg="record", id="evidence.LiveCheck-record"),
    case(LiveCheck, lambda: LiveCheck({"provenance": {}}, threads=-1), ValueError, arg="threads",
         id="evidence.LiveCheck-threads"),
    case(LiveCheck, lambda: _check().compare("x", 0.3, [0.1]), TypeError, arg="live", id="evidence.compare-scalar"),
    case(LiveCheck, lambda: _check().compare("x", [0.3], lambda r: [float("nan")]), ValueError, arg="stored",
         id="evidence.compare-nan"),
    case(LiveCheck, lambda: _check().compare("x", [0.3], [0.1, 0.2]), TypeError, arg="stored", says="function",
         id="evidence.compare-list"),
    case(LiveCheck, lambda: _check().same_sign("x", [0.1, 0.2, 0.3], ([0.1], [0.2])), TypeError, arg="live",
         says="pair", id="evidence.same_sign-not-a-pair"),
    case(t_quantile, lambda: t_quantile(0), ValueError, arg="dof", id="evidence.t_quantile-dof"),
    case(t_quantile, lambda: t_quantile(4, 95), ValueError, arg="level", id="evidence.t_quantile-percent"),
    case(t_two_sided_p, lambda: t_two_sided_p("2.7", 4), TypeError, arg="t", id="evidence.t_two_sided_p-string"),
    case(t_interval, lambda: t_interval([0.5]), ValueError, arg="values", id="evidence.t_interval-one"),
    case(paired, lambda: paired([1, 2, 3], [1, 2]), ValueError, arg="x and y", id="evidence.paired-lengths"),
    case(paired, lambda: paired([1, 2], 3), TypeError, arg="y", id="evidence.paired-scalar"),
    case(holm, lambda: holm([0.01, 1.5]), ValueError, arg="p_values", id="evidence.holm-p"),
    case(holm, lambda: holm([0.01], alpha=0), ValueError, arg="alpha", id="evidence.holm-alpha"),
    case(bootstrap_interval, lambda: bootstrap_interval([1.0, 0.9], resamples=10), ValueError, arg="resamples",
         id="evidence.bootstrap_interval-resamples"),
    case(bootstrap_interval, lambda: bootstrap_interval([float("inf"), 1.0]), ValueError, arg="values",
         id="evidence.bootstrap_interval-inf"),
]
