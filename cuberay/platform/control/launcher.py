"""Start admitted jobs as Ray Jobs and watch them: cuberay's only Ray Jobs API client.

Each cuberay job runs as one Ray Job (a driver process on the head node) so that
the Ray dashboard's Jobs page shows it with its tenant/job/kind metadata. The
launcher tracks the drivers it started and bounds how many run at once: every
driver is a Python process of ~85 MB on the head.

Token authentication (Ray 2.60): the client sends ``Authorization: Bearer
<token>`` when ``RAY_AUTH_MODE=token`` is set in this process (Ray workers and
actors inherit it from the raylet) and the token is in ``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``.

The client is synchronous (HTTP); inside an async actor call the methods through
``asyncio.to_thread`` (they are thread-safe) or accept a few ms of blocking.
"""

from __future__ import annotations

import copy
import re
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Mapping, TypeVar

from cuberay.errors import CuberayError, NotFoundError, PlatformNotRunningError

# Ray's JobStatus values (ray.job_submission.JobStatus) as plain strings.
PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED = "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"
# FAILED because the driver's supervisor went away, not because the entrypoint failed: its node died (a head that
# ran the driver and restarted on a fault-tolerant GCS: Ray then finds no supervisor and says it "failed to start").
LOST = "LOST"
TERMINAL = frozenset({STOPPED, SUCCEEDED, FAILED, LOST})
VERIFY_ADOPTED_S = 120.0  # how long after an adoption its supervisor is looked for (the GCS notices a dead node)
_SUPERVISOR_GONE = frozenset({"JOB_SUPERVISOR_ACTOR_DIED", "JOB_SUPERVISOR_ACTOR_START_FAILURE",
                              "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE"})
JOB_KEY = "cuberay.io/job"

_T = TypeVar("_T")
_STATUS_CODE = re.compile(r"status code (\d+)")


class LauncherError(CuberayError):
    """The Ray Jobs API refused or failed a request."""

    exit_code = 1


def cluster_dashboard_url() -> str:
    """The dashboard URL of the connected cluster, from a driver or from inside an actor.

    ``ray._private.worker.get_dashboard_url()`` is only right in a driver: inside a
    worker it returns the default 127.0.0.1:8265. The GCS key below is what the
    dashboard itself publishes.
    """
    import ray
    from ray._private import services

    if not ray.is_initialized():
        raise PlatformNotRunningError(
            "cannot find the Ray dashboard: this process is not connected to Ray; "
            "call ray.init(address=...) first or pass the dashboard URL explicitly"
        )
    url = services.get_webui_url_from_internal_kv()
    if not url:
        raise PlatformNotRunningError(
            "the Ray cluster has no dashboard, and cuberay starts jobs through its Jobs API; "
            "start the head with the dashboard (ray start --head --include-dashboard=true)"
        )
    return _with_scheme(url)


def _with_scheme(url: str) -> str:
    # Ray hands out "host:port" (ray.init().dashboard_url, Cluster.webui_url).
    return url if "://" in url else f"http://{url}"


class Launcher:
    """Submits, tracks, stops and reads Ray Jobs for the controller."""

    def __init__(self, dashboard_url: str, max_drivers: int = 16) -> None:
        if max_drivers < 1:
            raise ValueError(f"max_drivers must be >= 1, got {max_drivers}")
        self.dashboard_url = _with_scheme(dashboard_url)
        self.max_drivers = max_drivers
        self._lock = threading.Lock()
        # submission_id -> last status reported by poll() (None: not reported yet).
        self._tracked: dict[str, str | None] = {}
        # Adopted drivers whose supervisor is looked for until then (monotonic time): after a head restart on a
        # fault-tolerant GCS, Ray keeps a dead supervisor's job RUNNING until something asks.
        self._verify: dict[str, float] = {}
        self._client = self._connect()
        self._logs_dir = _ray_logs_dir()

    def _connect(self) -> Any:
        from ray.job_submission import JobSubmissionClient

        return self._call("connect to the Ray Jobs API", "", lambda: JobSubmissionClient(self.dashboard_url))

    # -- capacity ---------------------------------------------------------------------------

    def in_flight(self) -> int:
        """Drivers started (or adopted) here that poll() has not yet seen end."""
        with self._lock:
            return sum(1 for status in self._tracked.values() if status not in TERMINAL)

    def can_start(self) -> bool:
        return self.in_flight() < self.max_drivers

    def tracked(self) -> dict[str, str | None]:
        """A copy of what the launcher tracks: submission_id -> last reported status."""
        with self._lock:
            return dict(self._tracked)

    # -- lifecycle --------------------------------------------------------------------------

    def start(
        self,
        submission_id: str,
        entrypoint: str,
        *,
        metadata: dict[str, str],
        runtime_env: dict[str, Any] | None,
        env: dict[str, str] | None = None,
        driver_resources: Mapping[str, Any] | None = None,
    ) -> None:
        """Submit one Ray Job; idempotent for a resubmission of the same cuberay job.

        A driver requests no CPU by default (entrypoint_num_cpus=0): the job's own workers
        hold the resources cuberay allocated, the driver only orchestrates them.
        ``driver_resources`` ({num_cpus, num_gpus, memory}) sizes a driver that does work itself; its
        ``resources`` (custom Ray resources) choose where drivers run (the platform's driver_resource).
        """
        sizing = dict(driver_resources or {})
        _check_str_map("metadata", metadata)
        _check_str_map("env", env or {})
        if not self.can_start():
            raise LauncherError(
                f"cannot start {submission_id}: {self.in_flight()} Ray Job drivers are in flight and "
                f"max_drivers is {self.max_drivers} (each driver is a ~85 MB process); "
                "wait until poll() reports one finished, or raise max_drivers"
            )
        try:
            self._call(
                "submit", submission_id,
                lambda: self._client.submit_job(
                    entrypoint=entrypoint,
                    submission_id=submission_id,
                    metadata=dict(metadata),
                    runtime_env=_merge_env(runtime_env, env),
                    entrypoint_num_cpus=sizing.get("num_cpus", 0),
                    entrypoint_num_gpus=sizing.get("num_gpus") or None,
                    entrypoint_memory=int(sizing["memory"]) if sizing.get("memory") else None,
                    entrypoint_resources=dict(sizing["resources"]) if sizing.get("resources") else None,
                ),
            )
        except LauncherError as err:
            if "already exists" not in str(err.__cause__) or not self._same_job(submission_id, metadata):
                raise
            # A controller that crashed after submitting re-sends the same start: adopt it.
        with self._lock:
            self._tracked.setdefault(submission_id, None)

    def _same_job(self, submission_id: str, metadata: Mapping[str, str]) -> bool:
        info = self._call("read", submission_id, lambda: self._client.get_job_info(submission_id))
        return (info.metadata or {}).get(JOB_KEY) == metadata.get(JOB_KEY)

    def adopt(self, submission_ids: Iterable[str]) -> None:
        """Track jobs started before a controller restart; the next poll() reports each once. For a while each
        poll also asks whether its driver's supervisor is still there (LOST when not)."""
        until = time.monotonic() + VERIFY_ADOPTED_S
        with self._lock:
            for submission_id in submission_ids:
                self._tracked[submission_id] = None
                self._verify[submission_id] = until

    def poll(self) -> dict[str, str]:
        """Statuses that changed since the last poll, for tracked jobs (one Jobs API read per tracked job).

        A job is reported once it reaches a terminal status and is then no longer
        tracked. A tracked id Ray does not know (deleted, or the cluster was
        replaced) is reported as FAILED.
        """
        with self._lock:
            # Only jobs tracked before the reads: one started meanwhile is
            # missing from them without being lost.
            asked = set(self._tracked)
        current = self._statuses(asked)
        self._find_lost(current)
        changed: dict[str, str] = {}
        with self._lock:
            for submission_id, last in list(self._tracked.items()):
                if submission_id not in asked:
                    continue
                status = current.get(submission_id, FAILED)
                if status != last:
                    changed[submission_id] = status
                    self._tracked[submission_id] = status
                if status in TERMINAL:
                    del self._tracked[submission_id]
        return changed

    def _statuses(self, submission_ids: Iterable[str]) -> dict[str, str]:
        """The status of each job Ray knows among ``submission_ids``, read one by one.

        Not one ``list_jobs``: that answers every Ray Job the cluster ever ran, and its cost grows with that
        history (300 ended jobs: 90 ms of CPU a call, the dashboard's and this process's, 1,000: 310 ms), where one
        job's read stays at ~4 ms however long the cluster has run. The drivers tracked are at most
        ``max_drivers`` (and those adopted after a restart).
        """
        current: dict[str, str] = {}
        for sid in sorted(submission_ids):
            try:
                current[sid] = _status(self._call("read", sid, lambda sid=sid: self._client.get_job_info(sid)))
            except NotFoundError:
                pass  # unknown to Ray: poll() reports it FAILED
        return current

    def _find_lost(self, current: dict[str, str]) -> None:
        """Mark LOST the adopted RUNNING drivers whose supervisor actor is gone (its node died with the head). Ray's
        own record of such a job may stay RUNNING: nothing is left on its side to end it."""
        now = time.monotonic()
        with self._lock:
            pending = list(self._verify.items())
        for sid, until in pending:
            done = now > until or current.get(sid, RUNNING) in TERMINAL
            if not done and current.get(sid) == RUNNING and not _supervisor_alive(sid):
                # A supervisor also goes away when its job ends: only a job Ray still calls RUNNING is lost.
                again = self._status_now(sid)
                if again is not None:
                    current[sid], done = (LOST if again == RUNNING else again), True
            if done:
                with self._lock:
                    self._verify.pop(sid, None)

    def _status_now(self, submission_id: str) -> str | None:
        """The Ray Job's status read now; None if Ray does not say (asked again at the next poll)."""
        try:
            return _status(self._call("read", submission_id, lambda: self._client.get_job_info(submission_id)))
        except CuberayError:
            return None

    def stop(self, submission_id: str) -> None:
        """Ask Ray to stop the driver (SIGTERM, then SIGKILL); a no-op for unknown or finished jobs."""
        try:
            self._call("stop", submission_id, lambda: self._client.stop_job(submission_id))
        except NotFoundError:
            pass

    # -- reading ----------------------------------------------------------------------------

    def status(self, submission_id: str) -> str:
        status = self._call("read the status of", submission_id, lambda: self._client.get_job_status(submission_id))
        return str(status.value)

    def logs(self, submission_id: str) -> str:
        """The driver's whole log, through the Jobs API (which reads Ray's driver log wherever it is)."""
        return self._call("read the logs of", submission_id, lambda: self._client.get_job_logs(submission_id))

    def driver_log(self, submission_id: str) -> Path | None:
        """Where Ray writes the driver's output on this node (None outside a Ray process).

        The file exists only on the node the driver runs on: the head, unless the driver asks for resources of
        its own. There a reader can seek, where the Jobs API only hands out the whole log.
        """
        from ray.dashboard.modules.job.common import JOB_LOGS_PATH_TEMPLATE

        if self._logs_dir is None:
            return None
        return self._logs_dir / JOB_LOGS_PATH_TEMPLATE.format(submission_id=submission_id)

    async def tail(self, submission_id: str) -> AsyncIterator[str]:
        """Log chunks as the driver writes them, until the job ends."""
        self.status(submission_id)  # a clear NotFoundError instead of a websocket handshake error
        try:
            async for chunk in self._client.tail_job_logs(submission_id):
                yield chunk
        except Exception as err:  # noqa: BLE001 - translated below, with the cause kept
            raise self._translate("tail the logs of", submission_id, err) from err

    # -- errors -----------------------------------------------------------------------------

    def _call(self, action: str, submission_id: str, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - every Jobs API failure becomes a CuberayError
            raise self._translate(action, submission_id, err) from err

    def _translate(self, action: str, submission_id: str, err: Exception) -> CuberayError:
        from ray.exceptions import AuthenticationError

        target = f"Ray Job {submission_id}" if submission_id else "Ray Jobs"
        seen = f"{type(err).__name__}: {_summary(err)}"
        if isinstance(err, AuthenticationError):
            return PlatformNotRunningError(
                f"cannot {action} {target} at {self.dashboard_url}: the dashboard refused the request ({seen}); "
                "the cluster uses token authentication: set RAY_AUTH_MODE=token and make the cluster's token "
                "available (~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)"
            )
        if isinstance(err, ConnectionError) or type(err).__module__.startswith(("requests", "aiohttp")):
            return PlatformNotRunningError(
                f"cannot {action} {target}: no Ray dashboard answers at {self.dashboard_url} ({seen}); "
                "start the cluster with its dashboard, or pass the right URL (ray.init() prints it)"
            )
        code = _STATUS_CODE.search(str(err))
        if code and code.group(1) == "404":
            return NotFoundError(
                f"cannot {action} {target}: Ray has no job with that submission id ({seen}); "
                "list the cluster's jobs with `ray job list` or `cuberay status`"
            )
        fix = "see the dashboard log (dashboard_JobHead.log in the session's logs folder)"
        if "No available agent" in str(err):
            fix = (
                "the head node's dashboard agent is not running, usually because its port (52365) is taken "
                "by another Ray instance on this machine; start the head with --dashboard-agent-listen-port=0"
            )
        elif "already exists" in str(err):
            fix = "use a new submission id for a new attempt (cuberay uses <job-id>-<attempt>)"
        return LauncherError(f"cannot {action} {target} ({seen}); {fix}")


def _ray_logs_dir() -> Path | None:
    """This node's session logs folder, where Ray's job agent writes the drivers it runs here."""
    from ray._private.worker import global_worker

    node = getattr(global_worker, "node", None)
    return Path(node.get_logs_dir_path()) if node is not None else None


def _merge_env(runtime_env: dict[str, Any] | None, env: Mapping[str, str] | None) -> dict[str, Any]:
    """The spec's runtime_env with `env` added to env_vars (`env` wins on a clash)."""
    merged = copy.deepcopy(runtime_env) if runtime_env else {}
    if env:
        merged["env_vars"] = {**(merged.get("env_vars") or {}), **env}
    return merged


def _check_str_map(name: str, values: Mapping[str, str]) -> None:
    bad = {k: v for k, v in values.items() if not isinstance(k, str) or not isinstance(v, str)}
    if bad:
        raise LauncherError(
            f"{name} must map str to str (Ray Jobs stores it as strings), got {bad!r}; convert the values with str()"
        )


def _summary(err: Exception) -> str:
    """One line for a message: Ray's 500 bodies embed whole server tracebacks; their last line says it."""
    text = str(err)
    head, tb, rest = text.partition("Traceback (most recent call last):")
    lines = [line.strip() for line in (rest if tb else text).splitlines() if line.strip(" .")]
    if not lines:
        return head.strip() or type(err).__name__
    return f"{head.strip()} {lines[-1]}".strip() if tb else lines[0]


def _status(job: Any) -> str:
    """A Ray Job's status; LOST for a failure of its supervisor (a driver that started and whose entrypoint never
    said it failed: no exit code) rather than of the user's command."""
    status = str(job.status.value)
    error = getattr(job, "error_type", None)
    error = getattr(error, "value", error)  # a JobErrorType (JobInfo) or its text (JobDetails)
    if status == FAILED and getattr(job, "driver_exit_code", None) is None and error in _SUPERVISOR_GONE:
        return LOST
    return status


def _supervisor_alive(submission_id: str) -> bool:
    """Is the Ray Job's supervisor actor (which runs its driver) alive? Ray forgets a dead actor's name."""
    import ray
    from ray.dashboard.modules.job.common import JOB_ACTOR_NAME_TEMPLATE, SUPERVISOR_ACTOR_RAY_NAMESPACE

    try:
        ray.get_actor(JOB_ACTOR_NAME_TEMPLATE.format(job_id=submission_id), namespace=SUPERVISOR_ACTOR_RAY_NAMESPACE)
    except ValueError:
        return False
    except Exception:  # noqa: BLE001 - a GCS still recovering answers nothing certain: ask again at the next poll
        return True
    return True
