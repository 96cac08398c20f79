"""The console at size: every page's API calls and the Queue page's first paint over a backlog that stays.

    python benchmarks/bench_console.py                          # 100,000 waiting jobs
    python benchmarks/bench_console.py --backlog 10000 --probes 6 --samples 10   # a quick look

A local platform (``client.up`` in a scratch directory, as ``cuberay demo``; the API server and console on the
head as ``cuberay up`` starts them) with two tenants on a head of 8 CPUs. ``bulk`` may hold 6 of them and gets
a backlog of one-CPU hour-long Tasks (``submit --count``): 6 run, the rest wait for the whole run, so every
admission cycle orders and explains the whole backlog (an overload that stays, not one that drains).
``probe`` keeps 2 CPUs for itself. Measured, in one run:

1. Server time of every call the console's pages make, and of the pages' own files: each timed ``--samples``
   times from a client on this machine over HTTP with the cluster token (the console's server in its actor on
   the head, the controller behind it). The calls scripts make (a 1,000-row queue page, as ``cuberay queue -o
   json`` reads the queue, and ``list_jobs`` of the running jobs) are timed too, and reported apart, with two
   reads of the whole queue a page at a time (``client.queue()``).
2. The Queue page in headless Chromium (Debian's, through Playwright): navigation to the first row of the
   table painted, in a new tab each time (the session's cookie kept, the browser's cache warm).
3. Admission overhead per job with the console closed and with it open (the Queue and Overview pages open in
   two tabs, each refreshing every second), alternating: short probe Tasks submitted one at a time, each
   measured from the controller's own event log (submitted -> admitted: the admission cycle over the whole
   backlog; admitted -> started: the Ray Job submit). With the console open, also the live delay: probe
   submitted -> its row on the open Queue page, without a reload.

Writes benchmarks/out/console.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, percentiles, print_machine, wait_for, write_json  # noqa: E402

from cuberay.platform import client  # noqa: E402
from cuberay.platform.control import head as controller_head  # noqa: E402
from cuberay.platform.demo import scratch_env  # noqa: E402
from cuberay.platform.policy.states import JobState  # noqa: E402

HEAD_CPUS = 8
CHROMIUM = "/usr/bin/chromium"
USER = "bench"


def platform_file(scratch: Path) -> Path:
    def tenant(name: str, guaranteed: str, most: str) -> dict[str, Any]:
        return {"name": name, "members": ["*"], "quota": {"guaranteed": {"cpu": guaranteed}, "max": {"cpu": most}}}

    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "console-bench"},
            "spec": {"storage": str(scratch / "storage"), "scheduler": {"max_drivers": HEAD_CPUS},
                     "tenants": [tenant("bulk", "4", "6"), tenant("probe", "2", "2")]}}
    path = scratch / "platform.yaml"
    path.write_text(json.dumps(spec))
    return path


def task(tenant: str, cpu: str, command: str) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"{tenant}-{uuid.uuid4().hex[:6]}", "tenant": tenant},
            "spec": {"workers": 1, "resources": {"cpu": cpu}, "command": command}}


# ---------------------------------------------------------------- 1. server time per call


class Api:
    """The platform's HTTP API as any tool calls it: the cluster token as a bearer token."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token

    def get(self, path: str) -> bytes:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.read()

    def call(self, method: str, **kwargs: Any) -> Any:
        body = json.dumps({"caller": {"user": USER}, "args": [], "kwargs": kwargs}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/call/{method}", data=body, method="POST", headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.loads(answer.read())["result"]


def page_calls(probe_id: str) -> dict[str, dict[str, Callable[[Api], Any]]]:
    """Each page's calls (cuberay/console/static/console.js), by page."""
    return {
        "files": {"GET /": lambda a: a.get("/"), "GET /static/console.js": lambda a: a.get("/static/console.js"),
                  "GET /static/trials.js": lambda a: a.get("/static/trials.js")},
        "overview": {"tenants": lambda a: a.call("tenants"), "nodes": lambda a: a.call("nodes"),
                     "event_counts last hour": lambda a: a.call("event_counts", since=time.time() - 3600)},
        "queue": {"queue_page": lambda a: a.call("queue_page", limit=50),
                  "queue_page page 1,000": lambda a: a.call("queue_page", offset=50_000, limit=50),
                  "queue_page tenant=probe": lambda a: a.call("queue_page", tenant="probe", limit=50),
                  "queue_page user=bench": lambda a: a.call("queue_page", user=USER, limit=50),
                  "queue_page state=running": lambda a: a.call("queue_page", state="running", limit=1000)},
        "jobs": {"job_page": lambda a: a.call("job_page", limit=50),
                 "job_page page 1,000": lambda a: a.call("job_page", offset=50_000, limit=50),
                 "job_page name=probe": lambda a: a.call("job_page", name="probe", limit=50),
                 "job_page state, kind, last hour": lambda a: a.call(
                     "job_page", states=["QUEUED"], kinds=["Task"], since=time.time() - 3600, limit=50)},
        "job": {"status": lambda a: a.call("status", ref=probe_id),
                "events of a job": lambda a: a.call("events", job_id=probe_id, limit=500),
                "logs": lambda a: a.call("logs", ref=probe_id, offset=0, limit=262144)},
        "nodes": {"running": lambda a: a.call("running")},
        "pipelines": {"pipeline_list": lambda a: a.call("pipeline_list"),
                      "pipeline_runs": lambda a: a.call("pipeline_runs")},
        "services": {"job_page kinds=ServeApp": lambda a: a.call("job_page", kinds=["ServeApp"], limit=100)},
        "tune": {"job_page kinds=TuneJob": lambda a: a.call("job_page", kinds=["TuneJob"], limit=50)},
    }


def unpaged_calls() -> dict[str, Callable[[Api], Any]]:
    return {"queue_page limit=1,000 (one call of cuberay queue -o json)": lambda a: a.call("queue_page", limit=1000),
            "queue_page offset 50,000 limit=1,000": lambda a: a.call("queue_page", offset=50_000, limit=1000),
            "list_jobs state=RUNNING": lambda a: a.call("list_jobs", states=["RUNNING"])}


def timed_walk(samples: int) -> dict[str, Any]:
    """``client.queue()`` over the whole backlog: 1,000 rows a call, as ``cuberay queue -o json`` reads it."""
    times, rows = [], 0
    for _ in range(samples):
        t0 = time.perf_counter()
        rows = len(client.queue())
        times.append(time.perf_counter() - t0)
    out = {"rows": rows, "seconds": [round(t, 1) for t in times]}
    print(f"  the whole queue: {out}", flush=True)
    return out


def time_calls(api: Api, calls: dict[str, Callable[[Api], Any]], samples: int) -> dict[str, dict[str, float]]:
    out = {}
    for name, fn in calls.items():
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            fn(api)
            times.append(1000 * (time.perf_counter() - t0))
        out[name] = percentiles(times)
        print(f"  {name}: p50 {out[name]['p50_ms']} ms, p99 {out[name]['p99_ms']} ms", flush=True)
    return out


# ---------------------------------------------------------------- 2. and 3. in a browser


class Browser:
    """Headless Chromium signed in to the console."""

    def __init__(self, url: str, token: str) -> None:
        from playwright.sync_api import sync_playwright

        self.url = url
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        self.context = self.browser.new_context(viewport={"width": 1280, "height": 860})
        self.errors: list[str] = []
        self.timelines: list[dict[str, Any]] = []
        page = self.tab("")
        page.fill("#token", token)
        page.fill("#user", USER)
        page.click("button[type=submit]")
        page.wait_for_selector(f"#who:has-text('signed in as {USER}')")
        page.close()

    def tab(self, route: str) -> Any:
        page = self.context.new_page()
        page.set_default_timeout(60_000)
        page.on("pageerror", lambda err: self.errors.append(str(err)))
        page.goto(self.url + "/" + route)
        return page

    def queue_first_paint(self) -> tuple[float, float]:
        """(wall ms from navigation to the first row, the page's own clock at that row); each load's requests
        (start and end on the page's clock) are kept in ``self.timelines``, to say where a slow one waited."""
        t0 = time.perf_counter()
        page = self.tab("#/queue")
        page.wait_for_selector("tr[data-job]", state="visible")
        wall = 1000 * (time.perf_counter() - t0)
        in_page = page.evaluate("performance.now()")
        self.timelines.append({"wall_ms": round(wall, 1), "page_clock_ms": round(in_page, 1), "requests": page.evaluate(
            "performance.getEntriesByType('resource').map((e) => [e.name.replace(location.origin, ''), "
            "Math.round(e.startTime), Math.round(e.responseEnd)])")})
        page.close()
        return wall, in_page

    def close(self) -> None:
        self.browser.close()
        self._pw.stop()


def probe_once(handle: Any, queue_tab: Any | None) -> dict[str, float]:
    import ray

    t0 = time.time()
    ref = client.submit(task("probe", "100m", "sleep 2"), user=USER)
    live = None
    if queue_tab is not None:
        queue_tab.wait_for_selector(f"tr[data-job='{ref.id}']", state="attached", timeout=60_000)
        live = 1000 * (time.time() - t0)
    record = client.wait(ref, timeout=300, poll_s=0.2)
    if record.state != JobState.SUCCEEDED:
        raise RuntimeError(f"probe {ref.id} ended {record.state.value}: {record.message}")
    events = {e.kind: e.time for e in ray.get(handle.events.remote(client.caller(), ref.id, 100))}
    out = {"decision_ms": 1000 * (events["admitted"] - events["submitted"]),
           "launch_ms": 1000 * (events["started"] - events["admitted"])}
    if live is not None:
        out["live_ms"] = live
    return out


def overhead(handle: Any, browser: Browser, probes: int, rounds: int) -> dict[str, Any]:
    seen: dict[str, list[dict[str, float]]] = {"closed": [], "open": []}
    for r in range(rounds):
        for mode in ("closed", "open"):
            tabs = [browser.tab("#/queue"), browser.tab("#/")] if mode == "open" else []
            if tabs:
                tabs[0].wait_for_selector("tr[data-job]", state="visible")
            for _ in range(probes):
                seen[mode].append(probe_once(handle, tabs[0] if tabs else None))
            for t in tabs:
                t.close()
            print(f"  round {r + 1}, console {mode}: {probes} probes", flush=True)

    def pick(mode: str, key: str) -> dict[str, float]:
        return percentiles([p[key] for p in seen[mode] if key in p])

    result = {mode: {"decision": pick(mode, "decision_ms"), "launch_call": pick(mode, "launch_ms")}
              for mode in seen}
    result["open"]["live_delay"] = pick("open", "live_ms")
    result["ratio_open_to_closed_decision_p50"] = round(
        result["open"]["decision"]["p50_ms"] / max(result["closed"]["decision"]["p50_ms"], 1e-9), 2)
    return result


# ---------------------------------------------------------------- the run


def build_backlog(backlog: int, bulk: int) -> float:
    t0 = time.monotonic()
    left = backlog
    while left > 0:
        client.submit_copies(task("bulk", "1", "sleep 3600"), min(bulk, left), user=USER)
        left -= min(bulk, left)
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backlog", type=int, default=100_000, help="bulk Tasks submitted (6 run, the rest wait)")
    ap.add_argument("--bulk", type=int, default=10_000, help="copies per submit call")
    ap.add_argument("--samples", type=int, default=30, help="timed calls per API call")
    ap.add_argument("--paints", type=int, default=10, help="Queue page loads timed in Chromium")
    ap.add_argument("--probes", type=int, default=8, help="probe Tasks per round and mode")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (console closed, console open)")
    args = ap.parse_args(argv)
    info = print_machine()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="crc", ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        with scratch_env(scratch, HEAD_CPUS):
            client.up(str(platform_file(scratch)))
            browser = None
            try:
                handle = client.connect()
                state = controller_head.read_state() or {}
                if not state.get("api_url"):
                    raise RuntimeError(f"the head serves no API: {state.get('api_error')}")
                api = Api(state["api_url"], controller_head.cluster_token() or "")
                submitted_s = build_backlog(args.backlog, args.bulk)
                print(f"backlog of {args.backlog} submitted in {submitted_s:.0f} s", flush=True)
                probe = client.submit(task("probe", "100m", "echo probe"), user=USER)
                client.wait(probe, timeout=300, poll_s=0.2)
                wait_for(lambda: api.call("queue_page", state="waiting", limit=1)["total"] >= args.backlog - 6,
                         600, "the backlog to be ordered", 1.0)
                print("1. server time per call", flush=True)
                pages = {page: time_calls(api, calls, args.samples)
                         for page, calls in page_calls(probe.id).items()}
                unpaged = time_calls(api, unpaged_calls(), max(3, args.samples // 5))
                walk = timed_walk(2)
                print("2. the Queue page's first paint in Chromium", flush=True)
                browser = Browser(state["api_url"], api.token)
                paints = [browser.queue_first_paint() for _ in range(args.paints)]
                slowest = max(browser.timelines, key=lambda t: t["page_clock_ms"])
                print("3. admission overhead per job, console closed and open", flush=True)
                over = overhead(handle, browser, args.probes, args.rounds)
                queued = api.call("queue_page", state="waiting", limit=1)["total"]
                ping = api.call("ping")
                js_errors = list(browser.errors)
            finally:
                if browser is not None:
                    browser.close()
                client.down()
    worst = max((v["p99_ms"], f"{page}: {name}") for page, calls in pages.items() for name, v in calls.items())
    result = {"machine": info, "load_avg_start_end": [round(load_start, 1), round(os.getloadavg()[0], 1)],
              "backlog": args.backlog, "submitted_s": round(submitted_s, 1), "still_waiting_at_end": queued,
              "pages": pages, "worst_page_call_p99": {"ms": worst[0], "call": worst[1]}, "unpaged": unpaged,
              "whole_queue_walk": walk,
              "queue_first_paint": {"wall": percentiles([w for w, _ in paints]),
                                    "page_clock": percentiles([p for _, p in paints]),
                                    "slowest_load": slowest},
              "overhead": over, "javascript_errors": js_errors,
              "controller": {"ticks": ping["ticks"], "snapshot": ping.get("snapshot")}}
    path = write_json("console", result)
    rows = [{"page": page, "call": name, **v} for page, calls in pages.items() for name, v in calls.items()]
    rows += [{"page": "(no page)", "call": name, **v} for name, v in unpaged.items()]
    print("\n" + markdown(rows, ["page", "call", "n", "p50_ms", "p99_ms", "max_ms"]))
    print(f"\nworst page call p99: {worst[0]} ms ({worst[1]}); Queue first paint {result['queue_first_paint']}")
    print(f"overhead: {json.dumps(over)}")
    print(f"the whole queue, read a page at a time (client.queue(), as cuberay queue -o json): {walk}")
    print(f"{queued} still waiting at the end; JavaScript errors: {js_errors or 'none'}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
