"""``cuberay serve import``: a Ray Serve config file (``serve build`` output) as ServeApps, one per application.

The file is what ``serve deploy`` and KubeRay's ``serveConfigV2`` take::

    applications:
      - name: graph
        route_prefix: /graph
        import_path: cuberay.examples.serve_graph:app
        runtime_env: {}
        deployments:
          - {name: Scaler, num_replicas: 1}
          - {name: Ingress, autoscaling_config: {min_replicas: 1, max_replicas: 2}}

Each application becomes a ServeApp with one version (``v1``) that is the bound application as written,
its deployments with the file's settings (a deployment the file does not list gets its code's, when the
import path can be imported here). What cuberay cannot honour is refused by name, with the reason, before
anything is submitted. Pure but for that optional import: dicts in, dicts out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from cuberay.errors import SpecError
from cuberay.platform.spec.serve import OWNED_OPTIONS

API_VERSION = "cuberay.io/v1alpha1"
VERSION = "v1"
# Cluster-wide settings of the file: the platform's Serve (its proxies, ports, logs) is shared by every app.
NO_EFFECT = ("proxy_location", "http_options", "grpc_options", "logging_config")
APP_KEYS = {"name", "route_prefix", "import_path", "runtime_env", "deployments"}
APP_REFUSED = {
    "args": "cuberay deploys a bound application (module:app) as written; an application builder's args are "
            "not passed; bind the application in a module and name it",
    "logging_config": "a ServeApp's logs follow the platform's Serve logging; remove it",
    "external_scaler_enabled": "cuberay's admission sizes a ServeApp (an external scaler would bypass its "
                               "quota); remove it",
}
TOP_REFUSED = {"target_capacity": "it scales every app of the cluster; cuberay sizes each app by its quota"}
ACTOR_RESOURCES = {"num_cpus": "cpu", "num_gpus": "gpu", "memory": "memory"}
SCALING_KEYS = {"min_replicas", "max_replicas", "initial_replicas", "target_ongoing_requests"}
_NOT_IN_NAME = re.compile(r"[^a-z0-9-]+")


def load_config(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read the Serve config file: {exc}", file=str(path)) from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("applications"), list) or not data["applications"]:
        raise SpecError("a Serve config file has applications: [{name, route_prefix, import_path, deployments}, "
                        "...] (what `serve build` writes); this file has none", file=str(path))
    return dict(data)


def no_effect(config: Mapping[str, Any]) -> list[str]:
    """The file's cluster-wide settings, which the platform's Serve keeps as they are."""
    return [key for key in NO_EFFECT if config.get(key) not in (None, {}, [])]


Inspect = Callable[[str], "list[dict[str, Any]] | None"]


def to_serve_apps(config: Mapping[str, Any], file: str, tenant: str | None = None,
                  graph_of: Inspect | None = None) -> list[dict[str, Any]]:
    """One ServeApp spec (a dict) per application; SpecError naming every field cuberay cannot honour.

    ``graph_of(import_path)``: the graph's deployments (DeploymentSchema dicts) where it can be imported here,
    else None; deployments the file does not list are added with their code's replicas.
    """
    refused = [f"{key} ({why})" for key, why in TOP_REFUSED.items() if key in config]
    unknown = sorted(set(config) - {"applications", *NO_EFFECT, *TOP_REFUSED})
    refused += [f"{key} (not a field of a Serve config file)" for key in unknown]
    apps = []
    for i, application in enumerate(config["applications"]):
        where = f"applications[{i}]"
        if not isinstance(application, Mapping):
            refused.append(f"{where} (an application is a mapping with name, route_prefix, import_path)")
            continue
        problems: list[str] = []
        apps.append(_app(application, where, tenant, graph_of, problems))
        refused += problems
    names = [a["metadata"]["name"] for a in apps]
    twice = sorted({n for n in names if names.count(n) > 1})
    refused += [f"applications.name {n!r} (two applications would be one ServeApp; rename one)" for n in twice]
    if refused:
        raise SpecError("cuberay cannot honour " + "; ".join(refused), file=file)
    return apps


def _app(application: Mapping[str, Any], where: str, tenant: str | None, graph_of: Inspect | None,
         problems: list[str]) -> dict[str, Any]:
    for key, why in APP_REFUSED.items():
        if key in application:
            problems.append(f"{where}.{key} ({why})")
    for key in sorted(set(application) - APP_KEYS - set(APP_REFUSED)):
        problems.append(f"{where}.{key} (not a field cuberay takes from a Serve application)")
    import_path = application.get("import_path")
    if not isinstance(import_path, str) or ":" not in import_path:
        problems.append(f"{where}.import_path (missing or not module:app: {import_path!r})")
        import_path = "missing:app"
    raw_name = str(application.get("name") or import_path.partition(":")[0].rpartition(".")[2])
    name = _NOT_IN_NAME.sub("-", raw_name.lower()).strip("-")[:63] or "app"
    route = application.get("route_prefix", "/")
    if route is None:
        problems.append(f"{where}.route_prefix (null: not served over HTTP; a ServeApp is served at a route)")
    resources: dict[str, Any] = {}
    deployments = [_deployment(d, f"{where}.deployments[{j}]", resources, problems)
                   for j, d in enumerate(application.get("deployments") or [])]
    listed = {d["name"] for d in deployments}
    for schema in (graph_of(import_path) if graph_of else None) or []:
        if schema["name"] not in listed:  # the code's settings, as Serve would deploy it
            deployments.append(_deployment(schema, f"{import_path} {schema['name']}", resources, problems))
    if not deployments:
        problems.append(f"{where}.deployments (none listed, and {import_path} cannot be imported here to list "
                        f"its graph; list every deployment with its replicas)")
    spec: dict[str, Any] = {"route_prefix": route or "/", "versions": [
        {"name": VERSION, "model": import_path, "weight": 100, "deployments": deployments}]}
    if resources:
        spec["resources"] = resources
    env, runtime_env = _runtime_env(application.get("runtime_env") or {}, where, problems)
    if env:
        spec["env"] = env
    if runtime_env:
        spec["runtime_env"] = runtime_env
    metadata: dict[str, Any] = {"name": name}
    if tenant:
        metadata["tenant"] = tenant
    return {"apiVersion": API_VERSION, "kind": "ServeApp", "metadata": metadata, "spec": spec}


def _deployment(item: Any, where: str, resources: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    if not isinstance(item, Mapping) or not item.get("name"):
        problems.append(f"{where} (a deployment is a mapping with its name)")
        return {"name": f"unnamed-{len(problems)}"}
    out: dict[str, Any] = {"name": str(item["name"])}
    replicas = item.get("num_replicas", 1)
    scaling = item.get("autoscaling_config")
    if replicas == "auto" or (scaling is not None and not isinstance(scaling, Mapping)):
        problems.append(f"{where}.num_replicas (\"auto\": give autoscaling_config {{min_replicas, max_replicas}}, "
                        f"which admission holds and borrows)")
    elif scaling:
        strange = sorted(set(scaling) - SCALING_KEYS)
        if strange:
            problems.append(f"{where}.autoscaling_config.{', '.join(strange)} (cuberay's autoscaling keeps Serve's "
                            f"replicas within the slots admission granted; it takes min_replicas, max_replicas "
                            f"and target_ongoing_requests)")
        low, high = int(scaling.get("min_replicas", 1) or 1), int(scaling.get("max_replicas", 1) or 1)
        out["replicas"] = low if low == high else {"min": low, "max": high}
        if scaling.get("target_ongoing_requests") is not None:
            out["target_ongoing_requests"] = scaling["target_ongoing_requests"]
    elif isinstance(replicas, int) and replicas >= 1:
        out["replicas"] = replicas
    else:
        problems.append(f"{where}.num_replicas ({replicas!r}: at least 1)")
    for key in ("user_config", "max_ongoing_requests"):
        if item.get(key) is not None:
            out[key] = item[key]
    _actor_options(item.get("ray_actor_options") or {}, where, resources, problems)
    owned = OWNED_OPTIONS - {"placement_group_bundles", "placement_group_strategy",
                             "placement_group_bundle_label_selector"}
    for key in sorted(set(item) - owned):
        if key.startswith("placement_group"):
            problems.append(f"{where}.{key} (cuberay places every replica on the nodes admission chose)")
        else:
            out.setdefault("options", {})[key] = item[key]
    return out


def _actor_options(options: Mapping[str, Any], where: str, resources: dict[str, Any],
                   problems: list[str]) -> None:
    """A ServeApp's replicas all ask for the same resources (its spec's), so the file's must agree."""
    for key, value in options.items():
        field = ACTOR_RESOURCES.get(key)
        if field is None:
            why = ("cuberay pins replicas to the nodes admission chose" if "label" in key or key == "resources"
                   else "set it in the application's runtime_env" if key == "runtime_env"
                   else "a ServeApp's replicas run with its spec's resources only")
            problems.append(f"{where}.ray_actor_options.{key} ({why})")
            continue
        amount = f"{int(value)}" if key == "memory" else f"{value:g}" if isinstance(value, (int, float)) else value
        if field in resources and resources[field] != amount:
            problems.append(f"{where}.ray_actor_options.{key} ({value!r}; another deployment asks for "
                            f"{resources[field]!r}: a ServeApp's replicas all have the same resources)")
        resources[field] = amount


def _runtime_env(runtime_env: Any, where: str, problems: list[str]) -> tuple[dict[str, str], dict[str, Any]]:
    if not isinstance(runtime_env, Mapping):
        problems.append(f"{where}.runtime_env (not a mapping)")
        return {}, {}
    env = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
    rest = {k: v for k, v in runtime_env.items() if k != "env_vars"}
    local = [k for k in ("working_dir", "py_modules") for v in _as_list(rest.get(k)) if "://" not in str(v)]
    for key in sorted(set(local)):
        problems.append(f"{where}.runtime_env.{key} (a local path; Serve's declarative config takes remote URIs "
                        f"only, e.g. https://.../code.zip or s3://...)")
    return env, rest


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]
