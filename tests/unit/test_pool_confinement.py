"""A tenant's `pools` confine its jobs to those node pools: in the simulator, in the live controller's
requests and in the could-it-ever-fit check alike (Kubernetes renders the same pools as the tenant's worker
groups and Kueue flavors)."""

from __future__ import annotations

from typing import Any

import pytest

from cuberay.errors import AdmissionError
from cuberay.platform.control.convert import job_request
from cuberay.platform.policy.fit import check_job, pool_ledger, tenant_quotas
from cuberay.platform.policy.scheduling import confine_to_pools
from cuberay.platform.sim.cluster import cluster_from_pools
from cuberay.platform.sim.engine import simulate
from cuberay.platform.sim.trace import TraceJob
from cuberay.platform.spec import load_platform, load_spec
from cuberay.platform.spec.resources import LABEL_POOL, parse_worker


def _platform(vision_pools: list[str] | None) -> Any:
    vision: dict[str, Any] = {"name": "vision", "members": ["*"],
                              "quota": {"guaranteed": {"cpu": "8", "gpu": "8"}, "max": {"cpu": "32", "gpu": "16"}}}
    if vision_pools is not None:
        vision["pools"] = vision_pools
    pool = {"nodes": 1, "resources": {"cpu": "16", "memory": "64Gi", "gpu": "8"}}
    return load_platform({
        "apiVersion": "cuberay.io/v1alpha1", "kind": "Platform",
        "spec": {"tenants": [vision, {"name": "nlp", "members": ["*"]}],
                 "node_pools": [{"name": "east", **pool}, {"name": "west", **pool}]}})


def _makespan_h(vision_pools: list[str] | None) -> float:
    platform = _platform(vision_pools)
    jobs = [TraceJob(f"j{i}", submit_time=0.0, duration=3600.0, gpus=1.0, workers=8, tenant="vision")
            for i in range(2)]
    report = simulate(jobs, cluster_from_pools(platform.spec.node_pools), tenant_quotas(platform))
    assert report.finished == 2
    return report.makespan_s / 3600.0


def test_the_simulator_keeps_a_tenant_in_its_pools() -> None:
    assert _makespan_h(None) == pytest.approx(1.0)        # both 8-GPU gangs at once, one per pool
    assert _makespan_h(["east"]) == pytest.approx(2.0)    # one pool: one after the other


def test_live_requests_carry_the_pool_constraint() -> None:
    platform = _platform(["east", "west"])
    job = load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "t"},
                     "spec": {"command": "true"}})
    req = job_request("vision-t-1", job, platform.tenant("vision"), 0.0, "alice")
    assert req.worker.node_selector()[LABEL_POOL] == "in(east,west)"
    assert LABEL_POOL not in job_request("nlp-t-1", job, platform.tenant("nlp"), 0.0, "alice").worker.node_selector()


def test_a_pool_the_job_names_narrows_its_tenants_pools_and_never_widens_them() -> None:
    west = parse_worker(cpu="1", labels={LABEL_POOL: "west"})
    assert confine_to_pools(west, ("east", "west")) is west                     # one of the tenant's: kept
    both = confine_to_pools(parse_worker(cpu="1"), ("east", "north"))  # confined again: the intersection
    assert confine_to_pools(both, ("east", "west")).node_selector()[LABEL_POOL] == "in(east)"
    confined = confine_to_pools(west, ("east",))                                # another tenant's: no node matches
    assert confined.node_selector()[LABEL_POOL] == "in()"
    nodes = pool_ledger(_platform(["east", "west"]).spec.node_pools).nodes.values()
    assert [n.labels[LABEL_POOL] for n in nodes if n.matches(west.node_selector())] == ["west"]
    assert not [n for n in nodes if n.matches(confined.node_selector())]
    assert confine_to_pools(parse_worker(cpu="1"), None).labels == ()


@pytest.mark.parametrize("where", ["spec", "role"])
def test_a_job_naming_a_pool_its_tenant_may_not_use_is_refused_at_submit_with_the_fix(where: str) -> None:
    platform = _platform(["east"])
    if where == "spec":
        spec = {"command": "true", "node_selector": {LABEL_POOL: "west"}}
        field = "spec.node_selector"
    else:
        spec = {"command": "true", "roles": {"chief": {"resources": {"cpu": "1"}},
                                             "ps": {"workers": 1, "resources": {"cpu": "1"},
                                                    "node_selector": {LABEL_POOL: "west"}}}}
        field = "spec.roles.ps.node_selector"
    job = load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob",
                     "metadata": {"name": "escape", "tenant": "vision"}, "spec": spec})
    with pytest.raises(AdmissionError) as err:
        check_job(platform, job)
    assert str(err.value).startswith(f"{field} names node pool west (cuberay.io/pool), but tenant 'vision' may use "
                                     "only its own pools (east)."), err.value
    assert "tenants.vision.pools" in str(err.value)
    assert check_job(_platform(["east", "west"]), job).name == "vision"       # one of its pools: accepted
    assert check_job(_platform(None), job).name == "vision"                   # a tenant with no pools: any


def test_a_gang_larger_than_the_tenants_pools_can_never_run() -> None:
    platform = _platform(["east"])
    job = load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "big", "tenant": "vision"},
                     "spec": {"command": "true", "workers": 2, "resources": {"gpu": "8", "cpu": "1"},
                              "placement": "strict_spread"}})
    with pytest.raises(AdmissionError):
        check_job(platform, job)
    assert check_job(_platform(None), job).name == "vision"


def test_a_reload_may_not_take_a_pool_that_a_running_job_names_from_its_tenant(tmp_path) -> None:
    """Such a job could never run again (confinement leaves it no node): the reload is refused, naming it."""
    from cuberay.platform import client
    from cuberay.platform.policy.states import JobState
    from cuberay.platform.transport.in_process import InProcess
    from tests.support import wait_for
    from tests.unit.local_cluster import LocalCluster

    def platform(vision_pools: list[str]) -> dict[str, Any]:
        spec = _platform(vision_pools).model_dump(mode="json")
        spec["spec"]["storage"] = str(tmp_path / "storage")
        spec["spec"]["scheduler"].update(cycle_interval_s=0.1, small_jobs=False)
        spec["spec"]["tenants"][0]["admins"] = ["ops"]
        return spec

    node = {"CPU": 16.0, "GPU": 8.0, "memory": 64.0 * 2**30}
    cluster = LocalCluster({"east0000aaaa": node, "west0000bbbb": node},
                           {"east0000aaaa": {LABEL_POOL: "east"}, "west0000bbbb": {LABEL_POOL: "west"}})
    local = InProcess(platform(["east", "west"]), cluster, installer="ops")
    try:
        with client.using(local), client.acting_as("ops"):
            ref = client.submit({"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
                                 "metadata": {"name": "on-west", "tenant": "vision"},
                                 "spec": {"command": "true", "node_selector": {LABEL_POOL: "west"}}})
            wait_for(lambda: client.status(ref.id).state == JobState.RUNNING, 30, "the job to run")
            assert client.status(ref.id).allocation == [{"node_id": "west0000bbbb"}]
            with pytest.raises(AdmissionError, match=f"job.s. {ref.id} .RUNNING. name in a node_selector, so they "
                                                     "could never run again: cancel them first or keep the pool"):
                client.api().reload(platform(["east"]))
            client.cancel(ref.id)
            wait_for(lambda: client.status(ref.id).state.is_terminal, 30, "the job to end")
            assert "tenant vision changed" in client.api().reload(platform(["east"]))
    finally:
        local.close()
