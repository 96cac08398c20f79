"""The request layer of `cuberay kube apply|status|delete`: what the official client sends.

No API server runs here, so a local HTTP endpoint (fake_apiserver.py) records the real
requests of the real ``kubernetes`` client; a live cluster is covered by tests/e2e.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from fake_apiserver import FakeApiServer  # noqa: E402  (tests/unit/kube is on sys.path via conftest)

from cuberay.errors import SpecError
from cuberay.kuberay.kube_client import Kube, api_client, order, status_row

RAYCLUSTER = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "vision", "namespace": "vision"},
              "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head", "image": "x"}]}}}}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision"}}
FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "local-gpu"},
          "spec": {"nodeLabels": {"cuberay.io/pool": "gpu"}}}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Kube]]:
    with FakeApiServer() as fake:
        yield fake, Kube(api_client(str(fake.kubeconfig(tmp_path))))


def test_apply_is_server_side_apply_with_field_manager(server: tuple[FakeApiServer, Kube]) -> None:
    fake, kube = server
    kube.apply(RAYCLUSTER)
    (req,) = fake.requests
    assert req.method == "PATCH"
    assert req.path == "/apis/ray.io/v1/namespaces/vision/rayclusters/vision"
    assert req.query == {"fieldManager": ["cuberay"], "fieldValidation": ["Strict"], "force": ["true"]}
    assert req.headers["content-type"] == "application/apply-patch+yaml"
    assert req.headers["authorization"] == "Bearer test-token"
    assert req.body == RAYCLUSTER


def test_apply_twice_sends_the_same_request(server: tuple[FakeApiServer, Kube]) -> None:
    fake, kube = server
    kube.apply(RAYCLUSTER)
    kube.apply(RAYCLUSTER)
    first, second = fake.requests
    assert (first.method, first.path, first.query, first.body) == (second.method, second.path, second.query,
                                                                   second.body)


def test_dry_run_is_server_side_and_stores_nothing(server: tuple[FakeApiServer, Kube]) -> None:
    fake, kube = server
    kube.apply(NAMESPACE, dry_run=True)
    (req,) = fake.requests
    assert req.path == "/api/v1/namespaces/vision"
    assert req.query["dryRun"] == ["All"]
    assert kube.get(NAMESPACE) is None


def test_cluster_scoped_custom_object_path(server: tuple[FakeApiServer, Kube]) -> None:
    fake, kube = server
    kube.apply(FLAVOR)
    assert fake.requests[0].path == "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/local-gpu"


def test_status_reads_conditions_and_absent_objects(server: tuple[FakeApiServer, Kube]) -> None:
    fake, kube = server
    assert status_row(RAYCLUSTER, kube.get(RAYCLUSTER))["state"] == "absent"
    kube.apply(RAYCLUSTER)
    fake.status_of["/apis/ray.io/v1/namespaces/vision/rayclusters/vision"] = {
        "state": "ready", "readyWorkerReplicas": 2, "desiredWorkerReplicas": 3,
        "conditions": [{"type": "HeadPodReady", "status": "True"}]}
    row = status_row(RAYCLUSTER, kube.get(RAYCLUSTER))
    assert row["state"] == "ready"
    assert row["detail"] == "workers 2/3 ready; HeadPodReady=True"
    assert fake.requests[-1].method == "GET"


def test_delete_is_foreground_and_idempotent(server: tuple[FakeApiServer, Kube]) -> None:
    fake, kube = server
    kube.apply(RAYCLUSTER)
    assert kube.delete(RAYCLUSTER) is True
    req = fake.requests[-1]
    assert (req.method, req.path) == ("DELETE", "/apis/ray.io/v1/namespaces/vision/rayclusters/vision")
    assert req.query.get("propagationPolicy") == ["Foreground"] or \
        (req.body or {}).get("propagationPolicy") == "Foreground"
    assert kube.delete(RAYCLUSTER) is False


def test_order_puts_namespaces_and_cluster_objects_first() -> None:
    kinds = [o["kind"] for o in order([RAYCLUSTER, FLAVOR, NAMESPACE])]
    assert kinds == ["Namespace", "ResourceFlavor", "RayCluster"]


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(SpecError, match="cannot apply apps/v1 Deployment"):
        order([{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}])
