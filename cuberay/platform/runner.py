"""The job driver: ``python -m cuberay.run <job-id>`` inside a Ray Job, and ``cuberay run FILE``.

``run_job`` asks the controller for the admitted attempt (spec, one node id
per worker, identity, tenant storage), runs the driver its kind's adapter names, and exits 0 or 1
so the Ray Job's status tells the controller how it went:

  each kind's driver        ``run(job, ctx)`` named by its adapter (cuberay/kinds/<kind>/driver.py for
                            the built-in ones): Ray Train, a command gang, a Ray Tune search, a Serve app
  a kind not registered     refused at submit; a stored one exits 1 with the reason

``run_file`` is the external driver of ``ray job submit -- cuberay run
job.yaml``: it registers the job (``driver="external"``, with its own Ray
submission id), prints where it waits while queued, runs each admitted attempt
in a child ``python -m cuberay.run <job-id>`` (a Ray driver of its own, so a
preemption is a kill of that child: Ray then frees its gang), and reports the
attempt's end to the controller. Its polls double as heartbeats.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from cuberay import kinds
from cuberay.errors import CuberayError, JobFailedError
from cuberay.platform import client
from cuberay.platform.api import TOKEN_ENV, USER_ENV
from cuberay.platform.api.records import JobRecord, QueueEntry
from cuberay.platform.policy.states import JobState

EXIT_OK, EXIT_FAILED = 0, 1
RUN_POLL_S = 2.0       # how often a running external driver checks its attempt is still current
KILL_GRACE_S = 5.0


def say(message: str) -> None:
    print(f"cuberay: {message}", flush=True)


def own_submission_id() -> str | None:
    """The Ray Job submission id of this driver, from the job config Ray's supervisor sets."""
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return (json.loads(raw).get("metadata") or {}).get("job_submission_id")
    except ValueError:
        return None


# ---------------------------------------------------------------------- one attempt


def run_job(job_id: str) -> int:
    """Run the admitted attempt of ``job_id`` in this process; the exit code for the Ray Job."""
    try:
        client.connect(log_to_driver=True)
        ctx = client.driver_api().job_context(job_id, own_submission_id())
    except CuberayError as err:
        say(f"cannot run {job_id}: {err}")
        return EXIT_FAILED
    nodes = ctx.node_ids
    say(f"{job_id} attempt {ctx.attempt}: {len(nodes)} worker(s) on node(s) "
        f"{', '.join(sorted({n[:8] for n in nodes}))}")
    try:
        return dispatch(ctx)
    except CuberayError as err:
        say(f"{job_id} failed: {err}")
        return EXIT_FAILED


def dispatch(ctx: dict[str, Any]) -> int:
    from cuberay.platform.spec import load_spec

    job = load_spec(ctx.spec)
    kind = kinds.of(job.kind)
    return kinds.load_object(kind.driver, f"the {kind.name} driver")(job, ctx)


# ---------------------------------------------------------------------- external driver


def run_file(spec_or_path: Any, tenant: str | None = None, *, user: str | None = None,
             on_wait: Callable[[QueueEntry | None, JobRecord], None] | None = None,
             poll_s: float = 1.0) -> JobRecord:
    """Be the job's driver (``cuberay run``): register, wait in the queue, run each admitted attempt here, report.

    Returns the final record; ``on_wait(entry, record)`` is called whenever the waiting job's position or reason
    changes. ``user`` defaults to the caller (CUBERAY_USER, else the login name).
    """
    from cuberay.platform.control.convert import require_runnable
    from cuberay.platform.spec import load_spec

    job = load_spec(Path(spec_or_path) if isinstance(spec_or_path, os.PathLike) else spec_or_path)
    require_runnable(job, str(spec_or_path) if isinstance(spec_or_path, os.PathLike) else None)  # before Ray
    client.connect()
    sid = own_submission_id()
    token = secrets.token_urlsafe(32)  # this driver's secret: its calls carry it, the controller keeps its hash
    ref = client.submit(job, tenant, user=user, driver="external", submission_id=sid, driver_token=token)
    say(f"registered {ref.id}" + (f" (Ray Job {sid})" if sid else ""))
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with client.acting_as(user, token):
            return _drive(ref, on_wait, poll_s, token)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _drive(ref: Any, on_wait: Callable[[QueueEntry | None, JobRecord], None] | None, poll_s: float,
           token: str) -> JobRecord:
    """Wait for each admission, run the attempt in a child driver, report its end; the final record."""
    while True:
        info = _wait_admitted(ref.id, on_wait, poll_s)
        if info is None:
            return client.driver_api().status(ref.id)
        code, current = _run_attempt(ref.id, int(info.attempt), token)
        if not current:
            continue  # preempted (back in the queue) or cancelled: the loop finds out which
        message = "the run exited 0" if code == 0 else f"the run exited with code {code}"
        record: JobRecord = client.driver_api().finished(ref.id, code == 0, message,
                                                        int(info.attempt))
        if record.state.is_terminal:
            return record
        say(f"{ref.id} is {record.state.value}: {record.reason}")


run = run_file  # cuberay.run(...): the Python spelling of `cuberay run FILE`


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that kill the child run


def _wait_admitted(job_id: str, on_wait: Callable[[QueueEntry | None, JobRecord], None] | None,
                   poll_s: float) -> dict[str, Any] | None:
    """Poll until the job holds an allocation (its admission info) or is terminal (None)."""
    last: tuple[Any, Any] | None = None
    while True:
        info = client.driver_api().admission(job_id)
        state = info.state
        if state.holds_resources:
            return info
        if state.is_terminal:
            return None
        seen = (info.position, info.reason)
        if seen != last:
            last = seen
            if on_wait is not None:
                # The line first, then the record: a job admitted between the two reads has no line (None) and a
                # record that says so, so it is not shown as waiting.
                entry = client.driver_api().queue_entry(job_id)
                record = client.driver_api().status(job_id)
                if record.state.is_waiting and (entry is None or entry.state.is_waiting):
                    on_wait(entry, record)
            else:
                where = f"position {info.position}" if info.position else "waiting"
                print(f"queued: {where}: {info.reason}", flush=True)
        time.sleep(poll_s)


def _run_attempt(job_id: str, attempt: int, token: str) -> tuple[int, bool]:
    """Run one attempt in a child driver; (exit code, whether the attempt was still current at its end)."""
    import ray

    env = {**os.environ, **kinds.env(), "RAY_ADDRESS": ray.get_runtime_context().gcs_address, TOKEN_ENV: token,
           USER_ENV: client.caller().user}
    child = subprocess.Popen([sys.executable, "-m", "cuberay.run", job_id], env=env, start_new_session=True)
    try:
        while True:
            try:
                return child.wait(timeout=RUN_POLL_S), True
            except subprocess.TimeoutExpired:
                pass
            info = client.driver_api().admission(job_id)
            if not info.state.holds_resources or int(info.attempt) != attempt:
                say(f"attempt {attempt} of {job_id} ended by the platform ({info.state.value}: {info.reason}); "
                    f"stopping its run")
                return _stop(child), False
    finally:
        if child.poll() is None:
            _stop(child)


def _stop(child: subprocess.Popen) -> int:
    from cuberay.runtime.process import kill_group

    kill_group(child.pid, KILL_GRACE_S, wait=child)
    return child.wait()


# ---------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuberay.run",
                                     description="Run a cuberay job: the driver of one admitted attempt "
                                                 "(JOB_ID), or the external driver of a spec file (--file).")
    parser.add_argument("job_id", nargs="?", help="Job id of an admitted job (what the controller launches).")
    parser.add_argument("--file", help="A job spec: register it, wait in the queue, run it here.")
    parser.add_argument("--tenant", help="Tenant for --file (default: the spec's, else your only one).")
    args = parser.parse_args(argv)
    if (args.job_id is None) == (args.file is None):
        parser.error("give exactly one of JOB_ID and --file FILE")
    try:
        kinds.load_env(os.environ)  # plugin kinds: the controller names them for the drivers it launches
    except CuberayError as err:
        print(f"cuberay: error: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    if args.job_id:
        return run_job(args.job_id)
    try:
        record = run_file(args.file, args.tenant)
    except CuberayError as err:
        print(f"cuberay: error: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    say(f"{record.id} {record.state.value}" + (f": {record.message}" if record.message else ""))
    if record.state == JobState.FAILED:
        return JobFailedError.exit_code
    return EXIT_OK if record.state in (JobState.SUCCEEDED, JobState.CANCELLED) else EXIT_FAILED
