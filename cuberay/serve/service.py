"""The driver of an admitted ServeApp: deploy it on the allocated nodes, keep it up, remove it at the end.

A service runs until it is deleted (cancelled) or preempted: the driver then gets
SIGTERM and takes the app off Serve. It computes its app's entry of Serve's
declarative config and asks the controller to write it (``serve_deploy``,
``serve_undeploy``): the controller is that config's only writer, and it decides the
weights (a restarted attempt keeps those of the app's last traffic change, a resize
those deployed).
"""

from __future__ import annotations

import signal
import time
from typing import Any, Callable

from cuberay.errors import CuberayError
from cuberay.platform.api import ControllerAPI
from cuberay.platform.api.records import JobContext
from cuberay.platform.spec.serve import ModelRef, ServeApp
from cuberay.serve import deploy, graph, plan
from cuberay.serve.config import AppPlan, app_config, companions, traffic_of

ALIVE_POLL_S = 2.0  # also how soon a resize reaches Serve


def lookup_with(api: ControllerAPI) -> plan.Lookup:
    """``plan.Lookup`` through the controller's ``train_run``."""
    def lookup(tenant: str, ref: ModelRef) -> dict[str, Any]:
        return api.train_run(tenant, ref.job, ref.run, ref.previous)
    return lookup


def entry_for(app: ServeApp, node_ids: list[str], api: ControllerAPI) -> dict:
    """The app's declarative Serve entry; every input error is raised here, before deploying."""
    plan.check_engines(app)
    graph.check_graphs(app)
    if "vllm" in app.spec.engines:
        return plan.llm_app(app, node_ids)
    return app_config(plan.app_plan(app, plan.sources(app, lookup_with(api)), node_ids))


def resized_entry(app: ServeApp, node_ids: list[str], deployed: dict[str, Any]) -> dict[str, Any]:
    """The running app's entry on a new allocation: the same models and weights as deployed (a rollout may
    have moved them), replicas re-pinned to ``node_ids`` and allowed up to what they grant (the rate limit's
    per-replica shares follow the new replica count)."""
    if "vllm" in app.spec.engines:
        return plan.llm_app(app, node_ids)
    running = AppPlan.from_args(deployed["args"]["plan"])
    found = {v.name: {"checkpoint": v.checkpoint, "factory": v.factory, "config": v.config}
             for v in running.versions if v.engine == "torch"}
    entry = app_config(plan.app_plan(app, found, node_ids))
    entry["deployments"][0]["user_config"]["weights"] = traffic_of(deployed)["weights"]
    return entry


def follow_allocation(app: ServeApp, ctx: JobContext, nodes: list[str], api: ControllerAPI,
                      say: Callable[[str], None]) -> list[str]:
    """Apply a resize admission made (more or fewer replica slots): the app changes in place on Serve."""
    record = ctx.record
    info = api.allocation(record.id, ctx.attempt)
    if not info.current or sorted(info.node_ids) == sorted(nodes):
        return nodes
    new = list(info.node_ids)
    api.serve_deploy(record.id, ctx.attempt, resized_entry(app, new, deploy.deployed_config(app.serve_name)),
         f"resized to {len(new)} replica slot(s)")
    caps = plan.replica_caps(app, len(new))
    note = (f"{len(new)} replica slot(s) (was {len(nodes)}) on {len(set(new))} node(s); replicas up to "
            + ", ".join(f"{name} {cap}" for name, cap in caps.items()))
    say(f"resized {app.serve_name}: {note}")
    api.resized(record.id, ctx.attempt, len(new), note)
    return new


class _Stopped(Exception):
    """SIGTERM: the app was deleted or preempted."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped()  # out of the sleep at once: Ray kills a stopped job's driver a few seconds later


def run_service(app: ServeApp, ctx: JobContext, api: ControllerAPI, say: Callable[[str], None]) -> int:
    """Deploy, wait until Serve runs it, then hold until SIGTERM; the app is removed on the way out."""
    record, attempt = ctx.record, ctx.attempt
    entry = entry_for(app, list(ctx.node_ids), api)
    signal.signal(signal.SIGTERM, _stop)
    try:
        deploy.ensure_serve()
        weights = api.serve_deploy(record.id, attempt, entry,
                       f"attempt {attempt} on {len(set(ctx.node_ids))} node(s)")
        for companion in companions(entry):  # a bound-application version's own Serve app
            deploy.wait_running(companion["name"])
        deploy.wait_running(app.serve_name)
        say(f"serving {app.serve_name} at {app.spec.route_prefix} with weights {weights}")
        nodes = list(ctx.node_ids)
        while True:
            time.sleep(ALIVE_POLL_S)
            try:
                nodes = follow_allocation(app, ctx, nodes, api, say)
            except CuberayError as err:  # the controller or Serve is busy: the next poll tries again
                say(f"could not follow the allocation yet: {err}")
    except _Stopped:
        pass
    finally:
        say(f"taking {app.serve_name} off Serve")
        try:
            api.serve_undeploy(record.id, attempt)
        except CuberayError as err:  # the controller takes it off when the app is deleted (`cuberay serve delete`)
            say(f"could not take {app.serve_name} off Serve: {err}")
    return 0
