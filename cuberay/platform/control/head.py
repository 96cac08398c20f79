"""The local Ray head that ``cuberay up`` starts, and only that one: start, find, stop.

``ray stop`` would kill every Ray process of the user on the machine, other
sessions' clusters included, so cuberay starts its head as ``ray start --head
--block`` in a session of its own, records it in a state file
(``$CUBERAY_HOME``, default ``~/.cuberay``, file ``local-head.json``) and stops
exactly that head and every process it started, its Ray Job drivers included,
and nothing of another Ray on the machine (``sweep``). A pid is no identity
(after a reboot any process may hold it): the file keeps the head's process
start time too, and a recorded pid that started at another time, or is
another user's, is not our head; the file is stale and that process is never
signalled. Ports are picked free and distinct, so a Ray already running here
on the defaults (6379, 8265, 10001, 52365) is left alone.

The head gets a temp dir of its own (``--temp-dir``, under Ray's default
root ``$RAY_TMPDIR`` else ``$TMPDIR`` else ``/tmp``): Ray's job supervisor
hands every job driver the address found in ``<temp dir>/ray_current_cluster``,
and in the shared ``/tmp/ray`` any other Ray started on the machine overwrites
that file. The address is also written to the default ``<root>/ray/`` file
(created if missing), as ``ray start`` does, so a user's plain ``ray.init()``
finds this head; ``stop`` removes it again.

Ray 2.60 turns token authentication on for local clusters: the head gets
``RAY_AUTH_MODE=token`` and the token in ``~/.ray/auth_token`` (generated
first with ``ray get-auth-token --generate`` when missing); this process sets
the same mode before it connects.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

import psutil

from cuberay.errors import CuberayError, PlatformNotRunningError
from cuberay.home import home
from cuberay.platform.control import sweep

# The controller actor: a detached named actor on the head, found by this name in this namespace.
CONTROLLER_NAME = "cuberay-controller"
NAMESPACE = "cuberay"
API_NAME = "cuberay-api"  # the API server beside it (cuberay/console/service.py)
STATE_FILE = "local-head.json"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0  # `ray start --block` drains for up to 30 s on SIGTERM; the rest is killed
TOKEN_FILE = Path("~/.ray/auth_token")
# psutil adds the boot time (whole seconds in /proc/stat, moved by clock steps) to a process's start, so one
# process may read slightly apart from two runs; a pid reused after a reboot started minutes later at least.
START_TIME_SLACK_S = 1.0
# `ray start --head` takes 10001 (Ray Client server) and 10002-19999 (worker ports) unless told otherwise.
RAY_RESERVED_PORTS = range(10001, 20000)


def state_path() -> Path:
    return home() / STATE_FILE


def recorded() -> dict[str, Any] | None:
    """The state file as written, whether or not its head still runs."""
    try:
        state = json.loads(state_path().read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def update_state(**fields: Any) -> None:
    """Add ``fields`` to the recorded head's state (the API server's URL, once it serves)."""
    state = recorded()
    if state is not None:
        state.update(fields)
        _write_state(state)


def _write_state(state: dict[str, Any]) -> None:
    """Replace the state file whole: a reader at the same moment sees the old state or the new, never half."""
    home().mkdir(parents=True, exist_ok=True)
    tmp = state_path().with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_path())


def cluster_token() -> str | None:
    """The token of Ray's token authentication as Ray finds it: RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH
    names, else ~/.ray/auth_token; None if there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or TOKEN_FILE).expanduser()
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def read_state() -> dict[str, Any] | None:
    """The recorded head, if it still runs.

    A stale file stays for ``stop`` (``down``, or the next ``start``), which ends what that head left running.
    """
    state = recorded()
    return state if state is not None and head_process(state) is not None else None


def head_process(state: dict[str, Any]) -> psutil.Process | None:
    """The recorded head's process while it is still that one: same pid and start time, this user's, its group's leader.

    A state file without a start time (an older cuberay wrote it) cannot tell our head from a process that
    reused the pid, so it counts as stale.
    """
    try:
        pid, pgid, started = int(state["pid"]), int(state["pgid"]), float(state["create_time"])
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) > START_TIME_SLACK_S or proc.uids().real != os.getuid() \
                or os.getpgid(pid) != pgid:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:  # ended; collected here when this process started it
            _reap(pid)
            return None
    except (KeyError, TypeError, ValueError, psutil.Error, OSError):  # no such field, gone, or not ours to see
        return None
    return proc


def dead_head_error(head: dict[str, Any], seen: str) -> PlatformNotRunningError:
    """What `cuberay up` says when nothing answers at the local head it started (or found recorded): Ray's
    raylet can exit as the head starts on a loaded machine, leaving its address behind."""
    logs = Path(head.get("temp_dir") or "") / "session_latest" / "logs"
    state = "still runs" if head_process(head) is not None else "has exited"
    return PlatformNotRunningError(
        f"no driver can join the local Ray head that `cuberay up` started at {head['address']} ({seen}; the head "
        f"{state}). Why is in its start log, {head.get('log')}, and in its processes' logs, {logs} (raylet.err, "
        f"gcs_server.err); run `cuberay down` to end what it left, then the same `cuberay up` again")


def _reap(pid: int) -> None:
    """Collect the head's exit status when this process started it."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _bind_free() -> socket.socket:
    """A socket bound to a TCP port the OS picked; the port stays taken while the socket is open."""
    sock = socket.socket()
    try:
        sock.bind(("", 0))
    except OSError:
        sock.close()
        raise
    return sock


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on this machine now, none of them one that ``ray start`` reserves.

    Every socket stays bound until all ports are chosen, so the OS does not offer one twice; a port offered
    again anyway, or one in Ray's reserved range, is held too and passed over.
    """
    ports: list[int] = []
    with contextlib.ExitStack() as held:
        for _ in range(count + 64):
            port = int(held.enter_context(_bind_free()).getsockname()[1])
            if port not in ports and port not in RAY_RESERVED_PORTS:
                ports.append(port)
                if len(ports) == count:
                    return ports
    raise PlatformNotRunningError(f"found only {len(ports)} of {count} distinct free TCP ports outside "
                                  f"{RAY_RESERVED_PORTS.start}-{RAY_RESERVED_PORTS.stop - 1}; free some ports "
                                  f"(or widen net.ipv4.ip_local_port_range) and run `cuberay up` again")


def free_port() -> int:
    """A TCP port free on this machine now (the OS picks it)."""
    return free_ports(1)[0]


def _ray_cli() -> list[str]:
    beside = Path(sys.executable).parent / "ray"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


OTHER_CLUSTER_VARIABLES = ("RAY_ADDRESS", "CUBERAY_API_URL")  # where a client finds a head: never the new one


def use_token_auth() -> None:
    """Send the cluster token from this process (and its children), as ``ray start --head`` expects."""
    os.environ["RAY_AUTH_MODE"] = "token"
    try:  # Ray caches its config at import; re-read it (what ray.init does for a new local cluster)
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except ImportError:
        pass


def start(log_dir: Path, cpus: int | None = None, *, autoscaling: Callable[[str], dict[str, Any]] | None = None,
          env: Mapping[str, str] | None = None, extra_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """Start a head with dashboard and token auth (``cpus`` logical CPUs; None: the machine's cores); return its
    recorded state once it accepts drivers.

    ``autoscaling`` gives Ray's autoscaler config for the head's GCS address: the head then runs Ray's autoscaler
    with it (``--autoscaling-config``), and the nodes it starts carry this head's mark like everything else the
    head starts, so ``stop`` ends them too. ``env`` is added to the head's environment (and so to everything it
    starts). What a recorded head that died left running goes first (its state file is replaced).
    """
    stop()
    head_id = uuid.uuid4().hex
    # A shell that ran `eval "$(cuberay env)"` for an earlier head still names that head: its processes would
    # reach it (the controller's Jobs API client follows RAY_ADDRESS), not this one.
    inherited = {k: v for k, v in os.environ.items() if k not in OTHER_CLUSTER_VARIABLES}
    env = {**inherited, **(env or {}), "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
           sweep.MARK: head_id}
    package_root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    if not TOKEN_FILE.expanduser().exists():
        subprocess.run([*_ray_cli(), "get-auth-token", "--generate"], env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
    from ray._private.services import get_node_ip_address

    ip = get_node_ip_address()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / "ray-head.log"
    temp_dir = _private_temp_dir()
    command, port, dashboard_port, metrics_port = head_command(ip, temp_dir, cpus)
    command += list(extra_args)
    if autoscaling is not None:
        config = Path(temp_dir) / "autoscaling.json"
        config.write_text(json.dumps(autoscaling(f"{ip}:{port}"), indent=1))
        command.append(f"--autoscaling-config={config}")
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    state = {"pid": proc.pid, "pgid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(),
             "address": f"{ip}:{port}",
             "dashboard_url": f"http://127.0.0.1:{dashboard_port}", "log": str(log_file), "started": time.time(),
             "metrics_url": f"http://{ip}:{metrics_port}/metrics", "cpus": cpus or os.cpu_count(),
             "temp_dir": temp_dir, "head_id": head_id, "address_file": _address_file()}
    _write_state(state)
    _wait_listening(proc, ip, port, log_file)
    # The controller connects to the Jobs API as it starts: on a loaded machine the dashboard binds seconds later.
    _wait_listening(proc, "127.0.0.1", dashboard_port, log_file)
    _publish_address(state["address"], state["address_file"])
    return state


def head_command(ip: str, temp_dir: str, cpus: int | None = None) -> tuple[list[str], int, int, int]:
    """``ray start --head`` with every port it would fix chosen free and distinct; returns it, the GCS, dashboard
    and metrics ports (Prometheus text, where the controller's ``cuberay_*`` series are scraped).

    ``ray start`` refuses a port given to two of its components. The GCS, the dashboard and the Ray Client
    server (Ray's 10001 may be another head's) get ports chosen together; the agents, node and object managers
    bind a port the OS picks (0); workers take Ray's range 10002-19999, which the chosen ports avoid.
    """
    port, dashboard_port, client_port, metrics_port = free_ports(4)
    command = [*_ray_cli(), "start", "--head", "--block", f"--node-ip-address={ip}", f"--port={port}",
               f"--temp-dir={temp_dir}",
               "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
               "--dashboard-agent-listen-port=0", f"--ray-client-server-port={client_port}",
               f"--metrics-export-port={metrics_port}", "--disable-usage-stats",
               *([f"--num-cpus={cpus}"] if cpus is not None else [])]
    return command, port, dashboard_port, metrics_port


def head_cpus(platform: Any) -> int:
    """Logical CPUs for a local head: the platform file's node pools' total, at least the machine's cores, so that
    what `cuberay spec validate --platform` says fits is what the local head admits (a wait is the quota's)."""
    return max(os.cpu_count() or 1, int(platform.capacity().get("CPU", 0)))


# Ray puts Unix sockets at <temp dir>/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store, and a socket
# path has at most 107 bytes: that leaves this much for the temp dir itself.
_MAX_TEMP_DIR = 107 - len("/session_2026-11-30_10-47-48_926526_4194304/sockets/plasma_store")


def _private_temp_dir() -> str:
    """A new temp dir for the head under Ray's default root, or under /tmp where that root is too long."""
    from ray._common.utils import get_default_system_temp_dir

    root = Path(get_default_system_temp_dir())
    if len(str(root)) + len("/crXXXXXXXX") > _MAX_TEMP_DIR:
        root = Path("/tmp")
    root.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix="cr", dir=root)


def _address_file() -> str:
    """Where a plain ``ray.init()`` (address "auto") looks for a cluster: Ray's default temp dir."""
    from ray._common.utils import get_ray_address_file

    return str(get_ray_address_file(None))


def _publish_address(address: str, address_file: str) -> None:
    from ray._private.utils import write_ray_address

    os.makedirs(os.path.dirname(address_file), exist_ok=True)
    write_ray_address(address, os.path.dirname(address_file))


def unpublish_address(state: dict[str, Any]) -> None:
    """Remove the stopped head's address from that file, as ``ray stop`` does, unless another Ray wrote its own.

    Left there, the next "auto" connection (a second ``cuberay down``) waits minutes for a head that is gone.
    """
    path = Path(state.get("address_file") or "")
    try:
        if path.is_file() and path.read_text().strip() == state.get("address"):
            path.unlink()
    except OSError:
        pass


def _wait_listening(proc: subprocess.Popen, ip: str, port: int, log_file: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            state_path().unlink(missing_ok=True)
            raise PlatformNotRunningError(f"`ray start --head` exited with code {proc.returncode}; "
                                          f"read {log_file} for why")
        with socket.socket() as sock:
            sock.settimeout(1)
            if sock.connect_ex((ip, port)) == 0:
                return
        time.sleep(0.5)
    stop()
    raise PlatformNotRunningError(f"the local Ray head did not start within {START_TIMEOUT_S:.0f}s; "
                                  f"read {log_file}")


def stop(state: dict[str, Any] | None = None) -> bool:
    """Stop the head ``start`` recorded and every process it started; True if any of them was running.

    ``state`` is the recorded one (``recorded()``) unless given. The head and its process tree are signalled
    only while ``head_process`` still recognises it; what carries the head's mark (its Ray Job drivers, in
    sessions of their own, and anything re-parented) goes even when the head itself is gone. SIGTERM first,
    SIGKILL after STOP_TIMEOUT_S; the state file and temp dir go once nothing is left.
    """
    state = recorded() if state is None else state
    if state is None:
        return False
    leader = head_process(state)
    tree = [leader, *_descendants(leader)] if leader is not None else []
    targets = sweep.find(state.get("head_id"), also=tree)
    ended = 0
    left: dict[int, psutil.Process] = {}
    for _ in range(4):  # again for what forked while the first ones stopped (a driver just started)
        if not targets:
            break
        ended += len(targets)
        left.update((p.pid, p) for p in sweep.end(targets, STOP_TIMEOUT_S))
        targets = [p for p in sweep.find(state.get("head_id")) if p.pid not in left]
    left.update((p.pid, p) for p in targets)
    if leader is not None:
        _reap(leader.pid)
    if left:
        pids = " ".join(str(pid) for pid in left)
        raise CuberayError(f"{len(left)} process(es) of the local Ray head still run after SIGKILL (pids {pids}); "
                           f"end them with `kill -9 {pids}`, then run `cuberay down` again")
    state_path().unlink(missing_ok=True)
    unpublish_address(state)
    if state.get("temp_dir"):
        shutil.rmtree(state["temp_dir"], ignore_errors=True)
    return ended > 0


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []
