"""Which numeric environment a run ran in, and how runs spread across environments (chapters 2–7; ``EVIDENCE.md``
rules 14–16).

* :func:`numeric_environment` / :func:`same_environment` — what decides the last bits of a training run: the
  PyTorch version, the device, the CPU's vendor, family/model/stepping and the instruction-set features its
  kernels dispatch on, PyTorch's kernel level (``ATEN_CPU_CAPABILITY``), MKL's reproducibility mode and the
  thread count. Seeds fix a run on one such environment only.
* :func:`environments` — a results file may hold runs of several environments (``tools/add_machine.py``).
* :func:`spread` — the stored runs' spread split into a seed and a machine component, which
  :class:`attention_course.evidence.LiveCheck` judges a live run by.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from ._checks import check_device, check_int, check_numbers, describe

__all__ = ["DECIDING_KEYS", "DISPATCH_FLAGS", "Spread", "environments", "numeric_environment", "same_environment",
           "spread"]


# ---------------------------------------------------------------------------------------------------------------
# The numeric environment: what decides the last bits of a run
# ---------------------------------------------------------------------------------------------------------------

#: The processor features PyTorch's vector kernels and MKL's matrix products choose their code paths by (x86 and
#: Arm names as ``/proc/cpuinfo`` spells them). Two CPUs of one vendor, family, model and stepping with the same
#: features run the same kernels; a model *name* decides nothing (some clouds report "Intel Xeon Processor" for
#: several generations).
DISPATCH_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl",
                  "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
                  "asimd", "asimdhp", "sve", "sve2", "bf16", "i8mm")

#: The keys of :func:`numeric_environment` that :func:`same_environment` compares (``cpu_model`` is shown, not
#: compared).
DECIDING_KEYS = ("torch", "device", "cpu_vendor", "cpu_id", "cpu_flags", "cpu_capability", "mkl_cbwr", "threads")


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (lower-case names); empty where there is none (macOS,
    Windows)."""
    cpuinfo = Path("/proc/cpuinfo")
    fields: dict[str, str] = {}
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if not line.strip():
                if fields:
                    break
                continue
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip().lower(), value.strip())
    return fields


def numeric_environment(device: str | torch.device = "cpu", threads: int | None = None) -> dict[str, object]:
    """What decides a training run's last bits besides its seed, as a JSON-ready dict.

    Keys: ``torch`` (version), ``device`` (``cpu`` or the GPU's name), ``cpu_vendor``, ``cpu_model`` (the name, for
    people), ``cpu_id`` (``"family F model M stepping S"``, empty where ``/proc/cpuinfo`` does not say),
    ``cpu_flags`` (which of :data:`DISPATCH_FLAGS` the CPU has), ``cpu_capability`` (the vector kernels PyTorch
    runs, which ``ATEN_CPU_CAPABILITY`` changes: ``DEFAULT``, ``AVX2``, ``AVX512``...), ``mkl_cbwr`` (MKL's
    reproducibility mode, ``MKL_CBWR``, which changes its matrix products; empty when unset) and ``threads``
    (``threads`` if given, else PyTorch's current CPU threads).
    """
    device = check_device("device", device)
    threads = None if threads is None else check_int("threads", threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    info = _cpuinfo()
    ident = [info.get(key, "") for key in ("cpu family", "model", "stepping")]
    flags = set((info.get("flags") or info.get("features") or "").split())
    return {
        "torch": torch.__version__,
        "device": name,
        "cpu_vendor": info.get("vendor_id") or info.get("cpu implementer") or platform.machine(),
        "cpu_model": info.get("model name") or platform.processor(),
        "cpu_id": "family {} model {} stepping {}".format(*ident) if all(ident) else "",
        "cpu_flags": [flag for flag in DISPATCH_FLAGS if flag in flags],
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "threads": torch.get_num_threads() if threads is None else int(threads),
    }


def same_environment(stored: Mapping[str, object] | None, device: str | torch.device = "cpu",
                     threads: int | None = None) -> bool:
    """Whether this process would repeat the stored runs bit for bit: every one of :data:`DECIDING_KEYS` equal.

    The environment is unknown, so never the same, where either side cannot say what decides the kernels: a
    record written before these keys were kept, or a processor whose family, model, stepping and features
    ``/proc/cpuinfo`` does not give (macOS, Windows)."""
    here = numeric_environment(device, threads)  # checks device and threads
    if not isinstance(stored, Mapping) or not here["cpu_id"] or not here["cpu_flags"]:
        return False
    return all(key in stored and stored[key] == here[key] for key in DECIDING_KEYS)


def environments(record: Mapping[str, object]) -> list[tuple[Mapping[str, object], Mapping[str, object],
                                                             Mapping[str, object]]]:
    """Every numeric environment a results record holds runs of, as ``(environment, settings, results)``: the
    record's own first, then each of ``record["machines"]`` (another environment's runs of the same experiment,
    added by ``tools/add_machine.py``; often fewer seeds). An environment the record did not keep is ``{}``."""
    if not isinstance(record, Mapping) or not isinstance(record.get("provenance"), Mapping):
        raise TypeError(f"record must be a results record (read_results), got {describe(record)}")
    out = []
    for part in [record, *record.get("machines", [])]:
        out.append((part["provenance"].get("environment") or {}, part.get("settings", {}),
                    part.get("results", {})))
    return out


# ---------------------------------------------------------------------------------------------------------------
# How runs spread: over seeds within an environment, and over environments
# ---------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Spread:
    """What the stored runs of one quantity say about a run on a machine they do not include (:func:`spread`).

    A run's value is modelled as centre + machine effect + seed effect: the machine effect is shared by the runs
    of one numeric environment (variance ``machine_var``), the seed effect is each run's own (``seed_var``).
    """

    center: float  # the mean of the environments' means: each environment counts as one draw of a machine
    seed_var: float  # pooled variance of the runs within an environment
    machine_var: float  # variance of the environment effect (method of moments, 0 when the means agree)
    center_var: float  # variance of ``center`` under that model
    sizes: tuple[int, ...]  # runs per environment

    @property
    def dof(self) -> int:
        """Degrees of freedom of ``seed_var``: runs minus environments."""
        return sum(self.sizes) - len(self.sizes)

    def predictive_var(self, n_live: int) -> float:
        """Variance of (mean of ``n_live`` runs on a new machine) − ``center``."""
        return self.seed_var / n_live + self.machine_var + self.center_var


def components(groups: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`spread`'s arithmetic on a batch, unchecked (``evidence.threshold`` simulates a million at once):
    ``groups[e]`` is ``(batch, n_e)``, the runs of environment ``e``. Returns the centre, seed variance, machine
    variance and the centre's variance, each ``(batch,)``."""
    sizes = np.array([g.shape[1] for g in groups], dtype=np.float64)
    k, n = len(groups), sizes.sum()
    means = np.stack([g.mean(axis=1) for g in groups], axis=1)
    if n == k:  # one run per environment: their spread is all there is, seed and machine together
        seed_var = means.var(axis=1, ddof=1) if k > 1 else np.zeros(len(means))
        machine_var = np.zeros_like(seed_var)
    else:
        within = sum(((g - g.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) for g in groups)
        seed_var = within / (n - k)
        machine_var = np.zeros_like(seed_var)
        if k > 1:
            grand = (means * sizes).sum(axis=1, keepdims=True) / n
            ms_between = ((means - grand) ** 2 * sizes).sum(axis=1) / (k - 1)
            n0 = (n - (sizes**2).sum() / n) / (k - 1)
            machine_var = np.maximum(0.0, (ms_between - seed_var) / n0)
    center_var = (machine_var + seed_var * np.mean(1 / sizes)) / k
    return means.mean(axis=1), seed_var, machine_var, center_var


def spread(values_by_environment: Sequence[Sequence[float]]) -> Spread:
    """The seed and machine components of the stored runs' spread (one-way random effects, method of moments).

    Within each environment the runs differ by seed only: their pooled variance estimates the seed component.
    The environments' means differ by seed *and* machine: the part of their spread that the seeds do not explain,
    ``(MS_between − MS_within) / n₀`` with ``n₀`` the effective runs per environment, estimates the machine
    component (0 where it comes out negative). With two environments that estimate has one degree of freedom:
    it shows a machine effect that is large, not one that is subtle; :func:`attention_course.evidence.threshold`
    is calibrated with the machine effect as large as the seeds' and the estimate's own error included.
    """
    if isinstance(values_by_environment, (str, bytes)) or not isinstance(values_by_environment, Iterable):
        raise TypeError(f"values_by_environment must be a sequence of sequences of numbers (one per environment), "
                        f"got {describe(values_by_environment)}")
    groups = [check_numbers("values_by_environment", v) for v in values_by_environment]
    if not groups:
        raise ValueError("values_by_environment must hold the runs of at least one environment, got none")
    sizes = tuple(len(g) for g in groups)
    if len({v for g in groups for v in g}) == 1:  # one value everywhere (a closed-form baseline): no spread, not
        return Spread(groups[0][0], 0.0, 0.0, 0.0, sizes)  # the rounding error of averaging it
    parts = components([np.array(g, dtype=np.float64)[None, :] for g in groups])
    center, seed_var, machine_var, center_var = (float(x[0]) for x in parts)
    return Spread(center, seed_var, machine_var, center_var, sizes)
