"""The nodes of a replay: :class:`NodeSpec`, uniform clusters, and cluster files (``cuberay sim --cluster``).

A cluster file lists node groups; each group is ``count`` identical nodes::

    nodes:
      - name: a100
        count: 8
        resources: {cpu: "64", memory: 512Gi, gpu: "8(A100)", rdma: "1(ib)"}
        labels: {cuberay.io/rdma-domain: r1}

Resources use the node grammar of the platform file (``NodeResources``), so a
node's capacity comes out in Ray's names (``CPU``, ``memory`` in bytes, ``GPU``,
``rdma``) and its card model and RDMA fabric become the labels that constrained
workers select on (``ray.io/accelerator-type``, ``cuberay.io/rdma``), as the live
cluster labels them. Each node also gets ``cuberay.io/pool: <name>`` unless the
group's labels set it. A platform file (``kind: Platform``) works too: its
``node_pools`` become the nodes.

Pure: no Ray, no Kubernetes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pydantic import Field, ValidationError

import cuberay.platform.spec.resources as res
from cuberay.errors import SpecError
from cuberay.platform.spec import (
    Labels,
    Name,
    NodePool,
    NodeResources,
    SpecModel,
    load_platform,
)
from cuberay.platform.spec.documents import Document, one_document, read_documents, require_mapping
from cuberay.platform.spec.load import field_names, spec_error


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One simulated node: its id, capacity in Ray's resource names, and labels."""

    id: str
    capacity: Mapping[str, float]
    labels: Mapping[str, str] = field(default_factory=dict)


def uniform_cluster(nodes: int, gpus_per_node: int, cpus_per_node: float | None = None,
                    memory_per_node: float | None = None) -> list[NodeSpec]:
    """``nodes`` identical nodes. CPUs and memory default to plenty (GPU-bound traces)."""
    cap = {res.GPU: float(gpus_per_node), res.CPU: float(cpus_per_node or 8 * max(gpus_per_node, 1)),
           res.MEMORY: float(memory_per_node or 64 * 2**30 * max(gpus_per_node, 1))}
    return [NodeSpec(f"node-{i:04d}", dict(cap)) for i in range(nodes)]


BLOCK_LABEL, RACK_LABEL = "cuberay.io/block", "cuberay.io/rack"


def racked_cluster(blocks: int, racks_per_block: int, hosts_per_rack: int, gpus_per_node: int = 8,
                   cpus_per_node: float | None = None, memory_per_node: float | None = None) -> list[NodeSpec]:
    """A uniform cluster in racks and blocks: nodes ``b<i>-r<j>-h<k>`` labelled ``cuberay.io/block`` and
    ``cuberay.io/rack`` (rack names repeat across blocks, as Kueue's convention allows)."""
    nodes = uniform_cluster(blocks * racks_per_block * hosts_per_rack, gpus_per_node, cpus_per_node, memory_per_node)
    out = []
    for i, node in enumerate(nodes):
        b, rest = divmod(i, racks_per_block * hosts_per_rack)
        r, h = divmod(rest, hosts_per_rack)
        out.append(NodeSpec(f"b{b}-r{r}-h{h}", node.capacity, {BLOCK_LABEL: f"b{b}", RACK_LABEL: f"r{r}"}))
    return out


class NodeGroup(SpecModel):
    """``count`` identical nodes."""

    name: Name = Field(description="Group name; node ids are <name>-<i> and the pool label defaults to it.")
    count: int = Field(ge=1, description="How many nodes of this kind.")
    resources: NodeResources = Field(description='What ONE node offers, e.g. {cpu: "64", memory: 512Gi, '
                                                 'gpu: "8(A100)", rdma: "1(ib)"}.')
    labels: Labels = Field(default_factory=dict, description="Extra node labels, e.g. cuberay.io/rdma-domain: r1.")


class ClusterFile(SpecModel):
    """A simulated cluster: a list of node groups."""

    nodes: list[NodeGroup] = Field(min_length=1, description="The node groups.")


def group_nodes(name: str, count: int, resources: NodeResources, labels: Mapping[str, str]) -> list[NodeSpec]:
    """``count`` NodeSpecs with Ray-named capacity and the constraint labels their cards and fabric imply."""
    fields = resources.model_dump()
    offer = res.parse_worker(cpu=fields.get("cpu"), memory=fields.get("memory"), gpu=fields.get("gpu"),
                             rdma=fields.get("rdma"), custom=fields.get("custom"))
    node_labels = {res.LABEL_POOL: name, **labels, **offer.node_selector()}
    capacity = offer.resources.as_dict()
    return [NodeSpec(f"{name}-{i}", dict(capacity), dict(node_labels)) for i in range(count)]


def cluster_from_groups(groups: Sequence[NodeGroup]) -> list[NodeSpec]:
    return [node for g in groups for node in group_nodes(g.name, g.count, g.resources, g.labels)]


def cluster_from_pools(pools: Sequence[NodePool]) -> list[NodeSpec]:
    """The node pools of a platform file as simulator nodes (same ids as ``policy.fit.platform_ledger()``)."""
    return [node for p in pools for node in group_nodes(p.name, p.nodes, p.resources, p.labels)]


def load_cluster(source: str | Path | Mapping[str, Any]) -> list[NodeSpec]:
    """Read a cluster file (``nodes: [...]``) or a platform file (its ``node_pools``) into NodeSpecs.

    Raises:
        SpecError: missing file, bad YAML, unknown field, bad resource string (names file, field and line),
            or a platform file without node pools.
    """
    doc = one_document(read_documents(source), "cluster")
    data = require_mapping(doc)
    if data.get("kind") == "Platform":
        return _platform_nodes(source, doc.file)
    try:
        parsed = ClusterFile.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, doc, vocabulary=field_names(ClusterFile) | field_names(NodeGroup)
                         | field_names(NodeResources)) from None
    _unique_names(parsed.nodes, doc)
    return cluster_from_groups(parsed.nodes)


def _platform_nodes(source: str | Path | Mapping[str, Any], file: str | None) -> list[NodeSpec]:
    platform = load_platform(source)
    if not platform.spec.node_pools:
        raise SpecError("the platform file declares no node_pools, so it describes no cluster; add node_pools "
                        "or pass a cluster file (nodes: [...]) or --nodes/--gpus-per-node", file=file,
                        path="spec.node_pools")
    return cluster_from_pools(platform.spec.node_pools)


def _unique_names(groups: Sequence[NodeGroup], doc: Document) -> None:
    first: dict[str, int] = {}
    for i, g in enumerate(groups):
        if g.name in first:
            line = doc.line_of(["nodes", i, "name"])
            raise SpecError(f"group name {g.name!r} is used at nodes[{first[g.name]}] and nodes[{i}] (line {line}); "
                            f"node ids come from it, so rename one", file=doc.file, path=f"nodes[{i}].name")
        first[g.name] = i


def describe(cluster: Sequence[NodeSpec]) -> str:
    """One line: node count and totals, e.g. ``72 nodes: CPU=..., GPU=...`` (for progress output)."""
    return f"{len(cluster)} nodes: {res.format_resources(res.total(n.capacity for n in cluster))}"
