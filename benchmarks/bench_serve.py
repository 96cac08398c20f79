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

Two phases, each in ROUNDS rounds with the paths in a new random order every
round, so drift of a shared machine hits all of them alike:

* load: CONCURRENCY closed-loop clients post one row each as fast as answers come
  for SECONDS per path; throughput ratios are taken within each round (paired)
  and the median over rounds is reported, which cancels slow drift;
* latency: one client, LATENCY_N requests per path one after another, so p50 is
  the cost of the path itself (under load p50 is mostly queueing, i.e. a mirror of
  throughput).

Run: ``.venv/bin/python benchmarks/bench_serve.py`` (~5 min).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import markdown, print_machine, write_json  # noqa: E402
from cuberay.platform.control.head import free_port

CONCURRENCY = int(os.environ.get("BENCH_SERVE_CONCURRENCY", "8"))
SECONDS = float(os.environ.get("BENCH_SERVE_SECONDS", "5"))
ROUNDS = int(os.environ.get("BENCH_SERVE_ROUNDS", "6"))
LATENCY_N = int(os.environ.get("BENCH_SERVE_LATENCY_N", "150"))
ROW = [0.25] * 64
FACTORY = "cuberay.examples.digits:build_model"


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
    from cuberay.serve.app import build
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
        # Imperatively, like the other paths: Serve's declarative config is the platform controller's alone.
        serve.run(build({"plan": plan.to_args()}), name=name, route_prefix=f"/{name}")
        routes[label] = f"/{name}"
    for label in apps:
        deploy.wait_running(label.replace("/", "-").replace("+", "-"), timeout_s=600)
    return routes


async def _load(url: str, seconds: float, clients: int = CONCURRENCY,
                count: int | None = None) -> tuple[int, list[float], int]:
    """``clients`` closed-loop clients for ``seconds`` (or ``count`` requests each)."""
    import aiohttp

    latencies: list[float] = []
    failures = 0
    stop = time.perf_counter() + seconds

    async def client(session):
        nonlocal failures
        sent = 0
        while (time.perf_counter() < stop) if count is None else sent < count:
            sent += 1
            started = time.perf_counter()
            async with session.post(url, json={"inputs": [ROW]}) as response:
                await response.read()
                if response.status != 200:
                    failures += 1
            latencies.append((time.perf_counter() - started) * 1000)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return len(latencies), latencies, failures


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered))) - 1))]


def _measure(port: int, routes: dict[str, str]) -> tuple[list[dict], list[dict[str, float]]]:
    """Both phases over every path: one row per path, and each round's req/s per path."""
    order = list(routes)
    shuffle = random.Random(7).shuffle
    per_round: list[dict[str, float]] = []
    loaded = {label: {"lat": [], "fail": 0} for label in routes}
    quiet = {label: [] for label in routes}
    for _ in range(ROUNDS):
        shuffle(order)
        rates = {}
        for label in order:
            n, lat, fail = asyncio.run(_load(f"http://127.0.0.1:{port}{routes[label]}", SECONDS))
            rates[label] = n / SECONDS
            loaded[label]["lat"] += lat
            loaded[label]["fail"] += fail
        per_round.append(rates)
        shuffle(order)
        for label in order:
            _, lat, fail = asyncio.run(_load(f"http://127.0.0.1:{port}{routes[label]}", 0, clients=1,
                                             count=max(1, LATENCY_N // ROUNDS)))
            quiet[label] += lat
            loaded[label]["fail"] += fail
    rows = []
    for label in routes:
        rows.append({"path": label, "req/s": round(statistics.median(r[label] for r in per_round), 1),
                     "p50 ms": round(_pct(loaded[label]["lat"], 50), 2),
                     "p99 ms": round(_pct(loaded[label]["lat"], 99), 2),
                     "1-client p50 ms": round(_pct(quiet[label], 50), 2),
                     "1-client p99 ms": round(_pct(quiet[label], 99), 2), "failed": loaded[label]["fail"]})
    by = {r["path"]: r for r in rows}
    for r in rows:
        vs_hop = statistics.median(x[r["path"]] / x["one-hop"] for x in per_round)
        vs_direct = statistics.median(x[r["path"]] / x["direct"] for x in per_round)
        added = r["1-client p50 ms"] - by["one-hop"]["1-client p50 ms"]
        r["vs one-hop"] = f"{vs_hop:.3f}x, {added:+.2f} ms 1-client p50"
        r["vs direct"] = f"{vs_direct:.3f}x"
    return rows, per_round


def main() -> int:
    import ray
    from ray import serve

    info = print_machine()
    ray.init(num_cpus=4, include_dashboard=True, _temp_dir=tempfile.mkdtemp(prefix="bench-serve-"),
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}})
    port = free_port()
    serve.start(proxy_location="HeadOnly", http_options={"port": port})
    try:
        routes = _deploy(_checkpoints(tempfile.mkdtemp(prefix="bench-serve-ck-")))
        for route in routes.values():  # warm-up: model loads, connections, JIT of the batch path
            asyncio.run(_load(f"http://127.0.0.1:{port}{route}", 1.5))
        rows, per_round = _measure(port, routes)
        print(markdown(rows, ["path", "req/s", "p50 ms", "p99 ms", "1-client p50 ms", "1-client p99 ms", "failed",
                              "vs one-hop", "vs direct"]))
        print(f"req/s and the ratios: medians over {ROUNDS} rounds of {SECONDS:g} s with {CONCURRENCY} clients "
              f"(ratios paired within a round); 1-client: {max(1, LATENCY_N // ROUNDS) * ROUNDS} sequential "
              f"requests per path")
        write_json("bench_serve", {"machine": info, "concurrency": CONCURRENCY, "seconds": SECONDS,
                                   "rounds": ROUNDS, "latency_n": LATENCY_N, "rows": rows,
                                   "per_round_req_s": per_round})
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
