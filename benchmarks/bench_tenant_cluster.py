"""A tenant's cluster here (`cuberay up --tenant-cluster`): how long a gang that needs new nodes takes, split into
cuberay's wait, the autoscaler's decision with the node's start, and admission and the first step; nodes added
against nodes needed over a burst of mixed gangs; and how long idle nodes take to go.

    .venv/bin/python benchmarks/bench_tenant_cluster.py [--burst 12] [--idle 5]

Opt-in (not in `make bench`: it starts and stops real local Ray nodes for minutes). Its own home and Ray temp
root; the platform is configs/tenant-cluster/platform.yaml (2 cpu and 2 gpu nodes at most, 2 CPUs each).
"""

from __future__ import annotations

import argparse
import os
import random
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


def gang(name: str, workers: int, cpu: str, gpu: str | None, seconds: float) -> dict:
    resources = {"cpu": cpu, "memory": "256Mi", **({"gpu": gpu} if gpu else {})}
    spec = {"workers": workers, "resources": resources, "command": f"echo first-step; sleep {seconds}"}
    if not gpu:
        spec["node_selector"] = {"cuberay.io/pool": "cpu"}
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": "vision"},
            "spec": spec}


def worker_nodes(ray) -> dict[str, str]:
    return {n["NodeID"]: n["Labels"].get("cuberay.io/pool", "") for n in ray.nodes()
            if n["Alive"] and n["Labels"].get("cuberay.io/pool")}


def one_gang(client, ray) -> dict:
    """Submit → reason → node alive → admitted → first step, for one 2-GPU gang on no GPU node."""
    before = set(worker_nodes(ray))
    t0 = time.monotonic()
    job_id = client.submit(gang("first", 2, "1", "1", 1)).id
    marks: dict[str, float] = {}
    while "first_step" not in marks and time.monotonic() - t0 < 180:
        record, now = client.status(job_id), time.monotonic() - t0
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
    return marks


def burst(client, ray, count: int, seed: int = 7) -> dict:
    """``count`` gangs of mixed sizes at once: nodes the autoscaler started per group vs. nodes the work needs."""
    rng = random.Random(seed)
    shapes = [(1, "500m", None), (2, "1", None), (1, "2", None), (1, "1", "1"), (2, "1", "1"), (1, "2", "2")]
    seen: dict[str, str] = {}
    t0 = time.monotonic()
    ids = [client.submit(gang(f"b{i}", *rng.choice(shapes), rng.uniform(1, 4))).id for i in range(count)]
    while not all(client.status(i).state.is_terminal for i in ids) and time.monotonic() - t0 < 900:
        seen.update(worker_nodes(ray))
        time.sleep(0.25)
    states = [client.status(i).state.value for i in ids]
    return {"seconds": round(time.monotonic() - t0, 1), "succeeded": states.count("SUCCEEDED"), "gangs": count,
            "started": {p: list(seen.values()).count(p) for p in ("cpu", "gpu")},
            "attempts": sum(client.status(i).attempts for i in ids)}


def idle_removal(ray, idle_s: float) -> float:
    """Seconds from now (every job ended) until the last worker node is gone."""
    t0 = time.monotonic()
    while worker_nodes(ray) and time.monotonic() - t0 < 300:
        time.sleep(0.25)
    return round(time.monotonic() - t0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=12)
    parser.add_argument("--idle", type=float, default=5)
    args = parser.parse_args()
    info = print_machine()
    import ray

    from cuberay.kuberay import tenant_local
    from cuberay.platform import client

    t0 = time.monotonic()
    tenant_local.up(str(PLATFORM), "vision", args.idle)
    up_s = round(time.monotonic() - t0, 1)
    try:
        client.queue()
        if not ray.is_initialized():
            from cuberay.platform.control import head

            os.environ["RAY_AUTH_MODE"] = "token"
            ray.init(head.read_state()["address"], log_to_driver=False)
        marks = one_gang(client, ray)
        removal_one = idle_removal(ray, args.idle)
        mixed = burst(client, ray, args.burst)
        removal = idle_removal(ray, args.idle)
    finally:
        client.down()
        shutil.rmtree(ROOT_DIR, ignore_errors=True)
    row = {"up_s": up_s, **{k: round(v, 1) for k, v in marks.items()}, "idle_s": args.idle,
           "idle_removal_s": removal_one, "idle_removal_after_burst_s": removal, **mixed}
    print(markdown([row], list(row)))
    print(write_json("tenant_cluster", {"machine": info, "result": row}))


if __name__ == "__main__":
    main()
