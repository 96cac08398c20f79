"""Rules the KubeRay operator, Kueue's webhook and the CRDs' CEL enforce, but the schemas cannot.

A manifest that breaks one is accepted by the API server and fails later, as an event or a
``ValidationFailed`` status (with Kueue the quota stays held). Each rule has a name, shown
in the problem, and a message with the fix. Rules that depend on the queueing system apply
when the object carries that system's queue label (``kueue.x-k8s.io/queue-name``,
``volcano.sh/queue-name``).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator

from cuberay.kuberay import labels as L
from cuberay.kuberay.problems import Problem, ident, json_path
from cuberay.kuberay.rules_topology import kueue_topology, volcano_hypernode

NAME_LIMITS = {"RayCluster": 53, "RayJob": 47, "RayService": 47}
KUEUE_MAX_WORKER_GROUPS = 17  # Kueue: at most 18 PodSets, one of them the head
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_RAY_RESOURCE_PARAMS = ("num-cpus", "num-gpus", "memory", "resources")

Found = Iterator[tuple[str, tuple[Any, ...], str]]  # (rule, path, message)


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    return _d(_d(obj.get("metadata")).get("labels"))


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    return _d(_d(obj.get("metadata")).get("annotations"))


def _cluster_specs(obj: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    spec = _d(obj.get("spec"))
    kind = obj.get("kind")
    if kind == "RayCluster":
        yield ("spec",), spec
    elif kind == "RayJob" and "rayClusterSpec" in spec:
        yield ("spec", "rayClusterSpec"), _d(spec["rayClusterSpec"])
    elif kind == "RayService" and "rayClusterConfig" in spec:
        yield ("spec", "rayClusterConfig"), _d(spec["rayClusterConfig"])


# ---------------------------------------------------------------- names

def names(obj: dict[str, Any]) -> Found:
    kind, name = ident(obj)
    if kind in NAME_LIMITS:
        limit = NAME_LIMITS[kind]
        if len(name) > limit:
            yield ("kuberay.name-length", ("metadata", "name"),
                   f"{kind} name {name!r} has {len(name)} characters; KubeRay allows at most {limit} (it derives "
                   f"pod and service names from it); shorten it")
        if not _DNS_1035.match(name):
            yield ("kuberay.name-dns1035", ("metadata", "name"),
                   f"{kind} name {name!r} is not a DNS-1035 label (lowercase letters, digits and '-', starting with "
                   f"a letter); rename it, e.g. {re.sub(r'[^a-z0-9-]+', '-', name.lower()).strip('-') or 'ray'}")


# ---------------------------------------------------------------- cluster specs

def cluster(obj: dict[str, Any]) -> Found:
    for base, spec in _cluster_specs(obj):
        yield from _cluster_spec(obj, base, spec)


def _containers(group: dict[str, Any]) -> list[Any]:
    return _l(_d(_d(group.get("template")).get("spec")).get("containers"))


def _cluster_spec(obj: dict[str, Any], base: tuple[Any, ...], spec: dict[str, Any]) -> Found:
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    head = _d(spec.get("headGroupSpec"))
    groups = [(("workerGroupSpecs", i), _d(g)) for i, g in enumerate(_l(spec.get("workerGroupSpecs")))]
    for where, group in [(("headGroupSpec",), head), *groups]:
        if not _containers(group):
            yield ("kuberay.containers", (*base, *where, "template", "spec", "containers"),
                   "the group's pod template has no container; add the Ray container (it must be the first)")
        yield from _ray_params(base, where, group)
    for where, group in groups:
        yield from _replicas(base, where, group, autoscaling)
    yield from _gcs_ft(obj, base, spec, head, [g for _, g in groups])
    if autoscaling and _d(spec.get("autoscalerOptions")).get("version", "v2") == "v2":
        for where, group in [(("headGroupSpec",), head), *groups]:
            policy = _d(_d(group.get("template")).get("spec")).get("restartPolicy")
            if policy not in (None, "Never"):
                yield ("kuberay.autoscaler-v2-restart-policy", (*base, *where, "template", "spec", "restartPolicy"),
                       f"autoscaler v2 needs pods with restartPolicy Never or unset, not {policy!r}; remove it")


def _ray_params(base: tuple[Any, ...], where: tuple[Any, ...], group: dict[str, Any]) -> Found:
    params = _d(group.get("rayStartParams"))
    if "labels" in params:
        yield ("kuberay.ray-start-labels", (*base, *where, "rayStartParams", "labels"),
               "rayStartParams.labels is not allowed; set the group's .labels instead")
    if group.get("resources") and any(p in params for p in _RAY_RESOURCE_PARAMS):
        both = ", ".join(p for p in _RAY_RESOURCE_PARAMS if p in params)
        yield ("kuberay.ray-resources-twice", (*base, *where, "resources"),
               f"Ray resources are set both in .resources and in rayStartParams ({both}); keep one")


def _replicas(base: tuple[Any, ...], where: tuple[Any, ...], group: dict[str, Any], autoscaling: bool) -> Found:
    path = (*base, *where)
    low, high, replicas = group.get("minReplicas"), group.get("maxReplicas"), group.get("replicas")
    if not autoscaling and (low is None or high is None):
        yield ("kuberay.min-max-required", path, "without autoscaling each worker group must set both minReplicas "
                                                 "and maxReplicas")
    nums = [v for v in (low, high, replicas) if isinstance(v, int)]
    if any(v < 0 for v in nums):
        yield ("kuberay.replicas-range", path, "replicas, minReplicas and maxReplicas must be >= 0")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        yield ("kuberay.replicas-range", (*path, "minReplicas"), f"minReplicas {low} is above maxReplicas {high}; "
                                                                 f"lower minReplicas or raise maxReplicas")
    elif isinstance(replicas, int) and ((isinstance(low, int) and replicas < low) or
                                        (isinstance(high, int) and replicas > high)):
        yield ("kuberay.replicas-range", (*path, "replicas"), f"replicas {replicas} is outside [minReplicas {low}, "
                                                              f"maxReplicas {high}]; the operator clamps it, set it "
                                                              f"inside")


def _env_names(groups: list[dict[str, Any]]) -> set[str]:
    return {str(_d(e).get("name")) for g in groups for c in _containers(g) for e in _l(_d(c).get("env"))}


def _gcs_ft(obj: dict[str, Any], base: tuple[Any, ...], spec: dict[str, Any], head: dict[str, Any],
            workers: list[dict[str, Any]]) -> Found:
    ft = spec.get("gcsFaultToleranceOptions")
    annotations = _annotations(obj)
    params = [_d(g.get("rayStartParams")) for g in [head, *workers]]
    if any("redis-username" in p for p in params):
        yield ("kuberay.gcs-ft-conflict", (*base, "headGroupSpec", "rayStartParams", "redis-username"),
               "redis-username is not allowed in rayStartParams; use gcsFaultToleranceOptions.redisUsername")
    env = _env_names([head, *workers])
    if ft is None:
        if "RAY_REDIS_ADDRESS" in env and annotations.get("ray.io/ft-enabled") != "true":
            yield ("kuberay.gcs-ft-conflict", (*base, "headGroupSpec"), "RAY_REDIS_ADDRESS is set but GCS fault "
                                                                        "tolerance is off; set gcsFaultToleranceOptions")
        return
    where = (*base, "gcsFaultToleranceOptions")
    if "ray.io/ft-enabled" in annotations:
        yield ("kuberay.gcs-ft-conflict", where, "the ray.io/ft-enabled annotation cannot be combined with "
                                                 "gcsFaultToleranceOptions; remove the annotation")
    if "ray.io/external-storage-namespace" in annotations:
        yield ("kuberay.gcs-ft-conflict", where, "use gcsFaultToleranceOptions.externalStorageNamespace instead of "
                                                 "the ray.io/external-storage-namespace annotation")
    if any("redis-password" in p for p in params):
        yield ("kuberay.gcs-ft-conflict", where, "redis-password in rayStartParams conflicts with "
                                                 "gcsFaultToleranceOptions; use its redisPassword")
    for name in ("REDIS_PASSWORD", "RAY_REDIS_ADDRESS") :
        if name in env:
            yield ("kuberay.gcs-ft-conflict", where, f"env {name} conflicts with gcsFaultToleranceOptions; remove it")


# ---------------------------------------------------------------- RayJob / RayService

def rayjob(obj: dict[str, Any]) -> Found:
    if obj.get("kind") != "RayJob":
        return
    spec = _d(obj.get("spec"))
    has_cluster, selector = "rayClusterSpec" in spec, bool(spec.get("clusterSelector"))
    if has_cluster == selector:
        yield ("rayjob.cluster-source", ("spec",), "set exactly one of rayClusterSpec (a new cluster) and "
                                                   "clusterSelector (an existing one)")
    shutdown = spec.get("shutdownAfterJobFinishes") is True
    if spec.get("suspend") is True and not shutdown:
        yield ("rayjob.suspend-needs-shutdown", ("spec", "suspend"), "suspend needs shutdownAfterJobFinishes: true")
    if (spec.get("ttlSecondsAfterFinished") or 0) > 0 and not shutdown:
        yield ("rayjob.ttl-needs-shutdown", ("spec", "ttlSecondsAfterFinished"),
               "ttlSecondsAfterFinished > 0 needs shutdownAfterJobFinishes: true")
    mode = spec.get("submissionMode", "K8sJobMode")
    if selector:
        for key in ("suspend", "backoffLimit"):
            if spec.get(key):
                yield ("rayjob.cluster-selector-excludes", ("spec", key), f"{key} cannot be used with clusterSelector")
        if mode == "SidecarMode":
            yield ("rayjob.cluster-selector-excludes", ("spec", "submissionMode"),
                   "SidecarMode cannot be used with clusterSelector")
    if mode == "InteractiveMode" and spec.get("backoffLimit"):
        yield ("rayjob.interactive-backoff", ("spec", "backoffLimit"), "InteractiveMode excludes backoffLimit")
    if mode == "SidecarMode" and ("submitterPodTemplate" in spec or "submitterConfig" in spec):
        yield ("rayjob.sidecar-submitter", ("spec", "submissionMode"),
               "SidecarMode excludes submitterPodTemplate and submitterConfig")
    if mode not in ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"):
        yield ("rayjob.submission-mode", ("spec", "submissionMode"), f"unknown submissionMode {mode!r}; use "
                                                                     f"K8sJobMode, HTTPMode, InteractiveMode or "
                                                                     f"SidecarMode")
    for key, low in (("activeDeadlineSeconds", 1), ("preRunningDeadlineSeconds", 1), ("backoffLimit", 0)):
        value = spec.get(key)
        if isinstance(value, int) and value < low:
            yield ("rayjob.positive", ("spec", key), f"{key} is {value}; it must be >= {low}")
    if "deletionStrategy" in spec and shutdown:
        yield ("rayjob.deletion-strategy", ("spec", "deletionStrategy"),
               "deletionStrategy cannot be combined with shutdownAfterJobFinishes; use one")


def rayservice(obj: dict[str, Any]) -> Found:
    if obj.get("kind") != "RayService":
        return
    spec = _d(obj.get("spec"))
    kind = _d(spec.get("upgradeStrategy")).get("type")
    if kind is not None and kind not in ("NewCluster", "NewClusterWithIncrementalUpgrade", "None"):
        yield ("rayservice.upgrade-strategy", ("spec", "upgradeStrategy", "type"),
               f"unknown upgradeStrategy.type {kind!r}; use NewCluster, NewClusterWithIncrementalUpgrade or None")
    delay = spec.get("rayClusterDeletionDelaySeconds")
    if isinstance(delay, int) and delay < 0:
        yield ("rayservice.deletion-delay", ("spec", "rayClusterDeletionDelaySeconds"), "must be >= 0")


# ---------------------------------------------------------------- Kueue and Volcano admission

def kueue_ray(obj: dict[str, Any]) -> Found:
    if L.KUEUE_QUEUE not in _labels(obj) or obj.get("kind") not in NAME_LIMITS:
        return
    for base, spec in _cluster_specs(obj):
        groups = _l(spec.get("workerGroupSpecs"))
        for i, group in enumerate(groups):
            if _d(group).get("groupName") == "head":
                yield ("kueue.head-group-name", (*base, "workerGroupSpecs", i, "groupName"),
                       "Kueue reserves the PodSet name 'head'; rename the worker group")
        if len(groups) > KUEUE_MAX_WORKER_GROUPS:
            yield ("kueue.max-worker-groups", (*base, "workerGroupSpecs"),
                   f"{len(groups)} worker groups; Kueue admits at most {KUEUE_MAX_WORKER_GROUPS} (18 PodSets with "
                   f"the head); merge groups")
        if spec.get("enableInTreeAutoscaling") is True and _annotations(obj).get(L.KUEUE_ELASTIC) != "true":
            yield ("kueue.autoscaling-needs-elastic-job", (*base, "enableInTreeAutoscaling"),
                   f"Kueue rejects autoscaling unless the object is annotated {L.KUEUE_ELASTIC}: \"true\" (with the "
                   f"ElasticJobsViaWorkloadSlices gate); add it or turn autoscaling off")
    if obj.get("kind") == "RayJob":
        spec = _d(obj.get("spec"))
        if spec.get("clusterSelector"):
            yield ("kueue.rayjob-cluster-selector", ("spec", "clusterSelector"),
                   "Kueue does not manage a RayJob that uses an existing cluster (clusterSelector); give it a "
                   "rayClusterSpec, or drop the queue label")
        if spec.get("shutdownAfterJobFinishes") is not True:
            yield ("kueue.rayjob-shutdown", ("spec", "shutdownAfterJobFinishes"),
                   "Kueue needs shutdownAfterJobFinishes: true on a RayJob, or the cluster keeps the quota")


def volcano_ray(obj: dict[str, Any]) -> Found:
    if L.VOLCANO_QUEUE in _labels(obj) and obj.get("kind") == "RayJob" and _d(obj.get("spec")).get("clusterSelector"):
        yield ("volcano.rayjob-cluster-selector", ("spec", "clusterSelector"),
               "Volcano gang scheduling does not support a RayJob on an existing cluster (clusterSelector); give it "
               "a rayClusterSpec")


def kueue_cluster_queue(obj: dict[str, Any]) -> Found:
    """The CEL rules of Kueue's ClusterQueue CRD that generated queues can break."""
    if obj.get("kind") != "ClusterQueue":
        return
    spec = _d(obj.get("spec"))
    cohort = spec.get("cohortName") or spec.get("cohort")
    for g, group in enumerate(_l(spec.get("resourceGroups"))):
        covered = _l(_d(group).get("coveredResources"))
        for f, flavor in enumerate(_l(_d(group).get("flavors"))):
            flavor = _d(flavor)
            listed = [_d(r).get("name") for r in _l(flavor.get("resources"))]
            path = ("spec", "resourceGroups", g, "flavors", f)
            if listed != covered:
                missing = [r for r in covered if r not in listed]
                extra = [r for r in listed if r not in covered]
                detail = (f"missing {', '.join(missing)}" if missing else "") + \
                    ("; " if missing and extra else "") + (f"not covered: {', '.join(extra)}" if extra else "")
                yield ("kueue.flavor-covers-resources", (*path, "resources"),
                       f"flavor {flavor.get('name')!r} must list exactly the coveredResources {covered} in that "
                       f"order ({detail or 'order differs'}); a resource it lacks gets nominalQuota 0")
            for r, item in enumerate(_l(flavor.get("resources"))):
                for key in ("borrowingLimit", "lendingLimit"):
                    if _d(item).get(key) is not None and not cohort:
                        yield (f"kueue.{'borrowing' if key == 'borrowingLimit' else 'lending'}-limit-needs-cohort",
                               (*path, "resources", r, key),
                               f"{key} needs the ClusterQueue to be in a cohort; set spec.cohortName or remove it")
    preemption = _d(spec.get("preemption"))
    if preemption.get("reclaimWithinCohort", "Never") == "Never" and \
            _d(preemption.get("borrowWithinCohort")).get("policy", "Never") != "Never":
        yield ("kueue.reclaim-never-borrow", ("spec", "preemption", "borrowWithinCohort"),
               "borrowWithinCohort needs reclaimWithinCohort other than Never")


RULES: tuple[Callable[[dict[str, Any]], Found], ...] = (names, cluster, rayjob, rayservice, kueue_ray, volcano_ray,
                                                        kueue_cluster_queue, kueue_topology, volcano_hypernode)


def check_rules(obj: dict[str, Any]) -> list[Problem]:
    """Every operator-only rule ``obj`` breaks."""
    kind, name = ident(obj)
    return [Problem(rule, kind, name, json_path(path), message) for check in RULES for rule, path, message in check(obj)]
