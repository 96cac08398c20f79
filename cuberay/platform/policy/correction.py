"""Automatic resource correction: CubeStudio's rule, on the peaks of a job's past successful runs.

A job is known by tenant + ``metadata.name``. Every SUCCEEDED run leaves one sample: the highest
CPU (cores) and memory (GiB) any of its workers used. Only the last :data:`MAX_SAMPLES` samples
count, none older than :data:`MAX_AGE_S`, and none at or below :data:`NOISE` (CubeStudio drops
those too: a run that measured nothing says nothing). Once :data:`SAMPLES_NEEDED` remain, a new
submission's per-worker request becomes

    cpu    = ceil(peak_cpu × 1.4) + 2      at most 150 cores
    memory = ceil(peak_mem_GiB × 1.4) + 2  GiB, at most 350 GiB

also bounded by ``ceiling`` (what one worker may hold: the tenant's max over the gang's minimum
size, and the largest node). GPUs are never corrected. ``NO_RESOURCE_CHECK`` in the spec's env
(any spelling that upper-cases to it, ``-`` read as ``_``) turns correction off, as in CubeStudio.

Pure: no I/O; the controller hands in the samples and applies the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

GiB = 2**30
SAMPLES_NEEDED = 10
MAX_SAMPLES = 10
MAX_AGE_S = 30 * 86400.0
NOISE = 0.1
FACTOR = 1.4
HEADROOM = 2
CPU_CAP = 150
MEMORY_CAP_GIB = 350
OPT_OUT = "NO_RESOURCE_CHECK"


@dataclass(frozen=True)
class UsageSample:
    """The peak of one successful run: cores and GiB of its busiest worker, and when it ended."""

    time: float
    cpu: float
    memory_gib: float


@dataclass(frozen=True)
class Correction:
    """A changed per-worker request (Ray names: ``CPU`` cores, ``memory`` bytes) and why."""

    requested: dict[str, float]
    corrected: dict[str, float]
    reason: str


def opted_out(env: Mapping[str, str]) -> bool:
    return any(name.replace("-", "_").upper() == OPT_OUT for name in env)


def recent(samples: Iterable[UsageSample], now: float) -> list[UsageSample]:
    """The samples that count: within 30 days, above the noise floor, newest 10, newest first."""
    kept = [s for s in samples if now - s.time <= MAX_AGE_S and s.cpu > NOISE and s.memory_gib > NOISE]
    return sorted(kept, key=lambda s: s.time, reverse=True)[:MAX_SAMPLES]


def recommend(samples: list[UsageSample]) -> tuple[int, int]:
    """(cores, GiB) per worker from the samples' peaks, capped at 150 cores and 350 GiB."""
    cpu = math.ceil(max(s.cpu for s in samples) * FACTOR) + HEADROOM
    mem = math.ceil(max(s.memory_gib for s in samples) * FACTOR) + HEADROOM
    return min(cpu, CPU_CAP), min(mem, MEMORY_CAP_GIB)


def correct(requested: Mapping[str, float], samples: Iterable[UsageSample], *, now: float,
            env: Mapping[str, str] | None = None,
            ceiling: Mapping[str, float] | None = None) -> Correction | None:
    """The corrected per-worker request, or None when it stays as asked (opted out, too few runs, same)."""
    if opted_out(env or {}):
        return None
    counted = recent(samples, now)
    if len(counted) < SAMPLES_NEEDED:
        return None
    cpu, mem_gib = recommend(counted)
    ceiling = ceiling or {}
    new = {"CPU": float(cpu), "memory": float(mem_gib * GiB)}
    bounded = []
    for name in ("CPU", "memory"):
        limit = ceiling.get(name)
        if limit is not None and new[name] > limit:
            new[name] = float(math.floor(limit)) if name == "CPU" else float(limit)
            bounded.append(name)
    corrected = {**requested, **new}
    if all(abs(corrected[k] - requested.get(k, -1)) < 1e-9 for k in new):
        return None
    peak_cpu = max(s.cpu for s in counted)
    peak_mem = max(s.memory_gib for s in counted)
    reason = (f"the last {len(counted)} successful runs peaked at {peak_cpu:.2f} cores and {peak_mem:.2f} GiB "
              f"per worker; request = ceil(peak x {FACTOR}) + {HEADROOM} (at most {CPU_CAP} cores, "
              f"{MEMORY_CAP_GIB} GiB)")
    if bounded:
        reason += f", bounded by the tenant's max and the largest node ({', '.join(bounded)})"
    reason += f"; set {OPT_OUT} in the job's env to keep your own request"
    return Correction(dict(requested), corrected, reason)
