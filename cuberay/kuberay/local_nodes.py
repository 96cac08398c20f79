"""The node provider for a tenant's cluster on this machine: Ray's fake multi-node provider, with pod memory.

Ray's own ``FakeMultiNodeProvider`` (``ray.autoscaler._private.fake_multi_node.node_provider``, Ray 2.60,
Apache-2.0) starts each node the autoscaler asks for as real local Ray processes. It passes every resource but
CPU, GPU and the object store as a custom resource, which Ray refuses for ``memory``, so a node type with a memory
limit (every worker group ``cuberay kube render`` writes: the pod's memory limit) never starts. This subclass's
node start is Ray's (adapted from ``_create_node_with_resources_and_labels``) with one change: ``memory`` is the
node's memory, the way a pod's limit becomes its raylet's ``memory``. It is a copy rather than a wrapper because
the autoscaler starts nodes of several types at once, from several threads.
"""

from __future__ import annotations

import json
from typing import Any

import ray
import ray._private.node
import ray._private.parameter
from ray._common.network_utils import build_address
from ray._private import ray_constants
from ray.autoscaler._private.fake_multi_node import node_provider as fake
from ray.autoscaler.tags import (
    NODE_KIND_WORKER,
    STATUS_UP_TO_DATE,
    TAG_RAY_NODE_KIND,
    TAG_RAY_NODE_NAME,
    TAG_RAY_NODE_STATUS,
    TAG_RAY_USER_NODE_TYPE,
)


class LocalNodeProvider(fake.FakeMultiNodeProvider):
    """Ray's fake multi-node provider; a node type's ``memory`` is the node's memory, not a custom resource."""

    def _create_node_with_resources_and_labels(self, node_config: Any, tags: Any, count: int,
                                               resources: dict[str, Any], labels: dict[str, str]) -> None:
        resources = dict(resources)
        memory = resources.pop("memory", None)
        gcs = self._gcs_address or build_address(ray._private.services.get_node_ip_address(), 6379)
        with self.lock:
            node_type = tags[TAG_RAY_USER_NODE_TYPE]
            next_id = self._next_hex_node_id()
            params = ray._private.parameter.RayParams(
                min_worker_port=0, max_worker_port=0, dashboard_port=None, dashboard_agent_listen_port=0,
                num_cpus=resources.pop("CPU", 0), num_gpus=resources.pop("GPU", 0),
                object_store_memory=resources.pop("object_store_memory", None),
                memory=None if memory is None else int(memory),
                resources=resources, labels=labels, redis_address=gcs, gcs_address=gcs,
                env_vars={"RAY_OVERRIDE_NODE_ID_FOR_TESTING": next_id, "RAY_CLOUD_INSTANCE_ID": next_id,
                          "RAY_NODE_TYPE_NAME": node_type,
                          ray_constants.RESOURCES_ENVIRONMENT_VARIABLE: json.dumps(resources),
                          ray_constants.LABELS_ENVIRONMENT_VARIABLE: json.dumps(labels)})
            node = ray._private.node.Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
            self._nodes[next_id] = {"tags": {TAG_RAY_NODE_KIND: NODE_KIND_WORKER, TAG_RAY_USER_NODE_TYPE: node_type,
                                             TAG_RAY_NODE_NAME: next_id, TAG_RAY_NODE_STATUS: STATUS_UP_TO_DATE,
                                             **tags},
                                    "node": node}
