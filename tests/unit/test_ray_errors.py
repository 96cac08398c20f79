"""Ray's failures of a controller call become CuberayErrors that say what failed and what to do (real Ray
exception objects; no cluster). tests/integration/test_dead_controller.py runs the CLI against a dead one."""

from __future__ import annotations

import ray

from cuberay.errors import AdmissionError, ControllerRestartingError, CuberayError, PlatformNotRunningError
from cuberay.platform.transport.ray_errors import call_error, init_error


def test_the_controllers_own_error_comes_back_as_itself() -> None:
    denied = AdmissionError("user 'b' may not see job a-x-1")
    assert call_error(ray.exceptions.RayTaskError("status", "tb", denied), "status", 120) is denied


def test_a_fault_in_the_controller_names_the_method_and_where_the_traceback_is() -> None:
    err = call_error(ray.exceptions.RayTaskError("status", "Traceback...", KeyError("spec")), "status", 120)
    assert type(err) is CuberayError and err.exit_code == 1
    assert "failed in status() (KeyError: 'spec')" in str(err) and "Actors tab" in str(err)
    assert "Traceback" not in str(err)


def test_a_timeout_and_a_dead_actor_say_what_to_do() -> None:
    slow = call_error(ray.exceptions.GetTimeoutError("Get timed out"), "queue", 30)
    assert isinstance(slow, PlatformNotRunningError) and "did not answer queue() within 30s" in str(slow)
    died = call_error(ray.exceptions.RayActorError(), "cancel", 30)
    assert isinstance(died, ControllerRestartingError) and "retry in a few seconds" in str(died)
    other = call_error(ray.exceptions.RaySystemError("the GCS went away"), "ping", 30)
    assert isinstance(other, PlatformNotRunningError) and "`ray status`" in str(other)


def test_joining_fails_with_one_line_whatever_ray_raised() -> None:
    assert "no Ray cluster at 10.0.0.1:6379" in str(init_error(ConnectionError("refused"), "10.0.0.1:6379"))
    odd = init_error(RuntimeError("Version mismatch: cluster 2.59\nmore lines"), "auto")
    assert isinstance(odd, PlatformNotRunningError)
    assert "(RuntimeError: Version mismatch: cluster 2.59)" in str(odd) and "\n" not in str(odd)
