"""The per-pool view of tenant quotas: what each tenant may use of each node pool.

The platform file gives each tenant a cluster-wide ``guaranteed`` and ``max``. Kueue and
Volcano meter quota per resource flavor (here: per node pool), so each tenant's quota is
viewed pool by pool:

- **Which pools**: ``tenant.pools`` (default: every pool).
- **Guaranteed, default split**: for each resource, the tenant's cluster-wide guarantee is
  split over its pools that offer the resource, in proportion to each pool's capacity of it
  (nodes x per-node amount), rounded to whole units (millicores, Mi, cards) by largest
  remainder so the parts add up to the whole. Example: 2 CPUs guaranteed over a pool of
  4 CPUs and one of 2 CPUs gives 1.334 and 0.666.
- **Guaranteed, explicit**: ``tenant.pool_quotas[pool].guaranteed`` replaces the split for
  that pool; the rest of the cluster-wide guarantee is split over the other pools.
- **Max**: in each pool the tenant may use up to its cluster-wide max, bounded by the pool's
  capacity (or ``pool_quotas[pool].max``). The cluster-wide max itself is still enforced by
  the cuberay controller inside the tenant's Ray cluster.
- **Worker replicas**: a worker pod is one pool node (the same Ray node the simulator and the
  local platform see). ``minReplicas`` is the number of whole nodes the pool guarantee pays
  for, ``maxReplicas`` the number of whole nodes within the pool max; a pool where not even
  one node fits the max gets no worker group.

Pure: no Ray, no Kubernetes. The Kubernetes renderers (cuberay/kuberay) turn the shares into
Kueue flavors, Volcano queues and worker groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import cuberay.platform.spec.resources as res
from cuberay.errors import SpecError
from cuberay.platform.spec.resources import Resources

_EPS = 1e-9
# Rounding unit of each resource in the split: millicores, MiB, whole cards/devices.
_UNITS = {res.CPU: 0.001, res.MEMORY: float(2**20)}


@dataclass(frozen=True)
class PoolShare:
    """One tenant's quota in one node pool."""

    tenant: str
    pool: Any  # NodePool (spec layer)
    guaranteed: Resources
    max: Resources
    explicit: bool = False
    lending: Resources | None = None  # Kueue lendingLimit, where the platform file sets one

    @property
    def node(self) -> Resources:
        return self.pool.node_resources()

    @property
    def capacity(self) -> Resources:
        return self.node * self.pool.nodes

    def _whole_nodes(self, amounts: Resources) -> int:
        counts = [amounts.get(r, 0.0) / per_node for r, per_node in self.node.items() if per_node > 0]
        return max(0, min(self.pool.nodes, math.floor(min(counts, default=0.0) + _EPS)))

    @property
    def min_replicas(self) -> int:
        """Whole nodes the pool guarantee pays for: the tenant's floor in this pool."""
        return self._whole_nodes(self.guaranteed)

    @property
    def max_replicas(self) -> int:
        """Whole nodes within the pool max."""
        return self._whole_nodes(self.max)


def allowed_pools(platform: Any, tenant: Any) -> list[Any]:
    """The tenant's pools, in platform order (the spec layer checked the names)."""
    pools = platform.spec.node_pools
    return list(pools) if tenant.pools is None else [p for p in pools if p.name in tenant.pools]


def split(amount: float, weights: Mapping[str, float], unit: float) -> dict[str, float]:
    """``amount`` split in proportion to ``weights``, in multiples of ``unit``, summing to ``amount``.

    Largest remainder: each part is rounded down to the unit, then the units left over go
    to the parts that lost most. ``amount`` itself need not be a multiple of ``unit``: the
    sub-unit rest goes to the largest part.
    """
    total = sum(weights.values())
    if not weights or total <= 0 or amount <= 0:
        return {k: 0.0 for k in weights}
    units = amount / unit
    whole_units = math.floor(units + _EPS)
    exact = {k: whole_units * w / total for k, w in weights.items()}
    parts = {k: math.floor(v + _EPS) for k, v in exact.items()}
    left = whole_units - sum(parts.values())
    for k in sorted(exact, key=lambda k: (parts[k] - exact[k], list(weights).index(k)))[:left]:
        parts[k] += 1
    out = {k: v * unit for k, v in parts.items()}
    rest = amount - whole_units * unit
    if rest > _EPS:
        biggest = max(weights, key=lambda k: weights[k])
        out[biggest] += rest
    return out


def tenant_shares(platform: Any, tenant: Any) -> list[PoolShare]:
    """The tenant's quota in each of its pools (see the module doc for the rule)."""
    pools = allowed_pools(platform, tenant)
    explicit = tenant.pool_quotas
    guaranteed = _split_guarantee(tenant, pools, explicit)
    cap = tenant.max_resources()
    shares = []
    for pool in pools:
        capacity = pool.node_resources() * pool.nodes
        quota = explicit.get(pool.name)
        if quota is not None and quota.max is not None:
            limit = quota.max_resources()
        else:
            limit = capacity if cap is None else Resources({r: min(cap.get(r, 0.0), v) for r, v in capacity.items()})
        g = guaranteed[pool.name]
        # Never below the pool guarantee, never above what the pool has.
        pool_max = {r: max(min(limit.get(r, 0.0), v), g.get(r, 0.0)) for r, v in capacity.items()}
        lending = quota.lending_limit.resources() if quota is not None and quota.lending_limit else None
        shares.append(PoolShare(tenant.name, pool, g, Resources(pool_max), explicit=quota is not None,
                                lending=lending))
    return shares


def _split_guarantee(tenant: Any, pools: list[Any], explicit: Mapping[str, Any]) -> dict[str, Resources]:
    whole = tenant.guaranteed_resources()
    fixed = {name: q.guaranteed_resources() for name, q in explicit.items()}
    rest = whole - res.total(fixed.values())
    if over := {r: v for r, v in rest.items() if v < -_EPS}:
        names = ", ".join(over)
        raise SpecError(f"tenant {tenant.name!r}: the pool_quotas guarantees add up to more than its cluster-wide "
                        f"guaranteed {names}; lower them or raise quota.guaranteed",
                        path=f"spec.tenants.{tenant.name}.pool_quotas")
    out = {p.name: dict(fixed.get(p.name, Resources()).as_dict()) for p in pools}
    free_pools = [p for p in pools if p.name not in fixed]
    for resource, amount in rest.items():
        if amount <= _EPS:
            continue
        weights = {p.name: p.node_resources().get(resource, 0.0) * p.nodes for p in free_pools}
        weights = {k: w for k, w in weights.items() if w > 0}
        if not weights:
            raise SpecError(f"tenant {tenant.name!r} is guaranteed {resource} but none of its pools without an "
                            f"explicit pool quota offers it; add a pool that has it or lower the guarantee",
                            path=f"spec.tenants.{tenant.name}.quota.guaranteed")
        for name, part in split(amount, weights, _UNITS.get(resource, 1.0)).items():
            out[name][resource] = out[name].get(resource, 0.0) + part
    return {name: Resources(v) for name, v in out.items()}


def platform_shares(platform: Any) -> dict[str, list[PoolShare]]:
    """Every tenant's pool shares, by tenant name."""
    return {t.name: tenant_shares(platform, t) for t in platform.tenants}
