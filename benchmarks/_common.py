"""What every benchmark shares: the machine it ran on, percentiles, polling, markdown tables, JSON output."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"

if str(ROOT) not in sys.path:  # run as `python benchmarks/bench_x.py` from a checkout
    sys.path.insert(0, str(ROOT))


def machine() -> dict[str, Any]:
    """nproc, CPU model, Python and the date: numbers mean little without them."""
    return {"nproc": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version(),
            "platform": platform.platform(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_machine() -> dict[str, Any]:
    info = machine()
    print(f"machine: {info['nproc']} CPUs, {info['cpu']}; Python {info['python']}; {info['date']}")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    if load:
        print(f"load average at start: {load[0]:.1f} (other work on the machine skews wall times)")
    return info


def markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_json(name: str, data: Any, out: Path | None = None) -> Path:
    path = out or OUT / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)  # never leave a half-written file behind a killed run
    return path


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p99 and max of ``values`` (milliseconds), rounded to 0.1 ms."""
    ordered = sorted(values)
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
            "max_ms": round(ordered[-1], 1)}


def wait_for(check: Callable[[], Any], timeout: float, what: str, poll_s: float = 0.2) -> Any:
    """``check()``'s first true value, polled every ``poll_s``; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll_s)
