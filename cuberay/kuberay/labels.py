"""Names, labels and annotations shared by the renderers, the rules and the client."""

from __future__ import annotations

import enum
import re

import cuberay
from cuberay.platform.policy.autoscale import ENV_WORKER_GROUPS  # noqa: F401  (the head's env, read there)

RAY_VERSION = "2.60.0"  # must match the ray pin in pyproject.toml and the Dockerfile (a unit test checks)
DEFAULT_IMAGE = f"cuberay:{cuberay.__version__}"  # built by the repository's Dockerfile
FIELD_MANAGER = "cuberay"

MANAGED_BY = "app.kubernetes.io/managed-by"
TENANT = "cuberay.io/tenant"
PLATFORM = "cuberay.io/platform"

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"
KUEUE_ELASTIC = "kueue.x-k8s.io/elastic-job"
VOLCANO_QUEUE = "volcano.sh/queue-name"
RAY_PRIORITY_CLASS = "ray.io/priority-class-name"
NAMESPACE_NAME = "kubernetes.io/metadata.name"

CONFIG_DIR = "/etc/cuberay"
PLATFORM_KEY = "platform.yaml"
JOB_KEY = "job.yaml"


class Scheduler(str, enum.Enum):
    """Which quota/gang mechanism the manifests are written for."""

    kueue = "kueue"
    volcano = "volcano"
    none = "none"


def base_labels(platform: str, tenant: str | None = None) -> dict[str, str]:
    labels = {MANAGED_BY: "cuberay", PLATFORM: platform}
    if tenant:
        labels[TENANT] = tenant
    return labels


def priority_class(platform: str, priority: int) -> str:
    """WorkloadPriorityClass / PriorityClass name of a tenant priority: ``local-priority-10``."""
    return f"{platform}-priority-{priority}" if priority >= 0 else f"{platform}-priority-minus-{-priority}"


def flavor(platform: str, pool: str) -> str:
    """ResourceFlavor name of a node pool (cluster-scoped, so prefixed with the platform)."""
    return f"{platform}-{pool}"


def group_name(pool: str) -> str:
    """Worker group name of a pool; Kueue reserves ``head`` for the head PodSet."""
    return "head-pool" if pool == "head" else pool


def volume_name(text: str) -> str:
    """A DNS-1123 label from a PVC or path name."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return name or "volume"


def taint_parts(taint: str) -> tuple[str, str | None, str]:
    """``key=value:Effect`` -> (key, value or None, effect)."""
    key_value, _, effect = taint.rpartition(":")
    key, _, value = key_value.partition("=")
    return key, value or None, effect
