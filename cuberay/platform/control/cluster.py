"""What the controller needs of the cluster it runs on, in one place: Ray's, or another for tests.

The admission core (queue, ledger, store, rules) is Ray-free; these are the calls that reach the cluster: its
nodes and what is free on them, its key-value store (job-id floors, a live-reloaded platform file), the Ray
Jobs API the drivers run on, the small-job runner, Serve's REST API and the autoscaler. :class:`RayCluster`
is the real one; a controller built with another (``Controller`` takes ``cluster=``) runs in a plain process
with no Ray at all, which is how the unit tier checks the client and the CLI against a real controller
(tests/unit/local_cluster.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol

from cuberay.platform.control.ids import KV_NAMESPACE


class Cluster(Protocol):
    def kv_get(self, key: bytes) -> bytes | None: ...
    def kv_put(self, key: bytes, value: bytes) -> None: ...
    def kv_del(self, key: bytes) -> None: ...
    def node_id(self) -> str:
        """The node the controller runs on (the head)."""
    def nodes(self) -> list[dict[str, Any]]:
        """Every node as ``ray.nodes()`` lists it (NodeID, Alive, Resources, Labels), and ``Draining``: True for
        a node being drained."""
    def available(self) -> dict[str, dict[str, float]]:
        """Node id -> resources free on it now, whoever holds the rest."""
    def dashboard_url(self) -> str: ...
    def launcher(self, max_drivers: int) -> Any:
        """The Ray Jobs launcher of the job drivers (control/launcher.py's interface)."""
    def small_runs(self, storage_of: Callable[[str], Path], wake: Callable[[], None],
                   start: Callable[[str], Any] | None = None) -> Any:
        """The controller's side of the small-job runner (control/small.py), or None without one; ``start``
        creates the runner on a node (or returns the running one)."""
    def serve_rest(self) -> Any:
        """Serve's REST API (control/serve_rest.py's interface)."""
    def request_resources(self, bundles: list[dict[str, float]], selectors: list[dict[str, str]]) -> None:
        """Ask the autoscaler for nodes."""


class RayCluster:
    """The Ray cluster this process (the controller actor) runs in."""

    def kv_get(self, key: bytes) -> bytes | None:
        from ray.experimental import internal_kv

        return internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)

    def kv_put(self, key: bytes, value: bytes) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_put(key, value, overwrite=True, namespace=KV_NAMESPACE)

    def kv_del(self, key: bytes) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_del(key, namespace=KV_NAMESPACE)

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def nodes(self) -> list[dict[str, Any]]:
        import ray
        from ray._private import state as ray_state

        # A node Ray's autoscaler has begun to remove as idle is still alive for a while, and a gang admitted
        # onto it would lose it before its workers start: Ray lists draining nodes apart.
        draining = ray_state.state.get_draining_nodes()
        return [{**n, "Draining": n["NodeID"] in draining} for n in ray.nodes()]

    def available(self) -> dict[str, dict[str, float]]:
        from ray._private import state as ray_state

        return ray_state.available_resources_per_node()

    def dashboard_url(self) -> str:
        from cuberay.platform.control.launcher import cluster_dashboard_url

        return cluster_dashboard_url()

    def launcher(self, max_drivers: int) -> Any:
        from cuberay.platform.control.launcher import Launcher

        return Launcher(self.dashboard_url(), max_drivers=max_drivers)

    def small_runs(self, storage_of: Callable[[str], Path], wake: Callable[[], None],
                   start: Callable[[str], Any] | None = None) -> Any:
        from cuberay.platform.control.small import SmallRuns

        return SmallRuns(storage_of, wake, self.node_id(), start)

    def serve_rest(self) -> Any:
        from cuberay.platform.control.serve_rest import ServeRest

        return ServeRest(self.dashboard_url())

    def request_resources(self, bundles: list[dict[str, float]], selectors: list[dict[str, str]]) -> None:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=bundles, bundle_label_selectors=selectors)
