"""The Python API over a running cuberay controller.

Everything here talks to the controller through its typed API (:func:`api`, over Ray by default); the CLI and
``cuberay/__init__.py`` are thin layers over these functions. Functions raise
``CuberayError`` subclasses: PlatformNotRunningError (no controller; the message
says how to start one), SpecError (2), AdmissionError (3), NotFoundError (4).

Ray is imported inside the functions, so importing this module (and
``cuberay``) stays cheap.
"""

from __future__ import annotations

import contextlib
import contextvars
import getpass
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, cast

from pydantic import ValidationError

from cuberay.errors import PlatformNotRunningError, SpecError
from cuberay.platform.api import TENANT_ENV, TOKEN_ENV, USER_ENV, Caller, ControllerAPI
from cuberay.platform.api.records import JobRecord, JobRef, LogChunk, QueueEntry, QueuePage, TenantUsage  # noqa: F401 (public API)
from cuberay.platform.policy.states import JobState
from cuberay.platform.transport import Transport
from cuberay.platform.transport.auto import AutoTransport
from cuberay.platform.transport.ray_call import RayTransport, connect  # noqa: F401 (public API)
from cuberay.platform.transport.ray_call import init_ray as _init_ray
from cuberay.platform.transport.ray_errors import NoRayClusterError
from cuberay.platform.transport.remote import Remote

# Who calls made in this thread (context) act for, and with which driver secret, when not the process's own.
_ACTING: contextvars.ContextVar[str | None] = contextvars.ContextVar("cuberay_acting_user", default=None)
_TOKEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("cuberay_driver_token", default=None)
# How calls reach the controller: the local head's API server or Ray (transport/auto.py); tests may put another
# transport in its place.
_TRANSPORT: contextvars.ContextVar[Transport] = contextvars.ContextVar("cuberay_transport", default=AutoTransport())
# A killed controller is back (restarted by Ray, queue and ledger rebuilt) in about 10 s on a quiet head
# (benchmarks/bench_reliability.py, phase "crash"); drivers wait this long for it before giving up.
RESTART_WAIT_S = 120.0


def api(*, restart_wait_s: float = 0.0, timeout: float = 120.0) -> ControllerAPI:
    """The controller's typed API (cuberay/platform/api/protocol.py), called as this process's :func:`caller`.

    ``restart_wait_s``: how long a call waits out a controller restart (drivers and long waits; only for calls
    that may be repeated). The controller's own CuberayError comes back as itself.
    """
    return cast(ControllerAPI, Remote(_TRANSPORT.get(), caller, restart_wait_s=restart_wait_s, timeout=timeout))


def driver_api() -> ControllerAPI:
    """The API as a job's driver calls it: every call rides out a controller restart."""
    return api(restart_wait_s=RESTART_WAIT_S)


@contextlib.contextmanager
def using(transport: Transport) -> Iterator[None]:
    """Calls made inside (in this context) go through ``transport``: a controller in this process, say."""
    reset = _TRANSPORT.set(transport)
    try:
        yield
    finally:
        _TRANSPORT.reset(reset)


def caller() -> Caller:
    """Who this process's calls are from: the user (CUBERAY_USER, else the login name), their own default tenant
    (CUBERAY_TENANT) and, in a job's processes, the secret of its driver's attempt (the launcher puts it in their
    environment)."""
    try:
        return Caller(user=_ACTING.get() or current_user(), token=_TOKEN.get() or os.environ.get(TOKEN_ENV) or None,
                      tenant=os.environ.get(TENANT_ENV) or None)
    except ValidationError as err:  # a user name or CUBERAY_TENANT no platform could hold
        problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise SpecError(f"this process's caller is not valid ({problem}); check CUBERAY_USER and "
                        f"{TENANT_ENV} (a tenant name has at most 63 characters)") from None


def _job_id(job: JobRef | str) -> str:
    return job.id if isinstance(job, JobRef) else str(job)


def find_platform_file(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ./configs/platform.yaml, else the checkout's configs/platform.yaml."""
    if path is not None:
        return Path(path)
    for candidate in (Path.cwd() / "configs" / "platform.yaml",
                      Path(__file__).resolve().parents[2] / "configs" / "platform.yaml"):
        if candidate.is_file():
            return candidate
    raise SpecError("no platform file: ./configs/platform.yaml does not exist; pass one (`cuberay up "
                    "--platform FILE`); `cuberay spec schema --kind platform` describes the format")


def _platform_dict(platform: Any) -> dict[str, Any]:
    from cuberay.platform.spec import Platform, load_platform

    plat = platform if isinstance(platform, Platform) else load_platform(
        platform if isinstance(platform, Mapping) else Path(platform))
    data = plat.model_dump(mode="json")
    # Unset storage is this machine's cuberay home: fixed here, so the controller (wherever it runs) uses it.
    data["spec"]["storage"] = data["spec"]["storage"] or str(plat.storage_path())
    return data


def install(platform: Any, *, address: str | None = None, replace: bool = False) -> Any:
    """Create the controller from ``platform`` (a Platform, dict or file) on the connected cluster.

    With ``replace`` a running controller is killed first (its jobs stay in its database).
    """
    from cuberay.platform.control import install as controller

    _init_ray(address, log_to_driver=False)
    if replace:
        controller.uninstall()
    return _install(controller, _platform_dict(platform))


def _install(controller: Any, spec: dict[str, Any]) -> Any:
    """The controller, with what it needs to start the runner of small jobs (one-worker Tasks as Ray tasks)
    beside it when its platform runs them."""
    from cuberay.runtime.small_runner import runner

    return controller.install(spec, installer=current_user(), small_runner=runner)


def uninstall() -> bool:
    """Kill the controller if one runs (no restart); jobs keep their state in the store."""
    import ray

    from cuberay.platform.control import install as controller

    if not ray.is_initialized():
        try:
            _init_ray(None, log_to_driver=False)
        except PlatformNotRunningError:
            return False
    return controller.uninstall()


def up(platform_file: str | Mapping[str, Any] | None = None, address: str | None = None,
       console_port: int | None = None, *, start_head: Callable[[], dict[str, Any]] | None = None) -> str:
    """Start a local Ray head with dashboard + the controller (or install the controller on ``address``).

    ``platform_file`` is a path or the platform itself (a dict). The local head gets the API server and console
    on a free port of 127.0.0.1; a cluster at ``address`` gets them on ``console_port`` of its head, on every
    interface (a pod's port, for a Kubernetes Service), when given. ``start_head`` starts the local head when
    none runs (default: a head sized for the platform's pools). Returns the dashboard URL.
    """
    import ray

    from cuberay.platform.control import head as controller_head
    from cuberay.platform.control import install as controller
    from cuberay.platform.spec import load_platform

    plat = load_platform(platform_file if isinstance(platform_file, Mapping) else find_platform_file(platform_file))
    spec = _platform_dict(plat)
    head = None
    if address is None and not ray.is_initialized():
        head = controller_head.read_state()
        if head is None:
            controller_head.use_token_auth()
            head = start_head() if start_head else controller_head.start(controller_head.home(),
                                                                          controller_head.head_cpus(plat))
        address = head["address"]
    try:
        _init_ray(address, log_to_driver=False)
    except NoRayClusterError as err:
        if head is None:
            raise
        raise controller_head.dead_head_error(head, err.seen) from err
    handle = controller.find()
    if handle is None:
        handle = _install(controller, spec)
    else:  # already up: apply the (possibly edited) platform file to it, without stopping any job
        api().reload(spec)
    if head is not None:
        _serve_api(controller, head)
    elif console_port is not None:
        _serve_api_on(controller, console_port)
    return str(api(timeout=60).dashboard_url())


def _serve_api(controller: Any, head: dict[str, Any]) -> None:
    """The local head's API server (cuberay/console/service.py), its URL recorded for the commands after.

    Without it the platform still works (every call goes over Ray), so a server that cannot start is recorded
    (``api_error``, which `cuberay up` prints as a warning), not raised.
    """
    from cuberay.console import service
    from cuberay.platform.control import head as controller_head

    token = controller_head.cluster_token()
    if not token:
        return  # no token authentication on this head: no API server that would admit anyone
    port = head.get("api_port") or controller_head.free_port()
    try:
        url = service.start(controller.head_node_id(), port, token)
    except PlatformNotRunningError as err:  # the next `cuberay up` tries another port
        controller_head.update_state(api_port=None, api_url=None, api_error=str(err))
        return
    controller_head.update_state(api_port=port, api_url=url, api_error=None)


def _serve_api_on(controller: Any, port: int) -> None:
    """The API server and console on ``port`` of the head of a cluster not started here (KubeRay's head pod)."""
    from cuberay.console import service
    from cuberay.platform.control import head as controller_head

    token = controller_head.cluster_token()
    if not token:
        raise PlatformNotRunningError("the console needs the cluster's token (Ray's token authentication: "
                                      "RAY_AUTH_TOKEN or ~/.ray/auth_token on the head), and this cluster has none")
    service.start(controller.head_node_id(), port, token, host="0.0.0.0")


def reload(platform_file: str | None = None) -> list[str]:
    """Apply an edited platform file to the running controller; returns what changed."""
    return api().reload(_platform_dict(find_platform_file(platform_file)))


def down() -> bool:
    """Stop the controller, and the local Ray head that ``up`` started with every process that head started.

    Returns whether there was anything to stop. Without a running local head, only a cluster named by
    RAY_ADDRESS or Ray's address file is joined, never whichever Ray happens to run on this machine (what
    Ray's "auto" falls back to).
    """
    from cuberay.platform.control import head as controller_head
    from cuberay.platform.transport.ray_call import cluster_address

    local = controller_head.recorded()  # running or dead: `stop` ends what it left running either way
    if local is not None and controller_head.head_process(local) is None:
        # A head that died (Ray's raylet can exit as it starts on a loaded machine) left its address in Ray's
        # address file: joining the cluster it names would wait minutes for one that is gone.
        controller_head.unpublish_address(local)
    target, running = cluster_address()
    joined = sys.modules.get("ray") is not None and sys.modules["ray"].is_initialized()
    # This process means the local head: its controller and API server end with its processes below, so they are
    # not removed through Ray first (joining the cluster as a driver takes seconds).
    ours = running is not None and target == running["address"] and \
        (not joined or sys.modules["ray"].get_runtime_context().gcs_address == target)
    joinable = ours or joined or _cluster_named()
    if joinable:
        try:  # first the controller stops every driver and puts running jobs back in the queue: none stays RUNNING
            api(timeout=120.0).shutdown()
        except PlatformNotRunningError:
            pass  # no controller (or no cluster): nothing of it to stop
    stopped = uninstall() if joinable and not ours else False
    if local is not None:
        if sys.modules.get("ray") is not None and sys.modules["ray"].is_initialized():
            sys.modules["ray"].shutdown()
        stopped = controller_head.stop(local) or stopped
    return stopped


def _cluster_named() -> bool:
    """Whether RAY_ADDRESS (a GCS address, not a dashboard URL) or Ray's address file names a cluster."""
    from ray._private.services import find_bootstrap_address

    address = os.environ.get("RAY_ADDRESS", "")
    return bool(address and not address.startswith(("http://", "https://"))) or bool(find_bootstrap_address(None))


def _runnable(spec_or_path: Any) -> Any:
    """The job of a spec model, dict, YAML text or file path; SpecError for a kind the platform does not run."""
    from cuberay.platform.control.convert import require_runnable
    from cuberay.platform.spec import load_spec

    job = load_spec(Path(spec_or_path) if isinstance(spec_or_path, os.PathLike) else spec_or_path)
    require_runnable(job, str(spec_or_path) if isinstance(spec_or_path, os.PathLike) else None)
    return job


def submit(spec_or_path: Any, tenant: str | None = None, *, user: str | None = None,
           driver: str = "launcher", submission_id: str | None = None, request_id: str | None = None,
           driver_token: str | None = None) -> JobRef:
    """Validate and queue a job (a spec model, a dict, YAML text or a file path).

    ``request_id`` is the caller's own id for this submission: submitting again with it returns the same job,
    so a submit whose answer was lost can be retried. Raises SpecError (exit 2) for a kind the platform does
    not run (one without an adapter in ``cuberay.kinds``).
    """
    job = _runnable(spec_or_path)
    # Without the caller's request id, one of our own: a submit whose answer a controller restart lost is
    # then repeated safely (it returns the job the first call queued).
    with acting_as(user):
        record: JobRecord = driver_api().submit(job.model_dump(mode="json"), tenant, driver,
                                                 submission_id, request_id or f"auto-{uuid.uuid4().hex}",
                                                 driver_token)
    return JobRef(record.id, record.tenant, record.name, repeat=record.repeat and request_id is not None)


def tenant_choice(spec_or_path: Any = None, tenant: str | None = None, *, user: str | None = None) -> dict[str, str]:
    """The tenant a submit of ``spec_or_path`` with ``tenant`` (--tenant) goes to, and why: ``{"tenant", "why",
    "text"}``, e.g. text "tenant vision (CUBERAY_TENANT)". The controller's own resolution (--tenant, the spec's
    metadata.tenant, CUBERAY_TENANT, the platform file's defaults, the user's only tenant), so what a message
    says is what submit does; SpecError (2) or AdmissionError (3) as submit would raise them."""
    spec_tenant = None if spec_or_path is None else _runnable(spec_or_path).tenant
    with acting_as(user):
        return api().tenant_choice(tenant, spec_tenant)


def submit_copies(spec_or_path: Any, count: int, tenant: str | None = None, *,
                  user: str | None = None) -> list[JobRef]:
    """Queue ``count`` copies of one job in one call (consecutive ids ``<tenant>-<name>-<seq>``).

    All or none: AdmissionError (exit 3) if the job could never run, SpecError (exit 2) for a bad count.
    """
    job = _runnable(spec_or_path)
    with acting_as(user):
        owner, ids = api(timeout=600.0).submit_copies(job.model_dump(mode="json"), count, tenant)
    return [JobRef(job_id, owner, job.name) for job_id in ids]


def wait(job: JobRef | str, timeout: float | None = None, poll_s: float = 1.0) -> JobRecord:
    """Block until the job is terminal; returns its record (raises TimeoutError on timeout)."""
    return wait_until_ended(lambda: driver_api().status(_job_id(job)), "job", timeout, poll_s)


def wait_until_ended(read: Callable[[], Any], what: str, timeout: float | None = None, poll_s: float = 1.0) -> Any:
    """Poll ``read()`` (a record with ``state``, ``id`` and a reason or message) until its state is terminal and
    return it; TimeoutError after ``timeout`` seconds. ``read`` should ride out a controller restart
    (:func:`driver_api`): a restart is no reason to stop waiting."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        record = read()
        if record.state.is_terminal:
            return record
        if deadline is not None and time.monotonic() > deadline:
            why = getattr(record, "reason", "") or getattr(record, "message", "") or "no reason given"
            raise TimeoutError(f"{what} {record.id} is still {record.state.value} after {timeout:g}s ({why}); "
                               f"wait longer or cancel it")
        time.sleep(poll_s)


def status(job: JobRef | str) -> JobRecord:
    """The job's record; AdmissionError (exit 3) for a job of a tenant the caller is not in."""
    return api().status(_job_id(job))


def cancel(job: JobRef | str) -> JobRecord:
    return api().cancel(_job_id(job))


def logs(job: JobRef | str, follow: bool = False, poll_s: float = 1.0) -> Iterator[str]:
    """The job's log, every attempt oldest first; with ``follow``, new text as it comes until the job ends.

    Each attempt has a log of its own (its Ray Job's, or a small job's file). Without ``follow``, when there
    are several, each attempt's text follows a line ``--- attempt N ---``. With ``follow`` each read goes on
    from where the last one ended (a poll costs what is new), and each attempt after the first begins with
    ``--- cuberay: attempt N started ---`` (platform/transport/log_reads.py).
    """
    from cuberay.platform.transport import log_reads

    if follow:
        return log_reads.follow(driver_api(), _job_id(job), poll_s)  # a follow rides out a controller restart
    return log_reads.whole(api(), _job_id(job))


def list_jobs(tenant: str | None = None, states: list[JobState] | None = None) -> list[JobRecord]:
    """The jobs the caller may read (of ``tenant``, in ``states``), oldest first; SpecError if over 1,000 match."""
    return api().list_jobs(tenant, None if states is None else [JobState(s).value for s in states])


def queue_page(tenant: str | None = None, offset: int = 0, limit: int = 100) -> QueuePage:
    """One page of the queue (running jobs first, then waiting ones in admission order) and how many there are."""
    return api().queue_page(tenant=tenant, offset=offset, limit=limit)


def queue(tenant: str | None = None, offset: int = 0) -> list[QueueEntry]:
    """The whole queue (of ``tenant``) from row ``offset`` on, read a page at a time (platform/transport/queue_walk.py):
    at a deep backlog many calls, not one instant's queue."""
    from cuberay.platform.transport import queue_walk

    return queue_walk.walk(api(), tenant, offset)


def tenants() -> list[TenantUsage]:
    return api().tenants()


def current_user() -> str:
    """CUBERAY_USER, else the login name."""
    return os.environ.get(USER_ENV) or getpass.getuser()


@contextlib.contextmanager
def acting_as(user: str | None, token: str | None = None) -> Iterator[None]:
    """Calls made inside (in this thread) act for ``user`` (None: this process's user as usual) and carry the
    driver secret ``token`` (an external driver's). The name is a claim, as CUBERAY_USER is (docs/security.md)."""
    resets = [(var, var.set(value)) for var, value in ((_ACTING, user), (_TOKEN, token)) if value is not None]
    try:
        yield
    finally:
        for var, reset in reversed(resets):
            var.reset(reset)
