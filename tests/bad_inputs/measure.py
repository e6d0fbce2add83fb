"""Bad inputs for measure.py: functions to time are callables of no arguments, sizes are non-negative
integers, devices exist."""

import torch

from attention_course.measure import (
    attention_flops,
    count_copies,
    cpu_threads,
    device_name,
    device_peak_tflops,
    op_counts,
    peak_memory_bytes,
    provenance,
    time_interleaved,
    write_results,
)
from bad_inputs import case


def _threads(n):
    with cpu_threads(n):
        pass


CODE, NOWHERE = [provenance], "/tmp/never-written.json"  # write_results needs the code that produced the results

CASES = [
    case(cpu_threads, lambda: _threads(0), ValueError, arg="n", id="measure.cpu_threads-zero"),
    case(cpu_threads, lambda: _threads(1.5), TypeError, arg="n", id="measure.cpu_threads-float"),
    case(peak_memory_bytes, lambda: peak_memory_bytes(torch.ones(3)), TypeError, arg="fn",
         id="measure.peak_memory_bytes-tensor"),
    case(peak_memory_bytes, lambda: peak_memory_bytes(lambda: None, device="meta"), ValueError, arg="device",
         id="measure.peak_memory_bytes-meta"),
    case(count_copies, lambda: count_copies("x.clone()"), TypeError, arg="fn", id="measure.count_copies-string"),
    case(op_counts, lambda: op_counts(3), TypeError, arg="fn", id="measure.op_counts-int"),
    case(time_interleaved, lambda: time_interleaved([lambda: None]), TypeError, arg="fns", says="mapping",
         id="measure.time_interleaved-list"),
    case(time_interleaved, lambda: time_interleaved({}), ValueError, arg="fns", id="measure.time_interleaved-empty"),
    case(time_interleaved, lambda: time_interleaved({"a": 3}), TypeError, arg="fns['a']",
         id="measure.time_interleaved-not-callable"),
    case(time_interleaved, lambda: time_interleaved({"a": lambda: None}, reps=0), ValueError, arg="reps",
         id="measure.time_interleaved-reps"),
    case(time_interleaved, lambda: time_interleaved({"a": lambda: None}, warmup=-1), ValueError, arg="warmup",
         id="measure.time_interleaved-warmup"),
    case(time_interleaved, lambda: time_interleaved({"a": lambda: None}, num_threads=0), ValueError,
         arg="num_threads", id="measure.time_interleaved-threads"),
    case(time_interleaved, lambda: time_interleaved({"a": lambda: None}, device="gpu"), ValueError, arg="device",
         id="measure.time_interleaved-device"),
    case(attention_flops, lambda: attention_flops(1, -4, 4, 8), ValueError, arg="n_q",
         id="measure.attention_flops-negative"),
    case(attention_flops, lambda: attention_flops(1, 4, 4, 8.0), TypeError, arg="d_k",
         id="measure.attention_flops-float"),
    case(attention_flops, lambda: attention_flops(1, 4, 4, 8, causal="yes"), TypeError, arg="causal",
         id="measure.attention_flops-causal"),
    case(device_peak_tflops, lambda: device_peak_tflops(None), TypeError, arg="name",
         id="measure.device_peak_tflops-none"),
    case(device_name, lambda: device_name("cuda:9" if torch.cuda.device_count() < 10 else "cuda:99"), ValueError,
         arg="device", id="measure.device_name-missing"),
    case(device_name, lambda: device_name(3), TypeError, arg="device", id="measure.device_name-int"),
    case(provenance, lambda: provenance("npu"), ValueError, arg="device", id="measure.provenance-device"),
    case(write_results, lambda: write_results(None, {}, {}, code=CODE), TypeError, arg="path",
         id="measure.write_results-path"),
    case(write_results, lambda: write_results(NOWHERE, [1], {}, code=CODE), TypeError, arg="results",
         id="measure.write_results-list"),
    case(write_results, lambda: write_results(NOWHERE, {"x": torch.ones(1)}, {}, code=CODE), TypeError,
         arg="results", says="JSON", id="measure.write_results-tensor"),
    case(write_results, lambda: write_results(NOWHERE, {}, {}, code=[]), TypeError, arg="code",
         id="measure.write_results-no-code"),
    case(write_results, lambda: write_results(NOWHERE, {}, {}, code=[3]), TypeError, arg="code",
         id="measure.write_results-code-int"),
]

CASES += [
    case(peak_memory_bytes, lambda: peak_memory_bytes(lambda: None, device="cuda:9"), ValueError, arg="device",
         says="machine has", id="measure.peak_memory_bytes-absent-cuda"),
    case(write_results, lambda: write_results(NOWHERE, {"x": float("nan")}, {}, code=CODE), ValueError,
         arg="results", says="finite", id="measure.write_results-nan"),
]

from attention_course.measure import read_results  # noqa: E402

CASES += [
    case(read_results, lambda: read_results(3), TypeError, arg="name", id="measure.read_results-int"),
    case(read_results, lambda: read_results("../etc/passwd"), ValueError, arg="name", id="measure.read_results-path"),
    case(read_results, lambda: read_results("no_such_benchmark"), ValueError, arg="name", says="repository=",
         id="measure.read_results-missing"),
    case(read_results, lambda: read_results("bench_mha", repository=1), TypeError, arg="repository",
         id="measure.read_results-repository"),
]

from attention_course.measure import measured_on  # noqa: E402

CASES += [
    case(measured_on, lambda: measured_on([("provenance", {})]), TypeError, arg="record",
         id="measure.measured_on-list"),
    case(measured_on, lambda: measured_on({"results": {}}), ValueError, arg="record", says="provenance.device",
         id="measure.measured_on-no-device"),
    case(measured_on, lambda: measured_on({"provenance": "NVIDIA H200"}), ValueError, arg="record",
         says="provenance.device", id="measure.measured_on-provenance-str"),
]

from attention_course.measure import seed_range  # noqa: E402

CASES += [
    case(seed_range, lambda: seed_range("3-1"), ValueError, arg="text", says="FIRST <= LAST",
         id="measure.seed_range-reversed"),
    case(seed_range, lambda: seed_range("a-b"), ValueError, arg="text", says="'a-b'", id="measure.seed_range-words"),
    case(seed_range, lambda: seed_range(3), TypeError, arg="text", id="measure.seed_range-int"),
]
