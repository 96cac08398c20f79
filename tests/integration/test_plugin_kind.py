"""A job kind from outside cuberay runs end to end: the toy kind of tests/plugins/toy, named in the platform file's
spec.kinds, is admitted as a gang by the real controller, its driver runs the toy's ``run`` and the job ends as that
``run`` says; the controller retries a failing one as the kind's adapter says. Nothing in cuberay/ names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay import kinds
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.integration.conftest import PLATFORM_USER, _empty_platform, platform_test_spec

TOY = "tests.plugins.toy"


def _toy(name: str, **spec: object) -> dict:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Toy", "metadata": {"name": name, "tenant": "a"},
            "spec": {"resources": {"cpu": "1"}, **spec}}


@pytest.fixture
def toy_platform(ray_cluster, tmp_path: Path, job_client, monkeypatch: pytest.MonkeyPatch):
    spec = platform_test_spec(tmp_path / "cuberay")
    spec["spec"]["kinds"] = [TOY]
    monkeypatch.setenv("CUBERAY_USER", PLATFORM_USER)
    client.install(spec, address=ray_cluster.address, replace=True)
    try:
        yield spec
    finally:
        _empty_platform(client, job_client)


@pytest.mark.timeout(240)
def test_a_plugin_kind_is_admitted_as_a_gang_runs_its_driver_and_succeeds(toy_platform, ray_cluster) -> None:
    kinds.load([TOY])  # this process is a client: what CUBERAY_KINDS does for the CLI
    ok = client.submit(_toy("hello", workers=2, placement="strict_spread", message="hello from a plugin"))
    failing = client.submit(_toy("fails", exit_code=3, max_failures=1))
    done, failed = client.wait(ok, timeout=180), client.wait(failing, timeout=180)

    assert done.state == JobState.SUCCEEDED, (done.state, done.message, "".join(client.logs(ok)))
    admitted = [e.message for e in client.api().events(ok.id, None) if e.kind == "admitted"]
    assert admitted and admitted[0].startswith("attempt 1: 2 worker(s)"), admitted
    log = "".join(client.logs(ok))
    # The controller handed its plugin list to the driver, which loaded the kind and ran the toy's run() with the
    # whole gang: two workers on two nodes (strict_spread).
    assert f"toy {ok.id} attempt 1: hello from a plugin; a gang of 2 on 2 node(s); CUBERAY_KINDS={TOY}" in log, log

    # The toy keeps JobKind's retries (spec.max_failures), so the controller ran it twice before FAILED.
    assert failed.state == JobState.FAILED and failed.attempts == 2, (failed.state, failed.attempts, failed.message)
    assert "retrying (1 of 1 allowed failures used)" in " ".join(
        e.message for e in client.api().events(failing.id, None))
