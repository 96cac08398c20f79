"""Every example in configs/jobs/ of a kind that runs is submitted to a live platform and succeeds.

The examples name the tenants of configs/platform.yaml; here they run in the
test platform's tenant ``a`` (same specs otherwise). Kinds that do not run yet
are refused at submit, and the list below says which example files those are,
so an example added without a test fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec
from tests.support import wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "jobs"
RUNNABLE = {"TrainJob", "Task"}


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def test_every_example_is_classified() -> None:
    kinds = {path.name: load_spec(path).kind for path in _examples()}
    assert set(kinds.values()) <= {"TrainJob", "Task", "TuneJob", "ServeApp"}, kinds
    assert any(k in RUNNABLE for k in kinds.values())


@pytest.mark.timeout(900)
def test_runnable_examples_succeed(platform) -> None:
    jobs = [load_spec(p) for p in _examples() if load_spec(p).kind in RUNNABLE]
    refs = [client.submit(job.with_tenant("a"), user=platform.user) for job in jobs]

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
