"""``cuberay up --tenant-cluster TENANT``: one tenant's RayCluster, run on this machine as it would run on KubeRay.

The head is the rendered head: no work on it (``num-cpus: 0``), the controller reading the tenant's own platform
file (the ConfigMap's text, written under cuberay's home), the worker groups in ``CUBERAY_KUBE_WORKER_GROUPS``,
and Ray's autoscaler (v2, as KubeRay runs it) with the rendered worker groups as its node types
(:mod:`cuberay.kuberay.tenant_shape`). No worker runs at first beyond each group's ``minReplicas``; a gang that
needs nodes makes the controller ask the autoscaler for them, and nodes idle past the idle timeout go again.
``cuberay down`` stops the head and every node the autoscaler started.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from cuberay.errors import CuberayError
from cuberay.home import home
from cuberay.kuberay.tenant_shape import (
    FAKE_HEAD_ID,
    OBJECT_STORE_BYTES,
    autoscaling_config,
    head_cpus,
    head_env,
    tenant_raycluster,
)
from cuberay.platform import client
from cuberay.platform.control import head as local_head
from cuberay.platform.spec import load_platform

# What Ray's local (fake) multi-node provider needs on the head: the autoscaler v2, the head's instance id as the
# provider knows it, and a short reconcile interval (KubeRay's autoscaler polls every few seconds too).
AUTOSCALER_ENV = {"RAY_FAKE_CLUSTER": "1", "RAY_enable_autoscaler_v2": "1", "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_ID,
                  "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_ID, "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
STATE_KEY = "tenant_cluster"  # in the local head's state file: which tenant's cluster it is


def platform_path(tenant: str) -> Path:
    """Where the tenant's own platform file goes (on KubeRay: the ConfigMap mounted at /etc/cuberay)."""
    return home() / "tenant-clusters" / tenant / "platform.yaml"


def up(platform_file: str | None, tenant: str, idle_timeout_s: float | None = None) -> dict[str, Any]:
    """Start (or, when it runs, update) ``tenant``'s cluster locally; its facts: dashboard, worker groups, ..."""
    plat = load_platform(client.find_platform_file(platform_file))
    cluster, tenant_platform = tenant_raycluster(plat, tenant)
    running = local_head.read_state()
    if running is not None and running.get(STATE_KEY) != tenant:
        what = f"tenant {running[STATE_KEY]!r}'s cluster" if running.get(STATE_KEY) else "the platform's head"
        raise CuberayError(f"a local Ray head already runs here ({what}, {running['address']}); one runs at a "
                           f"time: stop it with `cuberay down`, then run this again")
    path = platform_path(tenant)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(tenant_platform, sort_keys=False))

    config = autoscaling_config(cluster, "-", idle_timeout_s)
    if running is not None:  # the autoscaler keeps the shape it started with; the platform file reloads
        config = _running_config(running, config, idle_given=idle_timeout_s is not None)
    head_memory = int(config["available_node_types"][config["head_node_type"]]["resources"]["memory"])

    def start() -> dict[str, Any]:
        env = {**head_env(cluster), "CUBERAY_PLATFORM": str(path), **AUTOSCALER_ENV}
        state = local_head.start(home(), head_cpus(cluster), env=env,
                                 autoscaling=lambda gcs: autoscaling_config(cluster, gcs, idle_timeout_s),
                                 extra_args=(f"--object-store-memory={OBJECT_STORE_BYTES}", f"--memory={head_memory}"))
        local_head.update_state(**{STATE_KEY: tenant})
        return {**state, STATE_KEY: tenant}

    url = client.up(tenant_platform, start_head=start)
    groups = [{"group": name, "min": t["min_workers"], "max": t["max_workers"],
               "resources": {k: v for k, v in t["resources"].items() if k != "object_store_memory"},
               "labels": t.get("labels", {})}
              for name, t in config["available_node_types"].items() if name != config["head_node_type"]]
    return {"dashboard_url": url, "tenant": tenant, "platform_file": str(path), "worker_groups": groups,
            "idle_timeout_s": round(config["idle_timeout_minutes"] * 60, 1)}


def _running_config(running: dict[str, Any], wanted: dict[str, Any], *, idle_given: bool) -> dict[str, Any]:
    """The running head's autoscaler config; refused when the one asked for differs (it cannot change live)."""
    path = Path(running["temp_dir"]) / "autoscaling.json"
    config = json.loads(path.read_text())
    for key in ("available_node_types", *(("idle_timeout_minutes",) if idle_given else ())):
        if config[key] != wanted[key]:
            raise CuberayError(f"tenant {running[STATE_KEY]!r}'s cluster runs with other worker groups or another "
                               f"idle timeout ({key} in {path}); Ray's autoscaler keeps the shape it started with: "
                               f"stop it with `cuberay down`, then run this again")
    return config
