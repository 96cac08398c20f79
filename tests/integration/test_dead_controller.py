"""Every CLI command that talks to the controller, run against a dead one: a one-line error and exit 1, never a
traceback. The commands are walked from the CLI itself, so a new command must say here whether it needs the
controller."""

from __future__ import annotations

from typing import Iterator

import pytest
import ray

from cuberay.cli import _register, app, main
from cuberay.errors import PlatformNotRunningError
from cuberay.platform import client
from tests.support import wait_for

JOB = "a-nothing-1"
# argv of each command that calls the controller (the files are the bundled examples).
NEEDS_CONTROLLER = {
    "tenants": ["tenants"],
    "submit": ["submit", "configs/jobs/task.yaml"],
    "run": ["run", "configs/jobs/task.yaml"],
    "queue": ["queue"],
    "status": ["status", JOB],
    "logs": ["logs", JOB],
    "cancel": ["cancel", JOB],
    "tune import": ["tune", "import", "configs/tune/experiment.yml", "--tenant", "a"],
    "tune trials": ["tune", "trials", "a-search-1"],
    "serve deploy": ["serve", "deploy", "configs/jobs/serve-echo.yaml", "--tenant", "a"],
    "serve import": ["serve", "import", "configs/serve/serve-config.yaml", "--tenant", "a"],
    "serve status": ["serve", "status", "echo-serve"],
    "serve rollout": ["serve", "rollout", "echo-serve", "--to", "v2"],
    "serve rollback": ["serve", "rollback", "echo-serve"],
    "serve history": ["serve", "history", "echo-serve"],
    "serve delete": ["serve", "delete", "echo-serve"],
    "history list": ["history", "list"],
    "pipeline submit": ["pipeline", "submit", "configs/pipelines/fan-out.yaml", "--tenant", "a"],
    "pipeline run": ["pipeline", "run", "fan-out"],
    "pipeline list": ["pipeline", "list"],
    "pipeline runs": ["pipeline", "runs"],
    "pipeline status": ["pipeline", "status", "fan-out"],
    "pipeline cancel": ["pipeline", "cancel", "fan-out"],
}
# Commands that work without a controller (env and console read the local head's record), or start one (up, demo), or stop
# it whatever it is (down).
OFFLINE = {"sim", "up", "down", "env", "console", "demo", "spec validate", "spec schema", "history export", "kube render",
           "kube quotas", "kube render-job", "kube validate", "kube apply", "kube status", "kube delete",
           "node start", "pipeline graph"}


def commands() -> set[str]:
    _register()
    found: set[str] = set()

    def walk(group, prefix: str) -> None:
        for command in group.registered_commands:
            found.add(prefix + (command.name or command.callback.__name__))
        for sub in group.registered_groups:
            walk(sub.typer_instance, prefix + sub.name + " ")

    walk(app, "")
    return found


def test_every_command_is_listed_here() -> None:
    assert commands() == set(NEEDS_CONTROLLER) | OFFLINE, "a CLI command is new: list it above"


@pytest.fixture(scope="module")
def dead(ray_cluster, tmp_path_factory) -> Iterator[None]:
    """A controller of its own, killed for good (Ray does not restart it), once for every command below."""
    from tests.integration.conftest import PLATFORM_USER, platform_test_spec

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUBERAY_USER", PLATFORM_USER)
        handle = client.install(platform_test_spec(tmp_path_factory.mktemp("dead") / "cuberay"),
                                address=ray_cluster.address, replace=True)
        ray.kill(handle, no_restart=True)
        wait_for(lambda: _gone(), 30, "the controller's name to be freed")
        yield


def _gone() -> bool:
    try:
        client.connect()
    except PlatformNotRunningError:
        return True
    return False


@pytest.mark.parametrize("name", sorted(NEEDS_CONTROLLER))
def test_a_dead_controller_is_one_line_and_exit_1(name: str, dead: None, capfd, monkeypatch) -> None:
    monkeypatch.chdir(client.find_platform_file().parents[1])  # the example files are relative to the checkout
    rc = main(NEEDS_CONTROLLER[name])  # in this process: an escaping exception would fail the test here
    out, err = capfd.readouterr()
    assert rc == 1, (name, rc, out, err)
    assert "Traceback" not in out + err, err
    assert "no cuberay controller" in err and "cuberay up" in err, err
