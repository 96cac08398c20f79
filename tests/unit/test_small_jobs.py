"""Which jobs run as small jobs (one named Ray task, no driver process), and where their output goes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.platform.control.small import SUCCEEDED, is_small, log_file, task_name
from cuberay.platform.spec import load_spec


@pytest.mark.parametrize(("kind", "spec", "small"), [
    ("Task", {"workers": 1, "command": "true"}, True),
    ("Task", {"command": "true"}, True),  # workers defaults to 1
    ("Task", {"workers": 1, "command": "true", "resources": {"cpu": "1", "gpu": "1"}}, True),
    ("Task", {"workers": 2, "command": "true"}, False),  # a gang needs its placement group and driver
    ("Task", {"workers": {"min": 1, "max": 2}, "command": "true"}, False),
    ("TrainJob", {"workers": 1, "command": "true"}, False),
    ("Task", {"workers": 1, "command": "true", "env": {"TASK_RESOURCE_CPU": "2"}}, False),  # a sized driver
    ("Task", {"workers": 1, "command": "true", "resources": {"rdma": "1(roce)"}}, False),  # NCCL set-up
])
def test_one_worker_command_tasks_are_small(kind: str, spec: dict, small: bool) -> None:
    job = load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": kind, "metadata": {"name": "j"}, "spec": spec})
    assert is_small(job) is small


def test_task_name_leads_with_the_tenant() -> None:
    assert task_name("research", "research-hello-3") == "research/research-hello-3"


def test_the_controller_side_reports_each_end_once_and_keeps_a_failed_runs_log_for_its_message(tmp_path: Path) -> None:
    from cuberay.platform.control.small import FAILED, STOPPED, SUCCEEDED, SmallRuns

    runs = SmallRuns(lambda tenant: tmp_path / tenant, lambda: None, "node")
    for sid, job_id in (("s-ok", "a-ok-1"), ("s-bad", "a-bad-1"), ("s-stop", "a-stop-1")):
        runs.runs.add(sid)
        runs.paths[sid] = log_file(tmp_path / "a", job_id, sid)
        runs.names[sid] = task_name("a", job_id)
    runs.paths["s-bad"].parent.mkdir(parents=True)
    runs.paths["s-bad"].write_text("line 1\nTraceback\nValueError: boom\n")
    assert runs.in_flight() == 3
    runs.runs.clear()
    runs._ended = {"s-ok": SUCCEEDED, "s-bad": FAILED, "s-stop": STOPPED}

    assert runs.ended() == {"s-ok": SUCCEEDED, "s-bad": FAILED, "s-stop": STOPPED}
    assert runs.handles("s-ok") and runs.names["s-ok"] == "a/a-ok-1"  # still named in the caller's messages
    assert runs.failure_message("s-bad") == "line 1 | Traceback | ValueError: boom"
    assert runs.ended() == {}  # each end once
    assert not any(runs.handles(s) for s in ("s-ok", "s-bad", "s-stop"))  # forgotten after being reported


def test_a_waiting_poll_hears_of_a_run_started_after_it_asked() -> None:
    """The controller long-polls the runner with the runs it knew of; a run it started since (while an hour-long
    run keeps the poll open) must come back when it ends, not when the poll times out."""
    import asyncio
    import time

    from cuberay.runtime.small_runner import SmallRunner

    async def scenario() -> tuple[dict, float]:
        runner = SmallRunner()
        runner.runs = {"long": None, "new": None}  # type: ignore[dict-item]
        poll = asyncio.create_task(runner.ended(["long"], 30.0))
        await asyncio.sleep(0)  # the poll is waiting
        started = time.monotonic()
        runner._record_end("new", SUCCEEDED, "")
        ends = await asyncio.wait_for(poll, 5.0)
        return ends, time.monotonic() - started

    ends, waited = asyncio.run(scenario())
    assert ends == {"new": (SUCCEEDED, "")} and waited < 1.0
    # What ended before a poll began is only reported for runs the poll asks about.
    runner = SmallRunner()
    runner._record_end("old", SUCCEEDED, "")
    assert asyncio.run(runner.ended(["other"], 0.0)) == {}


def test_a_second_cancel_during_the_cleanup_still_kills_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray repeats a cancel the task has not answered yet: the KeyboardInterrupt may land inside the kill."""
    import os
    import signal

    from cuberay.runtime import process as process_mod
    from cuberay.runtime.process import CommandProcess
    from cuberay.runtime.small_runner import end_command

    proc = CommandProcess("trap '' TERM; exec sleep 600", dict(os.environ))  # deaf to TERM: the grace is waited
    real, calls = process_mod.kill_group, []

    def interrupted_once(pgid: int, grace_s: float, wait=None) -> None:  # noqa: ANN001
        calls.append(grace_s)
        if len(calls) == 1:
            os.killpg(pgid, signal.SIGTERM)
            raise KeyboardInterrupt  # the repeated cancel, while the first kill waits out the grace
        real(pgid, grace_s, wait=wait)

    monkeypatch.setattr(process_mod, "kill_group", interrupted_once)
    stat = Path(f"/proc/{proc.pid}/stat")
    try:
        end_command(proc, None)
    except KeyboardInterrupt:
        pytest.fail("the second cancel cut the cleanup short: the command still runs")
    finally:
        monkeypatch.undo()
        # Read before anything here waits for it: waiting would reap the zombie the cleanup must not leave.
        left = stat.read_text().split()[2] if stat.exists() else None
        if proc._popen.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever happened, leave no sleeper behind
    assert calls == [process_mod.KILL_GRACE_S, 0.0]
    # Killed and reaped by the cleanup itself: an unreaped leader stays a zombie in a reused Ray worker, and its
    # pid still answers as a live process.
    assert left is None, f"the command is still in the process table (state {left})"
