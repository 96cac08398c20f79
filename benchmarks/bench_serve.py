"""Serving overhead: the cuberay router and the multiplexed path against plain Serve, in one run.

Paths, all answering the same digits MLP (random weights; the model is tiny, so
the figures are the serving overhead):

  direct        the version's TorchPredictor is the ingress (0 extra hops)
  one-hop       a plain Serve ingress forwarding to that predictor (1 hop, no logic)
  router-100    the cuberay router, 100 % to that version (1 hop + split/limit/metrics)
  router-90/10  the cuberay router over two versions
  router+mirror the same with a 10 % mirror to v2
  mux-90/10     the multiplexed single deployment, two checkpoints (0 extra hops)
  mux+mirror    the same with a 10 % mirror

Closed loop: CONCURRENCY clients post one row each as fast as answers come;
ROUNDS rounds, the paths interleaved in each round, so drift of a shared machine
hits all of them. Run: ``.venv/bin/python benchmarks/bench_serve.py`` (~3 min).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import markdown, print_machine, write_json  # noqa: E402

CONCURRENCY = int(os.environ.get("BENCH_SERVE_CONCURRENCY", "8"))
SECONDS = float(os.environ.get("BENCH_SERVE_SECONDS", "8"))
ROUNDS = int(os.environ.get("BENCH_SERVE_ROUNDS", "2"))
ROW = [0.25] * 64
FACTORY = "cuberay.examples.digits:build_model"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _checkpoints(root: str) -> dict[str, str]:
    import torch

    from cuberay.examples.digits import build_model

    out = {}
    for seed, name in enumerate(("v1", "v2")):
        torch.manual_seed(seed)
        path = Path(root) / name
        path.mkdir()
        torch.save({"model": build_model({}).state_dict(), "epoch": 0}, path / "model.pt")
        out[name] = str(path)
    return out


def _deploy(ckpts: dict[str, str]) -> dict[str, str]:
    """Start every path; name -> route."""
    from ray import serve

    from cuberay.serve import config as C
    from cuberay.serve import deploy
    from cuberay.serve.predictor import TorchPredictor

    small = {"num_cpus": 0.1}

    @serve.deployment(max_ongoing_requests=256, ray_actor_options=small)
    class OneHop:
        def __init__(self, target):
            self.target = target

        async def __call__(self, request):
            return await self.target.remote(await request.json())

    predictor = TorchPredictor.options(ray_actor_options=small)
    serve.run(predictor.bind(ckpts["v1"], FACTORY, {}, "v1"), name="direct", route_prefix="/direct")
    serve.run(OneHop.bind(predictor.bind(ckpts["v1"], FACTORY, {}, "v1")), name="onehop", route_prefix="/onehop")
    versions = tuple(C.VersionPlan(v, checkpoint=ckpts[v], factory=FACTORY, ray_actor_options=small) for v in ckpts)
    mirror = {"version": "v2", "percent": 10}
    apps = {
        "router-100": ({"weights": {"v1": 100, "v2": 0}}, False),
        "router-90/10": ({"weights": {"v1": 90, "v2": 10}}, False),
        "router+mirror": ({"weights": {"v1": 90, "v2": 10}, "mirror": mirror}, False),
        "mux-90/10": ({"weights": {"v1": 90, "v2": 10}}, True),
        "mux+mirror": ({"weights": {"v1": 90, "v2": 10}, "mirror": mirror}, True),
    }
    routes = {"direct": "/direct", "one-hop": "/onehop"}
    for label, (traffic, multiplex) in apps.items():
        name = label.replace("/", "-").replace("+", "-")
        plan = C.AppPlan(name, f"/{name}", versions, traffic, router_actor_options=small, multiplex=multiplex)
        deploy.apply(C.app_config(plan))
        routes[label] = f"/{name}"
    for label in apps:
        deploy.wait_running(label.replace("/", "-").replace("+", "-"), timeout_s=600)
    return routes


async def _load(url: str, seconds: float) -> tuple[int, list[float], int]:
    import aiohttp

    latencies: list[float] = []
    failures = 0
    stop = time.perf_counter() + seconds

    async def client(session):
        nonlocal failures
        while time.perf_counter() < stop:
            started = time.perf_counter()
            async with session.post(url, json={"inputs": [ROW]}) as response:
                await response.read()
                if response.status != 200:
                    failures += 1
            latencies.append((time.perf_counter() - started) * 1000)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(CONCURRENCY)))
    return len(latencies), latencies, failures


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered))) - 1))]


def main() -> int:
    import ray
    from ray import serve

    info = print_machine()
    ray.init(num_cpus=4, include_dashboard=True, _temp_dir=tempfile.mkdtemp(prefix="bench-serve-"),
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}})
    port = _free_port()
    serve.start(proxy_location="HeadOnly", http_options={"port": port})
    try:
        routes = _deploy(_checkpoints(tempfile.mkdtemp(prefix="bench-serve-ck-")))
        totals = {label: {"n": 0, "lat": [], "fail": 0, "s": 0.0} for label in routes}
        for label, route in routes.items():  # warm-up: model loads, connections, JIT of the batch path
            asyncio.run(_load(f"http://127.0.0.1:{port}{route}", 1.5))
        for _ in range(ROUNDS):
            for label, route in routes.items():
                n, lat, fail = asyncio.run(_load(f"http://127.0.0.1:{port}{route}", SECONDS))
                t = totals[label]
                t["n"] += n
                t["lat"] += lat
                t["fail"] += fail
                t["s"] += SECONDS
        rows = []
        for label, t in totals.items():
            rows.append({"path": label, "req/s": round(t["n"] / t["s"], 1), "p50 ms": round(_pct(t["lat"], 50), 2),
                         "p99 ms": round(_pct(t["lat"], 99), 2), "failed": t["fail"]})
        by = {r["path"]: r for r in rows}
        hop, direct = by["one-hop"], by["direct"]
        for r in rows:
            r["vs one-hop"] = f"{r['req/s'] / hop['req/s']:.2f}x, {r['p50 ms'] - hop['p50 ms']:+.2f} ms p50"
            r["vs direct"] = f"{r['req/s'] / direct['req/s']:.2f}x"
        print(markdown(rows, ["path", "req/s", "p50 ms", "p99 ms", "failed", "vs one-hop", "vs direct"]))
        write_json("bench_serve", {"machine": info, "concurrency": CONCURRENCY, "seconds": SECONDS,
                                   "rounds": ROUNDS, "rows": rows})
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
