"""Automatic resource correction: CubeStudio's formula on the last 10 successful runs."""

from __future__ import annotations

import pytest

from cuberay.platform.policy.correction import GiB, UsageSample, correct, opted_out, recent

NOW = 1_800_000_000.0
DAY = 86400.0
ASKED = {"CPU": 8.0, "memory": 64.0 * GiB, "GPU": 2.0}


def history(n: int = 10, cpu: float = 3.3, mem: float = 10.2, age_days: float = 1) -> list[UsageSample]:
    # The peak is in the oldest counted run; the others are lower.
    return [UsageSample(NOW - (age_days + i) * DAY, cpu if i == n - 1 else 1.0, mem if i == n - 1 else 4.0)
            for i in range(n)]


def test_ten_runs_give_exactly_the_formula() -> None:
    fix = correct(ASKED, history(), now=NOW)
    assert fix is not None
    # ceil(3.3 * 1.4) + 2 = ceil(4.62) + 2 = 7 cores; ceil(10.2 * 1.4) + 2 = ceil(14.28) + 2 = 17 GiB
    assert fix.corrected == {"CPU": 7.0, "memory": 17.0 * GiB, "GPU": 2.0}  # GPUs never corrected
    assert fix.requested == ASKED
    assert "last 10 successful runs" in fix.reason and "NO_RESOURCE_CHECK" in fix.reason


def test_nine_runs_are_not_enough() -> None:
    assert correct(ASKED, history(9), now=NOW) is None


def test_only_the_newest_ten_count() -> None:
    old_peak = [UsageSample(NOW - 20 * DAY, 50.0, 200.0)]
    fix = correct(ASKED, history() + old_peak, now=NOW)
    assert fix is not None and fix.corrected["CPU"] == 7.0  # the 11th-newest (a big peak) is dropped


def test_samples_older_than_30_days_or_empty_do_not_count() -> None:
    assert correct(ASKED, history(age_days=25), now=NOW) is None  # 5 of the 10 are past 30 days
    zeros = [UsageSample(NOW - i, 0.05, 0.05) for i in range(5)]
    assert len(recent(history(5) + zeros, NOW)) == 5


def test_caps_at_150_cores_and_350_gib() -> None:
    fix = correct(ASKED, history(cpu=200.0, mem=400.0), now=NOW)
    assert fix is not None and fix.corrected["CPU"] == 150 and fix.corrected["memory"] == 350 * GiB


def test_bounded_by_tenant_max_and_node_size() -> None:
    fix = correct(ASKED, history(cpu=20.0, mem=100.0), now=NOW, ceiling={"CPU": 16.5, "memory": 96 * GiB})
    assert fix is not None and fix.corrected["CPU"] == 16 and fix.corrected["memory"] == 96 * GiB
    assert "bounded" in fix.reason


@pytest.mark.parametrize("name", ["NO_RESOURCE_CHECK", "no-resource-check", "No_Resource_Check"])
def test_no_resource_check_turns_it_off(name: str) -> None:
    assert opted_out({name: "true"})
    assert correct(ASKED, history(), now=NOW, env={name: "true"}) is None


def test_unchanged_request_is_no_correction() -> None:
    assert correct({"CPU": 7.0, "memory": 17.0 * GiB}, history(), now=NOW) is None


def test_task_resource_env_sizes_the_driver_not_the_workers() -> None:
    from cuberay.platform.control.drivers import driver_resources

    assert driver_resources({"TASK_RESOURCE_CPU": "2", "TASK_RESOURCE_MEMORY": "4Gi", "TASK_RESOURCE_GPU": "0"}) \
        == {"num_cpus": 2.0, "memory": 4.0 * GiB, "num_gpus": 0.0}
    assert driver_resources({"OTHER": "1"}) == {}


def test_a_platform_driver_resource_places_every_driver_where_nodes_offer_it() -> None:
    from cuberay.platform.control.drivers import driver_resources
    from cuberay.platform.spec.scheduler import SchedulerSettings

    assert driver_resources({}, "cuberay_driver") == {"resources": {"cuberay_driver": 1.0}}
    assert driver_resources({"TASK_RESOURCE_CPU": "2"}, "cuberay_driver") == {
        "resources": {"cuberay_driver": 1.0}, "num_cpus": 2.0}
    for bad in ("CPU", "memory", "node:10.0.0.1", "1x", "a b"):
        with pytest.raises(ValueError, match="custom Ray resource name"):
            SchedulerSettings(driver_resource=bad)
