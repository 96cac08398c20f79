"""``cuberay kube apply|status|delete`` through the official ``kubernetes`` client.

Apply is server-side apply (``PATCH`` with ``application/apply-patch+yaml``, field manager
``cuberay``, ``force``: cuberay owns the fields it renders), so applying twice is a no-op and
fields other managers own (Kueue's ``spec.suspend``, the autoscaler's replicas) are left alone.
``dry_run`` asks the API server to run admission and validation without storing
(``dryRun=All``). Unknown fields fail the request (``fieldValidation=Strict``).

The ``kubernetes`` package is imported inside functions: the CLI starts fast and the
rendering code never needs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from cuberay.errors import CuberayError, NotFoundError, SpecError
from cuberay.kuberay.labels import FIELD_MANAGER

APPLY_PATCH = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Route:
    group: str  # "" for the core API
    version: str
    plural: str
    namespaced: bool


ROUTES: dict[tuple[str, str], Route] = {
    ("v1", "Namespace"): Route("", "v1", "namespaces", False),
    ("v1", "ConfigMap"): Route("", "v1", "configmaps", True),
    ("scheduling.k8s.io/v1", "PriorityClass"): Route("scheduling.k8s.io", "v1", "priorityclasses", False),
    ("ray.io/v1", "RayCluster"): Route("ray.io", "v1", "rayclusters", True),
    ("ray.io/v1", "RayJob"): Route("ray.io", "v1", "rayjobs", True),
    ("ray.io/v1", "RayService"): Route("ray.io", "v1", "rayservices", True),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): Route("kueue.x-k8s.io", "v1beta2", "resourceflavors", False),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): Route("kueue.x-k8s.io", "v1beta2", "clusterqueues", False),
    ("kueue.x-k8s.io/v1beta2", "Cohort"): Route("kueue.x-k8s.io", "v1beta2", "cohorts", False),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): Route("kueue.x-k8s.io", "v1beta2", "localqueues", True),
    ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"):
        Route("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", False),
    ("scheduling.volcano.sh/v1beta1", "Queue"): Route("scheduling.volcano.sh", "v1beta1", "queues", False),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): Route("scheduling.volcano.sh", "v1beta1", "podgroups", True),
    # Built-in groups, applied through the same generic group/version/plural paths.
    ("networking.k8s.io/v1", "NetworkPolicy"): Route("networking.k8s.io", "v1", "networkpolicies", True),
    ("rbac.authorization.k8s.io/v1", "Role"): Route("rbac.authorization.k8s.io", "v1", "roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): Route("rbac.authorization.k8s.io", "v1", "rolebindings", True),
}


def route(obj: dict[str, Any]) -> Route:
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in ROUTES:
        kinds = ", ".join(kind for _, kind in ROUTES)
        raise SpecError(f"cuberay cannot apply {key[0]} {key[1]}; it applies {kinds} (use kubectl for others)")
    return ROUTES[key]  # type: ignore[index]


def order(objs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply order: namespaces, then cluster-scoped objects (flavors before queues), then namespaced ones."""
    objs = list(objs)
    rank = {"Namespace": 0, "ResourceFlavor": 1, "Cohort": 1, "PriorityClass": 1, "WorkloadPriorityClass": 1}
    return sorted(objs, key=lambda o: (rank.get(o.get("kind"), 3 if route(o).namespaced else 2)))


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A client from the kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``) or in-cluster."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, FileNotFoundError, OSError) as exc:
        if kubeconfig or context:
            raise CuberayError(f"cannot load the kubeconfig ({exc}); check --kubeconfig and --context") from None
    try:
        config.load_incluster_config()
    except ConfigException:
        raise CuberayError("no Kubernetes configuration: no kubeconfig (~/.kube/config or $KUBECONFIG) and not "
                           "running in a pod; pass --kubeconfig FILE") from None
    from kubernetes import client

    return client.ApiClient()


class Kube:
    """Server-side apply, get and delete of rendered objects, as plain dicts."""

    def __init__(self, api: Any) -> None:
        from kubernetes import client

        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def _call(self, verb: str, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        r = route(obj)
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if r.namespaced and not namespace:
            raise SpecError(f"{obj['kind']} {name!r} has no metadata.namespace; set it")
        try:
            response = self._dispatch(verb, r, name, namespace, kwargs)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFoundError(f"{obj['kind']} {_where(name, namespace)} is not on the cluster "
                                    f"({_reason(exc)})") from None
            raise CuberayError(f"{verb} {obj['kind']} {_where(name, namespace)}: the API server answered "
                               f"{exc.status}: {_reason(exc)}") from None
        data = response.data
        return json.loads(data) if data else {}

    def _dispatch(self, verb: str, r: Route, name: str, namespace: str | None, kwargs: dict[str, Any]) -> Any:
        raw = {"_preload_content": False}
        if not r.group:
            what = "namespace" if r.plural == "namespaces" else "namespaced_config_map"
            args = (name,) if not r.namespaced else (name, namespace)
            method = {"apply": f"patch_{what}", "get": f"read_{what}", "delete": f"delete_{what}"}[verb]
            if verb == "apply":
                return getattr(self.core, method)(*args, kwargs["body"], **kwargs["options"], **raw)
            return getattr(self.core, method)(*args, **kwargs.get("options", {}), **raw)
        scope = "namespaced" if r.namespaced else "cluster"
        args = (r.group, r.version, *((namespace,) if r.namespaced else ()), r.plural, name)
        method = {"apply": f"patch_{scope}_custom_object", "get": f"get_{scope}_custom_object",
                  "delete": f"delete_{scope}_custom_object"}[verb]
        if verb == "apply":
            return getattr(self.custom, method)(*args, kwargs["body"], **kwargs["options"], **raw)
        return getattr(self.custom, method)(*args, **kwargs.get("options", {}), **raw)

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        options = {"field_manager": FIELD_MANAGER, "force": True, "field_validation": "Strict",
                   "_content_type": APPLY_PATCH}
        if dry_run:
            options["dry_run"] = "All"
        return self._call("apply", obj, body=obj, options=options)

    def get(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self._call("get", obj)
        except NotFoundError:
            return None

    def delete(self, obj: dict[str, Any], *, dry_run: bool = False) -> bool:
        """Delete (foreground: the cluster's pods go first); False if it was not there."""
        options: dict[str, Any] = {"propagation_policy": "Foreground"}
        if dry_run:
            options["dry_run"] = "All"
        try:
            self._call("delete", obj, options=options)
        except NotFoundError:
            return False
        return True


def _where(name: str | None, namespace: str | None) -> str:
    return f"{namespace}/{name}" if namespace else str(name)


def _reason(exc: Any) -> str:
    try:
        return json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def status_row(obj: dict[str, Any], live: dict[str, Any] | None) -> dict[str, Any]:
    """One status line: state and conditions of a RayCluster/RayJob/RayService; present/absent otherwise."""
    meta = obj["metadata"]
    row: dict[str, Any] = {"kind": obj["kind"], "namespace": meta.get("namespace") or "", "name": meta["name"]}
    if live is None:
        return {**row, "state": "absent", "detail": ""}
    status = live.get("status") or {}
    spec = live.get("spec") or {}
    if obj["kind"] == "RayCluster":
        ready = status.get("readyWorkerReplicas", 0)
        desired = status.get("desiredWorkerReplicas", 0)
        state = "suspended" if spec.get("suspend") else (status.get("state") or "pending")
        detail = f"workers {ready}/{desired} ready"
    elif obj["kind"] == "RayJob":
        state = status.get("jobDeploymentStatus") or "pending"
        detail = f"job {status.get('jobStatus') or '-'}" + (f", {status['reason']}" if status.get("reason") else "")
    elif obj["kind"] == "RayService":
        state = status.get("serviceStatus") or "pending"
        detail = ""
    else:
        return {**row, "state": "present", "detail": ""}
    conditions = [f"{c.get('type')}={c.get('status')}" for c in status.get("conditions") or []]
    if conditions:
        detail = f"{detail}; {', '.join(conditions)}" if detail else ", ".join(conditions)
    return {**row, "state": state, "detail": detail}
