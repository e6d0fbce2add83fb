"""Bad inputs for evidence.py and fingerprint.py: code is functions, classes or paths; records are results
records; live and stored values are non-empty sequences of finite numbers."""

from attention_course.evidence import Comparison, LiveCheck, numeric_environment, same_environment
from attention_course.fingerprint import code_closure, code_fingerprint, fingerprint_names, recompute_fingerprint
from bad_inputs import case

RESULTS = (Comparison,)  # what LiveCheck.compare returns


def _check():
    return LiveCheck({"provenance": {}})


CASES = [
    case(code_fingerprint, lambda: code_fingerprint([3]), TypeError, arg="code", id="evidence.code_fingerprint-int"),
    case(code_fingerprint, lambda: code_fingerprint([len], {"x": object()}), TypeError, arg="code",
         id="evidence.code_fingerprint-builtin"),
    case(code_fingerprint, lambda: code_fingerprint([_check], {"x": object()}), TypeError, arg="settings",
         id="evidence.code_fingerprint-settings"),
    case(code_closure, lambda: code_closure([3.5]), TypeError, arg="code", id="evidence.code_closure-float"),
    case(fingerprint_names, lambda: fingerprint_names(["main"]), TypeError, arg="code",
         id="evidence.fingerprint_names-string"),
    case(numeric_environment, lambda: numeric_environment("npu"), ValueError, arg="device",
         id="evidence.numeric_environment-device"),
    case(numeric_environment, lambda: numeric_environment(threads=0), ValueError, arg="threads",
         id="evidence.numeric_environment-threads"),
    case(same_environment, lambda: same_environment({}, threads=1.5), TypeError, arg="threads",
         id="evidence.same_environment-threads"),
    case(recompute_fingerprint, lambda: recompute_fingerprint([], "."), TypeError, arg="record",
         id="evidence.recompute_fingerprint-list"),
    case(recompute_fingerprint, lambda: recompute_fingerprint({"provenance": {}, "settings": {}}, "."), ValueError,
         arg="record", says="fingerprint", id="evidence.recompute_fingerprint-unstamped"),
    case(LiveCheck, lambda: LiveCheck({"results": {}}), TypeError, arg="record", id="evidence.LiveCheck-record"),
    case(LiveCheck, lambda: LiveCheck({"provenance": {}}, threads=-1), ValueError, arg="threads",
         id="evidence.LiveCheck-threads"),
    case(LiveCheck, lambda: _check().compare("x", 0.3, [0.1]), TypeError, arg="live", id="evidence.compare-scalar"),
    case(LiveCheck, lambda: _check().compare("x", [0.3], [float("nan")]), ValueError, arg="stored",
         id="evidence.compare-nan"),
    case(LiveCheck, lambda: _check().same_sign("x", [0.1, 0.2, 0.3], ([0.1], [0.2])), TypeError, arg="live",
         says="pair", id="evidence.same_sign-not-a-pair"),
]
