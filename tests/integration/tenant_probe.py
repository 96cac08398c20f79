"""What a user's script sees of a local tenant cluster (run by test_tenant_cluster.py in the cluster's env).

``python -m tests.integration.tenant_probe ACTION [ARGS]`` writes one JSON object to the file named by
``TENANT_PROBE_OUT`` (not to stdout: this driver's Ray prints the raylet's warnings there from a thread of its
own, at any time, also after the answer):

- ``nodes``: the live Ray nodes, id -> labels, and the cluster constraint Ray's autoscaler holds;
- ``run SPEC...``: submits each spec file and watches until every job ends: each job's reasons, the nodes its
  workers held, its end state and attempts; the nodes seen, the most live at once per pool; the most GPUs the
  autoscaler was ever asked for;
- ``cancel SPEC``: submits, waits until the job waits for new nodes, cancels it, and reports the request
  before and after.

The autoscaler's view is read from Ray (``ray.autoscaler.v2.sdk.get_cluster_status``), not from cuberay.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.autoscaler.v2.sdk import get_cluster_status

from cuberay.platform import client
from cuberay.platform.control import head
from cuberay.platform.policy.states import JobState

TIMEOUT_S = 240.0


def constraint() -> list[dict[str, Any]]:
    """The bundles of the resource request cuberay made of Ray's autoscaler (as the autoscaler holds it)."""
    status = get_cluster_status(head.read_state()["address"])
    return [{"bundle": b.bundle, "count": b.count}
            for demand in status.resource_demands.cluster_constraint_demand for b in demand.bundles_by_count]


def nodes() -> dict[str, dict[str, str]]:
    return {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes() if n["Alive"]}


def gpus_asked() -> float:
    return sum(c["bundle"].get("GPU", 0.0) * c["count"] for c in constraint())


def run(paths: list[str]) -> dict[str, Any]:
    ids = [client.submit(p).id for p in paths]
    jobs: dict[str, dict[str, Any]] = {i: {"reasons": [], "nodes": []} for i in ids}
    seen: dict[str, dict[str, str]] = {}
    peak: dict[str, int] = {}  # the most live nodes of each pool at once
    max_gpus, deadline = 0.0, time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        live = nodes()
        seen.update(live)
        for pool in {labels.get("cuberay.io/pool", "") for labels in live.values()}:
            peak[pool] = max(peak.get(pool, 0), sum(1 for v in live.values() if v.get("cuberay.io/pool", "") == pool))
        max_gpus = max(max_gpus, gpus_asked())
        for job_id in ids:
            record, mine = client.status(job_id), jobs[job_id]
            if record.reason and record.reason not in mine["reasons"]:
                mine["reasons"].append(record.reason)
            for slot in record.allocation or []:
                if slot["node_id"] not in mine["nodes"]:
                    mine["nodes"].append(slot["node_id"])
            mine.update(state=record.state.value, attempts=record.attempts)
        if all(JobState(job["state"]).is_terminal for job in jobs.values()):  # what was recorded, not a later read
            break
        time.sleep(0.25)
    return {"jobs": jobs, "seen": seen, "peak": peak, "max_gpus_asked": max_gpus}


def cancel(path: str) -> dict[str, Any]:
    job_id = client.submit(path).id
    deadline, reason = time.monotonic() + 60, ""
    while time.monotonic() < deadline and not reason.startswith("waiting for new nodes:"):
        reason = client.status(job_id).reason or ""
        time.sleep(0.05)
    before = constraint()
    record = client.cancel(job_id)
    deadline, after = time.monotonic() + 30, before
    while time.monotonic() < deadline and after:
        after = constraint()
        time.sleep(0.25)
    return {"reason": reason, "before": before, "after": after, "state": record.state.value,
            "attempts": client.status(job_id).attempts}


def main(argv: list[str]) -> dict[str, Any]:
    client.queue()  # connects (the local head this home records)
    if not ray.is_initialized():
        ray.init(head.read_state()["address"], log_to_driver=False)
    action, args = argv[0], argv[1:]
    if action == "nodes":
        return {"nodes": nodes(), "constraint": constraint()}
    if action == "run":
        return run(args)
    if action == "cancel":
        return cancel(args[0])
    raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    Path(os.environ["TENANT_PROBE_OUT"]).write_text(json.dumps(main(sys.argv[1:])))
