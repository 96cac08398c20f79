"""A tenant's cluster here (`cuberay up --tenant-cluster`): how long a gang that needs new nodes takes, split into
cuberay's wait, the autoscaler's decision, the node's start, and admission and the first step; nodes started
against nodes that ever held a gang's bundle, over a burst of mixed gangs; and how long idle nodes take to go.

    .venv/bin/python benchmarks/bench_tenant_cluster.py [--burst 20] [--mix tuned|held-out|one-node ...] [--idle 5]

The split reads the autoscaler's own log (its monitor.log, on the head): "Adding N node(s) of type T" is its
decision, "Launched N nodes of type T" the provider's launch returning; a node is up when Ray lists it alive.
`--mix tuned` is the burst mix the tenant cluster was developed against (seed 7); `--mix held-out` is another
mix (other shapes, other durations, seed 11) that nothing was tuned for; `--mix one-node` is 20 small overlapping
gangs that fill one cpu node exactly (below the group's max of two: the autoscaler must add one).

Opt-in (not in `make bench`: it starts and stops real local Ray nodes for minutes). Its own home and Ray temp
root; the platform is configs/tenant-cluster/platform.yaml (2 cpu and 2 gpu nodes at most, 2 CPUs each).
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT_DIR = Path(tempfile.mkdtemp(prefix="crb", dir="/tmp"))
for var in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "CUBERAY_HEAD_ID"):
    os.environ.pop(var, None)
os.environ.update(CUBERAY_HOME=str(ROOT_DIR / "home"), RAY_TMPDIR=str(ROOT_DIR), TMPDIR=str(ROOT_DIR),
                  HOME=str(ROOT_DIR / "user"), CUBERAY_USER="bench", RAY_USAGE_STATS_ENABLED="0")
(ROOT_DIR / "user").mkdir()

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, markdown, print_machine, write_json  # noqa: E402

PLATFORM = ROOT / "configs" / "tenant-cluster" / "platform.yaml"
NEW_NODES = "waiting for new nodes:"


def gang(name: str, workers: int, cpu: str, gpu: str | None, seconds: float, memory: str = "256Mi") -> dict:
    resources = {"cpu": cpu, "memory": memory, **({"gpu": gpu} if gpu else {})}
    spec = {"workers": workers, "resources": resources, "command": f"echo first-step; sleep {seconds}"}
    if not gpu:
        spec["node_selector"] = {"cuberay.io/pool": "cpu"}
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": "vision"},
            "spec": spec}


def worker_nodes(ray) -> dict[str, str]:
    return {n["NodeID"]: n["Labels"].get("cuberay.io/pool", "") for n in ray.nodes()
            if n["Alive"] and n["Labels"].get("cuberay.io/pool")}


# Shapes of a burst's gangs: (workers, CPU per worker, GPUs per worker or None for a cpu-pool gang[, memory per
# worker]), and seconds. "one-node": 20 gangs that together fill exactly one cpu node (2 CPUs, 2,000 of its 2,048
# MiB) and overlap, so the burst needs one node where the group's max is two.
MIXES = {
    "one-node": (3, [(1, "100m", None, "100Mi")], (15, 20)),
    "tuned": (7, [(1, "500m", None), (2, "1", None), (1, "2", None), (1, "1", "1"), (2, "1", "1"), (1, "2", "2")],
              (1, 4)),
    "held-out": (11, [(3, "500m", None), (1, "1500m", None), (2, "1", "2"), (1, "1", "2"), (4, "500m", "1"),
                      (1, "250m", None)], (2, 8)),
}
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\s+INFO .*?"
                      r"(Adding (\d+) node\(s\) of type (\S+?)\.|Launched (\d+) nodes of type (\S+?)\.)")


def autoscaler_log() -> Path:
    from cuberay.platform.control import head

    return Path(head.read_state()["temp_dir"]) / "session_latest" / "logs" / "monitor.log"


def autoscaler_events(since: float) -> list[tuple[float, str, int, str]]:
    """(wall time, "decided" | "launched", nodes, node type) from the autoscaler's log, at or after ``since``."""
    events = []
    for line in autoscaler_log().read_text(errors="replace").splitlines():
        match = LOG_LINE.match(line)
        if not match:
            continue
        when = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # the head's local time
        if when >= since:
            what, count, kind = ("decided", match[3], match[4]) if match[3] else ("launched", match[5], match[6])
            events.append((when, what, int(count), kind))
    return events


def one_gang(client, ray) -> dict:
    """Submit → cuberay asks → the autoscaler decides → launched → node alive → admitted → first step, for one
    2-GPU gang on no GPU node (wall-clock seconds after submit)."""
    before = set(worker_nodes(ray))
    t0 = time.time()
    job_id = client.submit(gang("first", 2, "1", "1", 1)).id
    marks: dict[str, float] = {}
    while "first_step" not in marks and time.time() - t0 < 180:
        record, now = client.status(job_id), time.time() - t0
        if (record.reason or "").startswith(NEW_NODES):
            marks.setdefault("asked", now)
        if set(worker_nodes(ray)) - before:
            marks.setdefault("node_alive", now)
        if record.attempts:
            marks.setdefault("admitted", now)
        if "admitted" in marks and "first-step" in "".join(client.logs(job_id)):
            marks["first_step"] = now
        time.sleep(0.1)
    client.wait(job_id, timeout=120)
    for when, what, _, kind in autoscaler_events(t0):
        if kind == "gpu":
            marks.setdefault(what, when - t0)
    return marks


def held_bundles(ray, seen: dict[str, set[str]]) -> None:
    """Which nodes hold a bundle of a placement group (cuberay's gangs are placement groups), added to ``seen``."""
    from ray.util import placement_group_table

    for group in placement_group_table().values():
        for node in (group.get("bundles_to_node_id") or {}).values():
            seen.setdefault(node, set()).add(group["placement_group_id"])


def burst(client, ray, count: int, mix: str) -> dict:
    """``count`` gangs of mixed sizes at once: nodes the autoscaler started per group, and how many of them ever
    held a gang's bundle or worker (a node started that none used is an over-request)."""
    seed, shapes, (shortest, longest) = MIXES[mix]
    rng = random.Random(seed)
    started: dict[str, str] = {}
    used: dict[str, set[str]] = {}
    peak = 0
    t0 = time.time()
    picks = [(rng.choice(shapes), rng.uniform(shortest, longest)) for _ in range(count)]
    ids = [client.submit(gang(f"b{i}", *shape[:3], seconds, *shape[3:])).id for i, (shape, seconds) in enumerate(picks)]
    while time.time() - t0 < 900:
        live = worker_nodes(ray)
        started.update(live)
        peak = max(peak, len(live))
        held_bundles(ray, used)
        records = [client.status(i) for i in ids]
        for record in records:  # where cuberay placed each worker (small jobs run as Ray tasks, with no bundle)
            for worker in record.allocation or []:
                used.setdefault(worker["node_id"], set()).add(record.id)
        if all(r.state.is_terminal for r in records):
            break
        time.sleep(0.25)
    seconds = round(time.time() - t0, 1)
    decided = [e for e in autoscaler_events(t0) if e[1] == "decided"]
    again = {r.id: [f"{e.time - t0:.1f} {e.kind}: {e.message}" for e in client.api().events(r.id)]
             for r in records if r.attempts > 1}
    return {"mix": mix, "seconds": seconds, "succeeded": sum(r.state.value == "SUCCEEDED" for r in records),
            "gangs": count, "attempts": sum(r.attempts for r in records), "peak_live_nodes": peak,
            "started": {p: list(started.values()).count(p) for p in ("cpu", "gpu")},
            "used": {p: sum(1 for n, pool in started.items() if pool == p and n in used) for p in ("cpu", "gpu")},
            "autoscaler_added": {p: sum(e[2] for e in decided if e[3] == p) for p in ("cpu", "gpu")},
            "ran_again": again,
            "not_succeeded": {r.id: f"{r.state.value}: {r.message}" for r in records if r.state.value != "SUCCEEDED"}}


def idle_removal(ray, idle_s: float) -> float:
    """Seconds from now (every job ended) until the last worker node is gone."""
    t0 = time.monotonic()
    while worker_nodes(ray) and time.monotonic() - t0 < 300:
        time.sleep(0.25)
    return round(time.monotonic() - t0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--mix", choices=sorted(MIXES), action="append",
                        help="the burst's mix of gangs (repeat for both, one after the other); default tuned")
    parser.add_argument("--idle", type=float, default=5)
    args = parser.parse_args()
    info = print_machine()
    import ray

    from cuberay.kuberay import tenant_local
    from cuberay.platform import client

    t0 = time.monotonic()
    tenant_local.up(str(PLATFORM), "vision", args.idle)
    up_s = round(time.monotonic() - t0, 1)
    bursts = []
    try:
        client.queue()
        if not ray.is_initialized():
            from cuberay.platform.control import head

            os.environ["RAY_AUTH_MODE"] = "token"
            ray.init(head.read_state()["address"], log_to_driver=False)
        marks = one_gang(client, ray)
        removal_one = idle_removal(ray, args.idle)
        for mix in args.mix or ["tuned"]:
            bursts.append({**burst(client, ray, args.burst, mix), "idle_removal_s": idle_removal(ray, args.idle)})
            print(bursts[-1], flush=True)
    finally:
        client.down()
        shutil.rmtree(ROOT_DIR, ignore_errors=True)
    row = {"up_s": up_s, **{k: round(v, 1) for k, v in marks.items()}, "idle_s": args.idle,
           "idle_removal_s": removal_one}
    print(markdown([row], list(row)))
    columns = ["mix", "gangs", "succeeded", "attempts", "seconds", "started", "used", "autoscaler_added",
               "peak_live_nodes", "idle_removal_s"]
    print(markdown(bursts, columns))
    print(write_json("tenant_cluster", {"machine": info, "single_gang": row, "bursts": bursts}))


if __name__ == "__main__":
    main()
