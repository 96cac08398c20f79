"""Live Kubernetes: the rendered manifests against a real API server with the real CRDs installed.

Opt-in, because no Kubernetes API server can run on the CI machines (the request layer is tested
in tests/unit/kube against a recording HTTP endpoint). Needs a kubeconfig whose cluster runs the
KubeRay operator 1.7 (and, for the Kueue case, Kueue 0.19), nodes labelled ``cuberay.io/pool``, and
the image of the repository Dockerfile pushed where the cluster can pull it::

    CUBERAY_E2E_K8S=1 CUBERAY_E2E_IMAGE=registry/cuberay:0.1.0 \\
        .venv/bin/python -m pytest tests/e2e/test_kube_live.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuberay.kuberay.kube_client import Kube, api_client, order, status_row
from cuberay.kuberay.labels import Scheduler
from cuberay.kuberay.render import all_manifests, render_platform
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.platform.spec import load_platform
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[2]
NEEDS = "a Kubernetes cluster with the KubeRay operator (kubeconfig), and CUBERAY_E2E_IMAGE"


def _objects(scheduler: Scheduler) -> list[dict]:
    opts = RenderOptions(scheduler=scheduler, image=os.environ.get("CUBERAY_E2E_IMAGE", "cuberay:0.1.0"))
    return [m.obj for m in all_manifests(render_platform(load_platform(REPO / "configs" / "platform.yaml"), opts))]


@pytest.mark.enabled_by("CUBERAY_E2E_K8S", NEEDS)
@pytest.mark.parametrize("scheduler", [Scheduler.none, Scheduler.kueue])
def test_server_side_dry_run_accepts_every_object(scheduler: Scheduler) -> None:
    kube = Kube(api_client())
    objs = order(_objects(scheduler))
    namespaces = [o for o in objs if o["kind"] == "Namespace"]
    try:
        for ns in namespaces:  # namespaced dry runs need their namespace to exist
            kube.apply(ns)
        for obj in objs:
            kube.apply(obj, dry_run=True)
    finally:
        for ns in namespaces:
            kube.delete(ns)


@pytest.mark.enabled_by("CUBERAY_E2E_K8S", NEEDS)
@pytest.mark.timeout(900)
def test_tenant_cluster_comes_up_and_goes() -> None:
    kube = Kube(api_client())
    mine = [o for o in _objects(Scheduler.none) if (o["metadata"].get("namespace") or o["metadata"]["name"]) ==
            "research"]
    cluster = next(o for o in mine if o["kind"] == "RayCluster")
    try:
        for obj in order(mine):
            kube.apply(obj)
        kube.apply(cluster)  # idempotent
        wait_for(lambda: status_row(cluster, kube.get(cluster))["state"] == "ready", 600, "the RayCluster ready")
    finally:
        for obj in reversed(order(mine)):
            kube.delete(obj)
