"""A Ray Job that failed because its supervisor went away (its node died) is LOST, not FAILED: the controller runs
it again as a new attempt instead of spending the spec's max_failures (tests/integration/test_head_restart.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cuberay.platform import client
from cuberay.platform.control.following import LOST_EVENT, LOST_RETRIES
from cuberay.platform.control.launcher import FAILED, LOST, RUNNING, SUCCEEDED, TERMINAL, _status
from cuberay.platform.policy.states import JobState
from cuberay.platform.transport.in_process import InProcess
from tests.support import wait_for
from tests.unit.local_cluster import controller  # noqa: F401 (a fixture)


@dataclass
class Status:
    value: str


@dataclass
class Details:
    status: Status
    error_type: str | None = None
    driver_exit_code: int | None = None


@pytest.mark.parametrize("error_type", ["JOB_SUPERVISOR_ACTOR_DIED", "JOB_SUPERVISOR_ACTOR_START_FAILURE",
                                        "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE"])
def test_a_failed_supervisor_without_an_exit_code_is_lost(error_type: str) -> None:
    assert _status(Details(Status(FAILED), error_type)) == LOST
    assert LOST in TERMINAL


@pytest.mark.parametrize("details", [
    Details(Status(FAILED), "JOB_ENTRYPOINT_COMMAND_ERROR", 1),     # the command failed: the job's own failure
    Details(Status(FAILED), "JOB_SUPERVISOR_ACTOR_DIED", 137),      # the command ran and exited: its code counts
    Details(Status(FAILED), "RUNTIME_ENV_SETUP_FAILURE"),           # the spec's runtime_env: fails every time
    Details(Status(FAILED)),
    Details(Status(SUCCEEDED)), Details(Status(RUNNING)),
])
def test_everything_else_keeps_rays_status(details: Details) -> None:
    assert _status(details) == details.status.value


def test_a_supervisor_error_type_from_rays_own_record_is_read_as_well() -> None:
    from ray.dashboard.modules.job.common import JobErrorType

    assert _status(Details(Status(FAILED), JobErrorType.JOB_SUPERVISOR_ACTOR_DIED)) == LOST  # type: ignore[arg-type]


def test_lost_attempts_run_again_outside_max_failures_a_few_times(controller: InProcess) -> None:  # noqa: F811
    """max_failures 1: a lost attempt, then a real failure, is retried (1 of 1 failures used); lost drivers beyond
    LOST_RETRIES fail the job."""
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "t", "tenant": "vision"},
            "spec": {"workers": 1, "resources": {"cpu": "1"}, "max_failures": 1, "command": "echo hi"}}
    with client.acting_as("alice"):
        ref = client.submit(spec)

        def attempt(n: int) -> str:
            sid = f"cuberay-{ref.id}" if n == 1 else f"cuberay-{ref.id}-{n}"
            wait_for(lambda: sid in controller.cluster.launched.jobs and client.status(ref.id).attempts == n, 30,
                     f"attempt {n} to start")
            return sid

        controller.cluster.launched.finish(attempt(1), LOST)
        controller.cluster.launched.finish(attempt(2), FAILED, "boom\n")
        for n in range(3, 3 + LOST_RETRIES):  # the failure left a retry; the lost ones take none of it
            controller.cluster.launched.finish(attempt(n), LOST)
        final = client.wait(ref, timeout=30, poll_s=0.05)
        kinds = [e.kind for e in client.api().events(ref.id, 100)]
    assert final.state == JobState.FAILED and final.attempts == 2 + LOST_RETRIES, final
    assert kinds.count(LOST_EVENT) == LOST_RETRIES, kinds
