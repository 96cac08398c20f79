"""Reads while a backlog is admitted: `status` and `queue --tenant X` latency from a connected client.

    python benchmarks/bench_reads.py                  # 5,000 queued Tasks, 20 s of reads
    python benchmarks/bench_reads.py --backlog 20000 --reads-s 60
    python benchmarks/bench_reads.py --backlog 100000 --bulk 10000   # copies, 10,000 per submit call

A local platform (``client.up`` in a scratch directory, as ``cuberay demo``) with
two tenants: ``bulk`` gets a backlog of one-CPU ``sleep`` Tasks submitted as fast
as one client can (it keeps the controller's cycles busy: every tick orders and
explains the whole queue while the head's CPUs admit a few at a time); ``probe``
holds three hour-long jobs. The driver cap is the head's CPUs, so the probe's jobs leave the backlog
five slots and it drains while it is read. While the backlog is being admitted, a second thread of
the same connected client times ``status <job>`` and ``queue --tenant probe``
calls on the controller (``ray.get`` on the actor call: the CLI's own process
start, imports and ``ray.init`` are excluded and measured separately once).
Reported: p50/p99/max per read, the controller's cycle state (ticks, snapshot
age and build time). Writes benchmarks/out/reads.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, percentiles, print_machine, write_json  # noqa: E402

from cuberay.platform import client  # noqa: E402
from cuberay.platform.demo import scratch_env  # noqa: E402

HEAD_CPUS = 8


def platform_file(scratch: Path) -> Path:
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "reads"},
            "spec": {"storage": str(scratch / "storage"), "scheduler": {"max_drivers": HEAD_CPUS},
                     "tenants": [{"name": "bulk", "members": ["*"]}, {"name": "probe", "members": ["*"]}]}}
    path = scratch / "platform.yaml"
    path.write_text(json.dumps(spec))
    return path


def job(tenant: str, seconds: float) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"{tenant}-{uuid.uuid4().hex[:6]}", "tenant": tenant},
            "spec": {"workers": 1, "resources": {"cpu": "1"}, "command": f"sleep {seconds}"}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backlog", type=int, default=5000)
    ap.add_argument("--reads-s", type=float, default=20.0, help="how long to time reads once the backlog is in")
    ap.add_argument("--bulk", type=int, default=0, metavar="N",
                    help="submit the backlog as copies of one job, N per call (`cuberay submit --count N`)")
    args = ap.parse_args(argv)
    info = print_machine()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="crr", ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        with scratch_env(scratch, HEAD_CPUS):
            client.up(str(platform_file(scratch)))
            try:
                import ray

                handle = client.connect()
                probe = [client.submit(job("probe", 3600), user="bench") for _ in range(3)]
                times: dict[str, list[float]] = {"status": [], "queue --tenant probe": []}
                stop = threading.Event()

                def reader() -> None:
                    while not stop.is_set():
                        me = client.caller()
                        for name, call in (("status", lambda: handle.status.remote(me, probe[0].id)),
                                           ("queue --tenant probe", lambda: handle.queue_page.remote(me, "probe"))):
                            t0 = time.perf_counter()
                            ray.get(call(), timeout=120)
                            times[name].append(1000 * (time.perf_counter() - t0))
                        time.sleep(0.05)

                thread = threading.Thread(target=reader, daemon=True)
                t0 = time.monotonic()
                thread.start()
                submit_ms = []
                left = args.backlog
                while left > 0:
                    s0 = time.perf_counter()
                    if args.bulk:
                        client.submit_copies(job("bulk", 1), min(args.bulk, left), user="bench")
                    else:
                        client.submit(job("bulk", 1), user="bench")
                    left -= min(args.bulk, left) if args.bulk else 1
                    submit_ms.append(1000 * (time.perf_counter() - s0))
                submitted_s = time.monotonic() - t0
                print(f"backlog of {args.backlog} submitted in {submitted_s:.0f} s; timing reads {args.reads_s:.0f} s "
                      "more", flush=True)
                time.sleep(args.reads_s)
                stop.set()
                thread.join()
                ping = ray.get(handle.ping.remote(client.caller()))
                queued = sum(1 for e in client.queue("bulk") if e.state.is_waiting)
                cli = [sys.executable, "-m", "cuberay", "queue", "--tenant", "probe"]
                c0 = time.perf_counter()
                subprocess.run(cli, check=True, capture_output=True, env=dict(os.environ))
                cli_ms = 1000 * (time.perf_counter() - c0)
            finally:
                client.down()
    result = {"machine": info, "load_avg_start_end": [round(load_start, 1), round(os.getloadavg()[0], 1)],
              "backlog": args.backlog, "bulk": args.bulk, "submitted_s": round(submitted_s, 1), "submit": percentiles(submit_ms),
              "reads": {k: percentiles(v) for k, v in times.items()}, "still_queued_at_end": queued,
              "controller": {"ticks": ping["ticks"], "snapshot": ping.get("snapshot")},
              "cli_process_ms": round(cli_ms, 1)}
    path = write_json("reads", result)
    what = f"submit of {args.bulk} copies" if args.bulk else "submit"
    rows = [{"call": k, **v} for k, v in result["reads"].items()] + [{"call": what, **result["submit"]}]
    print("\n" + markdown(rows, ["call", "n", "p50_ms", "p99_ms", "max_ms"]))
    print(f"\nCLI `cuberay queue --tenant probe` as a process (start, imports, connect, call): {cli_ms:.0f} ms; "
          f"{queued} bulk jobs still queued at the end; controller {result['controller']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
