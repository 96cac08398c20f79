"""The driver of an admitted ServeApp: deploy it on the allocated nodes, keep it up, remove it at the end.

A service runs until it is deleted (cancelled) or preempted: the driver then gets
SIGTERM and takes the app off Serve. A restarted attempt keeps the weights the
app last had (its traffic history), not the ones in the spec.
"""

from __future__ import annotations

import signal
import time
from typing import Any, Callable

from cuberay.platform.spec.serve import ModelRef, ServeApp
from cuberay.serve import deploy, plan
from cuberay.serve.config import app_config

ALIVE_POLL_S = 5.0
Call = Callable[..., Any]


def lookup_with(call: Call) -> plan.Lookup:
    """``plan.Lookup`` through the controller's ``train_run``."""
    def lookup(tenant: str, ref: ModelRef) -> dict[str, Any]:
        return call("train_run", tenant, ref.job, ref.run, ref.previous)
    return lookup


def entry_for(app: ServeApp, node_ids: list[str], call: Call, weights: dict[str, float] | None = None) -> dict:
    """The app's declarative Serve entry; every input error is raised here, before deploying."""
    plan.check_engines(app)
    plan.check_route(app, deploy.deployed_configs())
    if "vllm" in app.spec.engines:
        return plan.llm_app(app, node_ids)
    entry = app_config(plan.app_plan(app, plan.sources(app, lookup_with(call)), node_ids))
    if weights:
        entry["deployments"][0]["user_config"]["weights"] = dict(weights)
    return entry


def last_weights(call: Call, job_id: str) -> dict[str, float] | None:
    history = call("serve_history", job_id, 1)
    return dict(history[-1].weights) if history and history[-1].action != "delete" else None


class _Stopped(Exception):
    """SIGTERM: the app was deleted or preempted."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped()  # out of the sleep at once: Ray kills a stopped job's driver a few seconds later


def run_service(app: ServeApp, ctx: dict[str, Any], call: Call, say: Callable[[str], None]) -> int:
    """Deploy, wait until Serve runs it, then hold until SIGTERM; the app is removed on the way out."""
    record = ctx["record"]
    previous = last_weights(call, record.id)
    entry = entry_for(app, list(ctx["node_ids"]), call, previous)
    signal.signal(signal.SIGTERM, _stop)
    try:
        deploy.apply(entry)
        deploy.wait_running(app.serve_name)
        weights = (entry.get("deployments") or [{}])[0].get("user_config", {}).get("weights") or app.spec.weights()
        if previous is None:
            call("serve_change", record.id, record.user, "deploy", weights,
                 f"attempt {ctx['attempt']} on {len(set(ctx['node_ids']))} node(s)")
        say(f"serving {app.serve_name} at {app.spec.route_prefix} with weights {weights}")
        while True:
            time.sleep(ALIVE_POLL_S)
    except _Stopped:
        pass
    finally:
        say(f"taking {app.serve_name} off Serve")
        deploy.remove(app.serve_name)
    return 0
