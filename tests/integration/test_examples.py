"""Every example in configs/jobs/ of a kind that runs is submitted to a live platform and succeeds.

They run as written, on a controller installed with configs/platform.yaml (its
storage moved to a scratch directory), each submitted by a member of its tenant.
Kinds that do not run are refused at submit; an example of a kind this test
does not know fails it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.platform import client, demo
from cuberay.platform.control.convert import RUNNABLE_KINDS
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_platform, load_spec
from tests.integration.conftest import _empty_platform
from tests.support import wait_for

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
EXAMPLES = CONFIGS / "jobs"
# A ServeApp runs until deleted, so it never "succeeds": tests/integration/test_serve.py deploys the
# ServeApp examples (serve.yaml, serve-echo.yaml) and checks they answer.
RUNNABLE = set(RUNNABLE_KINDS) - {"ServeApp"}


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def test_every_example_is_classified() -> None:
    kinds = {path.name: load_spec(path).kind for path in _examples()}
    assert set(kinds.values()) <= {"TrainJob", "Task", "TuneJob", "ServeApp"}, kinds
    assert any(k in RUNNABLE for k in kinds.values())


@pytest.fixture
def example_platform(ray_cluster, job_client, tmp_path: Path):
    """The controller with the example platform file's tenants and quotas."""
    source = demo.scratch_platform(CONFIGS / "platform.yaml", tmp_path)
    client.install(load_platform(source).model_dump(mode="json"), address=ray_cluster.address, replace=True)
    try:
        yield load_platform(source)
    finally:
        _empty_platform(client, job_client)


@pytest.mark.timeout(900)
def test_runnable_examples_succeed(example_platform) -> None:
    jobs = [load_spec(p) for p in _examples() if load_spec(p).kind in RUNNABLE]
    refs = [client.submit(job, user=demo.submitter(example_platform, job.tenant)) for job in jobs]

    def done() -> dict | None:
        records = {r.id: client.status(r.id) for r in refs}
        return records if all(rec.state.is_terminal for rec in records.values()) else None

    records = wait_for(done, 840, "every example job to end")
    failed = {i: (r.state.value, r.message) for i, r in records.items() if r.state != JobState.SUCCEEDED}
    assert not failed, failed
    trained = [r for r in records.values() if r.kind == "TrainJob" and r.spec["spec"].get("entrypoint")]
    assert trained, "no function-mode TrainJob example ran"
    for rec in trained:
        # Ray Train reported the example's checkpoints to the controller while the run was alive.
        assert rec.checkpoint_time is not None, f"{rec.id} reported no checkpoint"
        assert rec.start_time <= rec.checkpoint_time <= rec.end_time
