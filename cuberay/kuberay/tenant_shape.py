"""A tenant's RayCluster as Ray's autoscaler sees it: what runs it on this machine, the way it would run on KubeRay.

On Kubernetes the autoscaler in the head pod reads the RayCluster and turns each worker group into an autoscaler
node type (resources from the pod's limits and the group's ``resources``, labels from the group's ``labels``,
``minReplicas``/``maxReplicas`` as min/max workers, ``idleTimeoutSeconds`` as the idle timeout). That translation
is Ray's own (``ray.autoscaler._private.kuberay.autoscaling_config``, the code KubeRay's autoscaler container
runs), so it is used here unchanged on the RayCluster ``cuberay kube render`` writes; only the node provider
differs: Ray's fake multi-node provider (:mod:`cuberay.kuberay.local_nodes`), which starts each node as real local Ray processes (a raylet and its
agents) instead of a pod. A change to the renderer is therefore a change to what the local cluster runs.

Where the local shape departs from the pods, and why:

- every node's object store is small (``OBJECT_STORE_BYTES``): on one machine all nodes share its memory, where
  a pod's store is sized from the pod;
- a GPU node's ``ray.io/accelerator-type`` label is given from the group's ``accelerator_type:`` resource: on a
  pod Ray detects the GPU and sets it, here there is no GPU to detect (the GPUs are logical);
- the head is the pod's head (``num-cpus: 0``: no work there), but runs on this machine's Ray, not in a container.
"""

from __future__ import annotations

import copy
from typing import Any

from cuberay.errors import SpecError
from cuberay.kuberay import labels as L
from cuberay.kuberay.render import tenant_manifests
from cuberay.kuberay.render_cluster import RenderOptions, tenant_platform
from cuberay.platform.policy.pool_shares import platform_shares
from cuberay.platform.spec.resources import LABEL_ACCELERATOR

OBJECT_STORE_BYTES = 128 * 2**20  # per local node; Ray's minimum is 75 MiB
# The fake provider's head: the autoscaler finds the head by this type and instance id (Ray's test provider).
FAKE_HEAD_TYPE = "ray.head.default"
FAKE_HEAD_ID = "fffffffffffffffffffffffffffffffffffffffffffffffffff00000"
ACCELERATOR_PREFIX = "accelerator_type:"
FAKE_PROVIDER = "cuberay.kuberay.local_nodes.LocalNodeProvider"  # Ray's fake provider, nodes with memory


def tenant_raycluster(platform: Any, tenant_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The RayCluster ``cuberay kube render`` writes for ``tenant_name``, and the platform file its head reads."""
    tenant = next((t for t in platform.tenants if t.name == tenant_name), None)
    if tenant is None:
        names = ", ".join(t.name for t in platform.tenants)
        raise SpecError(f"there is no tenant {tenant_name!r} in platform {platform.metadata.name!r}; its tenants "
                        f"are {names}", path="--tenant-cluster")
    shares = platform_shares(platform)[tenant.name]
    opts = RenderOptions(scheduler=L.Scheduler.none, autoscaling=True)
    cluster = next(m.obj for m in tenant_manifests(platform, tenant, shares, opts) if m.kind == "RayCluster")
    if not cluster["spec"]["workerGroupSpecs"]:
        raise SpecError(f"tenant {tenant_name!r} has no worker group: its max fits no whole node of any pool, so "
                        f"its Ray cluster would be a head alone; declare node_pools (or smaller nodes) that its max "
                        f"holds", path=f"spec.tenants.{tenant_name}")
    return cluster, tenant_platform(platform, tenant, shares)


def autoscaling_config(cluster: dict[str, Any], gcs_address: str, idle_timeout_s: float | None = None
                       ) -> dict[str, Any]:
    """Ray's autoscaler config for ``cluster`` (a RayCluster), on local nodes of the fake multi-node provider.

    ``idle_timeout_s`` replaces the RayCluster's ``autoscalerOptions.idleTimeoutSeconds`` (to watch scale-down
    without waiting a minute)."""
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    cluster = copy.deepcopy(cluster)
    if idle_timeout_s is not None:
        cluster["spec"].setdefault("autoscalerOptions", {})["idleTimeoutSeconds"] = idle_timeout_s
    config = _derive_autoscaling_config_from_ray_cr(cluster)
    types = config["available_node_types"]
    head = types.pop(config["head_node_type"])
    types[FAKE_HEAD_TYPE] = {**head, "resources": {**head["resources"]}}
    for node_type in types.values():
        node_type["resources"]["object_store_memory"] = OBJECT_STORE_BYTES
        model = next((k.split(":", 1)[1] for k in node_type["resources"] if k.startswith(ACCELERATOR_PREFIX)), None)
        if model:  # what Ray's GPU detection labels a real node with; a local node has no GPU to detect
            node_type["labels"] = {**node_type.get("labels", {}), LABEL_ACCELERATOR: model}
    config["head_node_type"] = FAKE_HEAD_TYPE
    # The provider by module path ("external"): Ray's wheel lacks the defaults file its "fake_multinode" type
    # reads, and an external provider needs none.
    config["provider"] = {"type": "external", "module": FAKE_PROVIDER,
                          "use_node_id_as_ip": True, "disable_node_updaters": True,
                          "disable_launch_config_check": True, "launch_multiple": True,
                          "head_node_id": FAKE_HEAD_ID, "gcs_address": gcs_address}
    return config


def head_env(cluster: dict[str, Any]) -> dict[str, str]:
    """The head container's environment as rendered (the worker groups the controller counts, ...)."""
    container = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def head_cpus(cluster: dict[str, Any]) -> int:
    """The head's logical CPUs as rendered (``num-cpus: "0"``: the head runs no work)."""
    return int(cluster["spec"]["headGroupSpec"]["rayStartParams"].get("num-cpus", "0"))
