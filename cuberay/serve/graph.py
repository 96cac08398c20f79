"""What a custom version's import path names, and the deployments of a bound application's graph.

A custom version's ``model`` is one of: a Serve deployment (``@serve.deployment class``), a plain class
(cuberay makes it a deployment), or a bound application (``app = Ingress.bind(Model.bind(...))``), which is
deployed as written, as its own Serve application whose deployments cuberay configures by name through
Serve's declarative config. The deployments of a graph are listed the way ``serve build`` lists them (the
names Serve gives them, their code's replica settings) as ``ray.serve.schema.DeploymentSchema`` dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cuberay.errors import SpecError

DEPLOYMENT, CLASS, BOUND_APP, OTHER = "deployment", "class", "bound application", "not a Serve object"


@dataclass(frozen=True)
class Found:
    """What an import path names: its kind and, for a bound application, its graph's deployments."""

    import_path: str
    kind: str
    deployments: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # DeploymentSchema dicts
    type_name: str = ""

    @property
    def names(self) -> list[str]:
        return [d["name"] for d in self.deployments]

    def describe(self) -> str:
        if self.kind != BOUND_APP:
            what = f" ({self.type_name})" if self.kind == OTHER else ""
            return f"{self.import_path}: {self.kind}{what}"
        parts = [f"{d['name']} ({replicas_text(d)})" for d in self.deployments]
        return f"{self.import_path}: bound application, {len(parts)} deployment(s): {', '.join(parts)}"


def replicas_text(schema: dict[str, Any]) -> str:
    scaling = schema.get("autoscaling_config")
    if scaling:
        return f"autoscaling {scaling.get('min_replicas', 1)}-{scaling.get('max_replicas', 1)}"
    count = schema.get("num_replicas", 1)
    return f"{count} replica{'s' if count != 1 else ''}"


def spec_replicas(schema: dict[str, Any]) -> int | dict[str, int]:
    """A graph deployment's replicas as a ServeApp spec writes them: a number, or {min, max} of its autoscaling."""
    scaling = schema.get("autoscaling_config")
    if scaling:
        low, high = int(scaling.get("min_replicas", 1) or 1), int(scaling.get("max_replicas", 1) or 1)
        return low if low == high else {"min": low, "max": high}
    count = schema.get("num_replicas", 1)
    return count if isinstance(count, int) and count >= 1 else 1


def inspect(import_path: str) -> Found:
    """Import ``import_path`` and say what it is. Raises what the import raises (the caller reports it)."""
    from ray.serve import Application
    from ray.serve.deployment import Deployment, deployment_to_schema

    from cuberay.serve.torch_model import import_object

    target = import_object(import_path)
    if isinstance(target, Application):
        # Serve's own listing of a graph, as `serve build` makes it (names deduplicated as Serve deploys them).
        from ray.serve._private.build_app import build_app

        built = build_app(target, name="inspect")
        listed = tuple(deployment_to_schema(d).model_dump(exclude_unset=True, mode="json")
                       for d in built.deployments)
        return Found(import_path, BOUND_APP, listed)
    if isinstance(target, Deployment):
        return Found(import_path, DEPLOYMENT)
    if isinstance(target, type):
        return Found(import_path, CLASS)
    return Found(import_path, OTHER, type_name=type(target).__name__)


def problem(found: Found, listed: list[str], where: str) -> str | None:
    """Why a version's ``deployments`` (names ``listed``; empty: none) do not fit what its model is, or None."""
    if found.kind == OTHER:
        return (f"{found.import_path} is {found.type_name!r}, not a Serve object; name a @serve.deployment, a "
                f"class, or a bound application (app = Deployment.bind(...))")
    if found.kind != BOUND_APP:
        if listed:
            return (f"{found.import_path} is a {found.kind}, not a bound application; remove {where}.deployments "
                    f"(its replicas are {where}.replicas)")
        return None
    missing = [n for n in found.names if n not in listed]
    strangers = [n for n in listed if n not in found.names]
    if not missing and not strangers:
        return None
    suggestion = ", ".join(f"{{name: {d['name']}, replicas: {spec_replicas(d)}}}".replace("'", "")
                           for d in found.deployments)
    said = []
    if missing:
        said.append(f"{where}.deployments does not list {', '.join(missing)}")
    if strangers:
        said.append(f"{where}.deployments lists {', '.join(strangers)}, which the graph does not have")
    return (f"{found.describe()}; {' and '.join(said)} (every deployment of the graph must be listed, so that admission "
            f"holds its replicas and pins them to the app's nodes); write deployments: [{suggestion}]")


def found_in_app(job: Any) -> list[str]:
    """`cuberay spec validate` of a ServeApp: each custom version's model, and SpecError for a graph whose
    deployments the spec does not list (ServeAppKind.code_found)."""
    check_graphs(job)
    return [f"{v.name}: {inspect(v.model).describe()}" for v in job.spec.versions
            if v.resolved_engine == "custom" and isinstance(v.model, str)]


def check_graphs(app: Any) -> None:
    """Every custom version's import path is what its spec says: a deployment or class, or a bound application
    whose graph's deployments are the ones listed. SpecError naming the version otherwise."""
    for i, version in enumerate(app.spec.versions):
        if version.resolved_engine != "custom" or not isinstance(version.model, str):
            continue
        where = f"spec.versions[{i}]"
        try:
            found = inspect(version.model)
        except Exception as err:  # noqa: BLE001 - the user's module: any failure to import it is theirs
            raise SpecError(f"version {version.name!r}: {version.model} cannot be imported ({type(err).__name__}: "
                            f"{err}); fix the module or the import path", path=f"{where}.model") from err
        wrong = problem(found, [d.name for d in version.deployments], where)
        if wrong:
            raise SpecError(f"version {version.name!r}: {wrong}", path=f"{where}.deployments")
