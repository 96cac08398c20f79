"""Serving decisions (pure): the entries of Serve's declarative config, whether a write held, where a rollback goes.

A serving app is one entry of ``ServeDeploySchema.applications`` (the shape KubeRay's
RayService takes as ``serveConfigV2``). Its traffic config (weights, mirror, rate limit,
sticky header) is the ``user_config`` of its ingress deployment, the entry's first, so
new weights are a config change Serve applies in the running replicas. The controller's
serving component (``control/serving.py``) is the only writer of that config; the
workload side (``cuberay/serve``) builds entries and reads figures. A version that is a
bound application is an entry of its own beside the app's (its "companion", carried in
the app's plan as ``versions[i].app``): it is written, replaced and removed with the app.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Iterable, Mapping, Sequence

from cuberay.errors import CuberayError, NotFoundError, SpecError
from cuberay.platform.spec.serve import MAX_STEP_TIMEOUT_S

TRAFFIC_KEYS = frozenset({"weights", "mirror", "rate_limit", "sticky_header"})  # the ingress user_config
DEPLOY, ROLLOUT, ROLLBACK, TRAFFIC, DELETE = "deploy", "rollout", "rollback", "traffic", "delete"
CHANGE_ACTIONS = (ROLLOUT, ROLLBACK, TRAFFIC)  # what a traffic change may be recorded as
_FIRST_STEP = re.compile(r": step 1( of \d+)?$")


# ---------------------------------------------------------------- entries

def applications_of(details: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The declarative entries in Serve's details (apps deployed with ``serve.run`` have none)."""
    apps = (details.get("applications") or {}).values()
    return [a["deployed_app_config"] for a in apps if a.get("deployed_app_config")]


def companions(entry: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The Serve app entries of an app entry's bound-application versions (none for most apps)."""
    plan = ((entry or {}).get("args") or {}).get("plan") or {}
    versions = plan.get("versions") if isinstance(plan, Mapping) else None
    return [copy.deepcopy(v["app"]) for v in versions or [] if isinstance(v, Mapping) and v.get("app")]


def group(entry: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """What one cuberay app is on Serve: its entry and its companions."""
    return [] if entry is None else [dict(entry), *companions(entry)]


def merged(applications: Iterable[dict[str, Any]], app: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """A full ServeDeploySchema: the other apps as they are, ``app`` (and its companions) added or replacing
    ``name`` and the companions it had (None: removed)."""
    applications = list(applications)
    old = next((a for a in applications if a["name"] == name), None)
    gone = {name, *(c["name"] for c in companions(old)), *(c["name"] for c in companions(app))}
    others = [a for a in applications if a["name"] not in gone]
    return {"applications": others + group(app)}


def has_traffic(entry: Mapping[str, Any]) -> bool:
    """Whether the entry carries a cuberay traffic config (a vLLM app has none)."""
    return bool(entry.get("deployments"))


def traffic_of(entry: Mapping[str, Any]) -> dict:
    """The traffic config (ingress user_config) of an app entry."""
    return copy.deepcopy(entry["deployments"][0]["user_config"])


def with_traffic(entry: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """The same app entry with traffic keys replaced (e.g. ``weights``): only ``user_config`` changes."""
    new = copy.deepcopy(dict(entry))
    new["deployments"][0]["user_config"].update(copy.deepcopy(changes))
    return new


def normalized(value: Any) -> Any:
    """``value`` as Serve reports it back: JSON types only (tuples become lists)."""
    return json.loads(json.dumps(value))


def route_holder(applications: Iterable[Mapping[str, Any]], name: str, route: str) -> str | None:
    """The other app that already serves ``route`` (Serve would hand it over silently), or None."""
    return next((a["name"] for a in applications if a.get("name") != name and a.get("route_prefix") == route), None)


def deploy_entry(entry: dict[str, Any], deployed: Mapping[str, Any] | None,
                 remembered: Mapping[str, float] | None) -> dict[str, Any]:
    """What a driver's entry is written as: its models and replicas with the weights the app has now.

    A running app keeps its deployed weights (a resize must not undo a rollout that moved them meanwhile); a
    new attempt gets the weights of its last recorded change; a first deploy the spec's.
    """
    if not has_traffic(entry):
        return entry
    if deployed is not None and has_traffic(deployed):
        return with_traffic(entry, weights=traffic_of(deployed)["weights"])
    if remembered:
        return with_traffic(entry, weights=dict(remembered))
    return entry


def lost(written: Sequence[Mapping[str, Any]], reported: Sequence[Mapping[str, Any]],
         removed: str | Iterable[str] | None = None) -> str | None:
    """Why what Serve reports is not what was just written (a lost write, another writer), or None."""
    by_name = {a["name"]: a for a in reported}
    for app in written:
        got = by_name.get(app["name"])
        if got is None:
            return f"app {app['name']!r} is missing"
        if not _within(app, got):
            return f"app {app['name']!r} is not what was written"
    for name in [removed] if isinstance(removed, str) else removed or ():
        if name in by_name:
            return f"app {name!r} is still deployed"
    return None


def _within(written: Any, reported: Any) -> bool:
    """Every value written is reported unchanged (Serve may add defaults of its own)."""
    if isinstance(written, Mapping):
        return isinstance(reported, Mapping) and all(k in reported and _within(v, reported[k])
                                                     for k, v in written.items())
    if isinstance(written, (list, tuple)):
        return (isinstance(reported, (list, tuple)) and len(written) == len(reported)
                and all(_within(a, b) for a, b in zip(written, reported)))
    return bool(written == reported)


# ---------------------------------------------------------------- traffic changes

def check_traffic(changes: Mapping[str, Any], versions: Sequence[str]) -> dict[str, Any]:
    """A traffic change as it may be applied: known keys, weights of the app's versions summing to 100."""
    unknown = sorted(set(changes) - TRAFFIC_KEYS)
    if unknown:
        raise SpecError(f"traffic keys {unknown} are not ones a serving app has ({', '.join(sorted(TRAFFIC_KEYS))})")
    out = dict(changes)
    if "weights" in changes:
        out["weights"] = check_weights(changes["weights"], versions)
    return out


def check_weights(weights: Mapping[str, Any], versions: Sequence[str]) -> dict[str, float]:
    """Percentages for the app's versions that sum to 100; versions not named get 0."""
    strangers = sorted(set(weights) - set(versions))
    if strangers:
        raise SpecError(f"weights name versions {strangers} the app does not have ({', '.join(versions)})")
    bad = {k: v for k, v in weights.items()
           if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100}
    if bad:
        raise SpecError(f"weights must be percentages from 0 to 100, got {bad}")
    total = sum(weights.values())
    if abs(total - 100) > 1e-6:
        raise SpecError(f"weights {dict(weights)} sum to {total:g}; they must sum to 100")
    return {v: weights.get(v, 0) for v in versions}


def step_note(target: str, number: int, total: int) -> str:
    """How a rollout step is recorded; ``starts_rollout`` recognises its first step by it."""
    return f"rollout to {target}: step {number} of {total}"


def starts_rollout(change: Any) -> bool:
    return change.action == ROLLOUT and bool(_FIRST_STEP.search(change.note or ""))


def rollback_target(changes: Sequence[Any], current: Mapping[str, float], to: int | None = None
                    ) -> tuple[dict[str, float], str]:
    """(weights, note) of a rollback. ``changes``: the running deployment's traffic history (records with ``id``,
    ``action``, ``weights``, ``note``), oldest first.

    ``to``: the weights of that change. Without: the weights before the app's last rollout, or, when it has had
    none, before its last change after its deploy.
    """
    if to is not None:
        found = next((c for c in changes if c.id == to), None)
        if found is None:
            raise NotFoundError(f"change {to} is not one of the running deployment's "
                                f"({', '.join(str(c.id) for c in changes) or 'none'}); `cuberay serve history APP` "
                                f"lists them (an earlier deployment's changes cannot be restored)")
        if found.action == DELETE or not found.weights:
            raise SpecError(f"change {to} ({found.action}) has no weights to restore; pick another from "
                            f"`cuberay serve history APP`", path="--to")
        return dict(found.weights), f"manual rollback to change {to}"
    own = list(changes)
    starts = [i for i, c in enumerate(own) if starts_rollout(c)]
    others = [i for i, c in enumerate(own) if c.action not in (DEPLOY, DELETE)]
    if not starts and not others:
        raise CuberayError(f"nothing to roll back to: the app has had no traffic change since it was deployed "
                           f"with {dict(current)}")
    index, what = (starts[-1], "its last rollout") if starts else (others[-1], "its last change")
    earlier = [c for c in own[:index] if c.weights and c.action != DELETE]
    if not earlier:
        raise CuberayError(f"no weights are recorded before {what} (change {own[index].id}); pick a change with "
                           f"`--to ID` from `cuberay serve history APP`")
    target = dict(earlier[-1].weights)
    if target == dict(current):
        raise CuberayError(f"the app already has the weights it had before {what} ({target}); to restore other "
                           f"weights pick a change with `--to ID` from `cuberay serve history APP`")
    return target, f"manual rollback to the weights before {what} (change {own[index].id})"


# ---------------------------------------------------------------- live figures

# The longest window a router's figures cover: it keeps a rollout step's samples, up to a step's longest timeout.
STATS_WINDOW_MAX_S = MAX_STEP_TIMEOUT_S


def stats_note(state: str, engines: Iterable[str]) -> str | None:
    """Why an app has no live figures to read from its router, or None when it has (it runs cuberay's router)."""
    if state != "RUNNING":
        return f"the app is {state}, not RUNNING: figures come from its router while it serves"
    if "vllm" in set(engines):
        return ("served by Ray Serve LLM without cuberay's router: its figures are Ray Serve's own metrics "
                "(ray_serve_* on Ray's Prometheus endpoint)")
    return None


def figures(raw: Mapping[str, Any], window_s: float) -> dict[str, Any]:
    """One version's figures as the router reports them (cuberay/serve/metrics.py), with the window's rate."""
    count = int(raw.get("count") or 0)
    return {"requests": int(raw.get("requests") or 0), "errors": int(raw.get("errors") or 0),
            "mirrored": int(raw.get("mirrored") or 0), "count": count, "rate_per_s": count / window_s,
            "error_rate": float(raw.get("error_rate") or 0.0), "p50_ms": raw.get("p50_ms"),
            "p99_ms": raw.get("p99_ms")}
