"""Live reload of the platform file: tenants, members, quotas, scheduler settings and pools, without a restart.

``cuberay up`` with an edited file calls :meth:`Reload.reload` on the running controller. The new file is
checked against what runs: a tenant with waiting or running jobs cannot be removed, and the storage and
database cannot move (they hold the queue). Quotas apply from the next admission cycle: a tenant whose
new max is below its current use admits nothing more until it is under it again, and its running jobs
are preempted only by the usual rules (another tenant reclaiming its guarantee), never at once.

The reloaded file is kept in Ray's GCS (namespace ``cuberay``), so a controller that Ray restarts comes
back with it rather than with the file it was installed with; a fresh install clears it.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

from cuberay import kinds
from cuberay.errors import AdmissionError, SpecError
from cuberay.platform.control import convert as conv
from cuberay.platform.control.endpoint import endpoint
from cuberay.platform.control.guard import Principal
from cuberay.platform.policy.fit import platform_policy, platform_topology, pool_problem, tenant_quotas
from cuberay.platform.spec import Platform, load_platform, load_spec
from cuberay.platform.spec.platform_file import masked_url

_KEY = b"platform/reloaded"


def persisted(cluster: Any) -> dict[str, Any] | None:
    """The platform file of the last reload on this cluster, if any."""
    raw = cluster.kv_get(_KEY)
    return None if not raw else json.loads(raw)


def persist(cluster: Any, platform: Platform) -> None:
    cluster.kv_put(_KEY, json.dumps(platform.model_dump(mode="json")).encode())


def clear(cluster: Any) -> None:
    cluster.kv_del(_KEY)


def changes(old: Platform, new: Platform, active: Mapping[str, int], usage: Mapping[str, Mapping[str, float]]
            ) -> list[str]:
    """What the reload changes, in words; SpecError/AdmissionError when it cannot apply to what runs."""
    for field in ("storage", "database"):
        if getattr(old.spec, field) != getattr(new.spec, field):
            before, after = (masked_url(getattr(p.spec, field)) for p in (old, new))
            raise SpecError(f"spec.{field} changed from {before!r} to {after!r}; it holds the queue and history, so it cannot move "
                            f"while the controller runs: change it back, or stop the platform (`cuberay down`) "
                            f"and start it with the new file", path=f"spec.{field}")
    before = {t.name: t for t in old.tenants}
    after = {t.name: t for t in new.tenants}
    busy = sorted(name for name in set(before) - set(after) if active.get(name))
    if busy:
        raise AdmissionError(f"tenant(s) {', '.join(busy)} still have waiting or running jobs "
                             f"({', '.join(f'{n}: {active[n]}' for n in busy)}), so the platform file cannot drop "
                             f"them; cancel those jobs first or keep the tenant")
    out = [f"tenant {n} added" for n in sorted(set(after) - set(before))]
    out += [f"tenant {n} removed" for n in sorted(set(before) - set(after))]
    for name in sorted(set(before) & set(after)):
        if before[name] != after[name]:
            out.append(f"tenant {name} changed")
            limit = after[name].max_resources()
            over = {} if limit is None else {k: v for k, v in usage.get(name, {}).items()
                                             if v > limit.get(k, float("inf")) + 1e-9}
            if over:
                out.append(f"tenant {name} uses more than its new max ({', '.join(sorted(over))}): it admits "
                           f"nothing more until its jobs end or are preempted by the usual rules")
    if old.spec.scheduler != new.spec.scheduler:
        out.append("scheduler settings changed")
    if old.spec.node_pools != new.spec.node_pools:
        out.append("node pools changed")
    if added := [m for m in new.spec.kinds if m not in old.spec.kinds]:
        out.append(f"job kinds of {', '.join(added)} loaded")
    if gone := [m for m in old.spec.kinds if m not in new.spec.kinds]:
        out.append(f"{', '.join(gone)} no longer listed (its kinds stay loaded until the controller restarts)")
    return out or ["no change"]


class Reload:
    """The controller's reload call; it supplies platform, state, store, drivers, cluster, small_runner,
    _tenant_storage, _lock, _submit_lock, _wake and interval_s."""

    @endpoint
    async def reload(self, who: Principal, platform: Mapping[str, Any]) -> list[str]:
        """Apply an edited platform file to the running controller; returns what changed."""
        new = load_platform(dict(platform))
        kinds.load(new.spec.kinds)  # a module that cannot be imported refuses the reload; removed ones stay loaded
        async with self._submit_lock, self._lock:  # no submit sees half of the old tenants and half the new
            active: dict[str, int] = {}
            for job in [*self.state.queue, *(r.job for r in self.state.running.values())]:
                active[job.tenant] = active.get(job.tenant, 0) + 1
            summary = changes(self.platform, new, active, self.state.usage)
            if summary == ["no change"]:
                return summary
            self._refuse_stranding(new)
            self._apply_platform(new)
            persist(self.cluster, new)
            self.store.add_event("platform_reloaded", f"by {who.user}: {'; '.join(summary)}")
            self._wake.set()
            return summary

    def _switch_small_jobs(self, on: bool) -> None:
        """Small jobs on or off from the next start (the controller's own start included: the runner starts now,
        not at the first small job); the runs in flight are followed to their end either way."""
        if on and self.drivers.small is None:
            self.drivers.small = self.cluster.small_runs(self._tenant_storage, self._wake.set, self.small_runner)
            if self.drivers.small is not None:
                self.drivers.small.available()  # its runner starts now, if the controller was given how
        self.drivers.small_on = on and self.drivers.small is not None

    def _refuse_stranding(self, new: Platform) -> None:
        """AdmissionError if the new file takes from a tenant a node pool that its waiting or running jobs name."""
        old_pools = {t.name: t.pools for t in self.platform.tenants}
        shrunk = {t.name for t in new.tenants if t.name in old_pools and t.pools is not None
                  and (old_pools[t.name] is None or set(old_pools[t.name]) - set(t.pools))}
        stranded = []
        for job in [*self.state.queue, *(r.job for r in self.state.running.values())]:
            if job.tenant in shrunk:
                rec = self.store.get_job(job.id)
                if pool_problem(load_spec(rec.spec), new.tenant(rec.tenant)):
                    stranded.append(f"{rec.id} ({rec.state.value})")
        if stranded:
            raise AdmissionError(f"the new file takes from their tenant a node pool that job(s) "
                                 f"{', '.join(stranded[:10])}{' and more' if len(stranded) > 10 else ''} name in a "
                                 f"node_selector, so they could never run again: cancel them first or keep the pool "
                                 f"in the tenant's pools")

    def _apply_platform(self, new: Platform) -> None:
        self.platform = new
        self.interval_s = new.spec.scheduler.cycle_interval_s
        self.state.tenants = dict(tenant_quotas(new))
        self.state.policy = platform_policy(new)
        self.ledger.topology = platform_topology(new)
        for name in self.state.tenants:
            self.state.usage.setdefault(name, {})
        self.drivers.launcher.max_drivers = new.spec.scheduler.max_drivers
        self.drivers.driver_resource = new.spec.scheduler.driver_resource
        self._switch_small_jobs(new.spec.scheduler.small_jobs)
        self.store.upsert_tenants({t.name: t.model_dump(mode="json") for t in new.tenants})
        now = time.time()
        for queued in list(self.state.queue):  # priorities and pools come from the tenant: recompute
            rec = self.store.get_job(queued.id)
            self.state.queue.remove(queued.id)
            self.state.queue.add(conv.job_request(rec.id, load_spec(rec.spec), new.tenant(rec.tenant),
                                                  rec.submit_time or now, rec.user, queued.attained_gpu_s))
