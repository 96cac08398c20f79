"""The local head that `cuberay up` starts: its ports and how it is told apart from other processes.

Real sockets and real processes; nothing here starts Ray.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil
import pytest

from cuberay.platform.control import head, sweep
from tests.support import wait_for


@pytest.fixture
def os_offers_the_first_port_again(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The port-choosing primitive, made to hand back the first port a second time.

    Both sockets really hold the port: with SO_REUSEADDR on both, Linux lets two sockets that do not listen
    bind the same address, as the OS may offer a port again once the first socket is closed.
    """
    bound: list[socket.socket] = []
    offered: list[int] = []

    def bind_free() -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", offered[0] if len(offered) == 1 else 0))
        bound.append(sock)
        offered.append(sock.getsockname()[1])
        return sock

    monkeypatch.setattr(head, "_bind_free", bind_free)
    yield offered
    for sock in bound:
        sock.close()


def test_ports_stay_distinct_when_the_os_offers_one_twice(os_offers_the_first_port_again: list) -> None:
    ports = head.free_ports(3)
    offered = os_offers_the_first_port_again
    assert offered[0] == offered[1]
    assert len(set(ports)) == 3, (ports, offered)


def test_the_head_command_gives_each_component_its_own_port(os_offers_the_first_port_again: list) -> None:
    command, port, dashboard_port, metrics_port = head.head_command("127.0.0.1", "/tmp/cr-test")
    flags = dict(re.fullmatch(r"--([a-z-]+)=(.*)", arg).groups() for arg in command if arg.startswith("--")
                 and "=" in arg)
    fixed = {name: int(value) for name, value in flags.items() if name.endswith("port") and value != "0"}
    # `ray start --head` fixes 10001 for its Ray Client server when given none: another head may hold it.
    assert set(fixed) == {"port", "dashboard-port", "ray-client-server-port", "metrics-export-port"}, flags
    assert len(set(fixed.values())) == len(fixed), fixed
    assert (fixed["port"], fixed["dashboard-port"], fixed["metrics-export-port"]) == (port, dashboard_port,
                                                                                       metrics_port)
    assert not set(fixed.values()) & set(head.RAY_RESERVED_PORTS)  # Ray's client and worker ports


# ------------------------------------------------------------------ which recorded head is ours

@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CUBERAY_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def start_child(**popen: Any) -> subprocess.Popen:
    """A process in a session of its own, as `ray start --head --block` runs (its pid leads its group)."""
    return subprocess.Popen(["sleep", "120"], start_new_session=True, **popen)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for child in started:
        child.kill()
        child.wait(timeout=10)


def record(child: subprocess.Popen, **fields: Any) -> None:
    """A state file for ``child`` as `cuberay up` writes it; ``fields`` change or (None) drop entries."""
    state = {"pid": child.pid, "pgid": child.pid, "address": "127.0.0.1:1", "temp_dir": "", "head_id": "cuberay-test"}
    state.update(fields)
    if "create_time" not in fields:
        state["create_time"] = psutil.Process(child.pid).create_time()
    head.state_path().write_text(json.dumps({k: v for k, v in state.items() if v is not None}))


def assert_still_runs(child: subprocess.Popen) -> None:
    """No signal reached ``child``: a SIGTERM or SIGKILL would end `sleep` well within the wait."""
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=1.0)


@pytest.mark.parametrize("published", ["127.0.0.1:1", "127.0.0.1:2"], ids=["ours", "another-rays"])
def test_the_recorded_head_runs_and_stop_ends_it(home: Path, children: list, published: str) -> None:
    children.append(child := start_child())
    address_file = home / "ray_current_cluster"  # where a plain ray.init() looks for a cluster
    address_file.write_text(published)
    record(child, address="127.0.0.1:1", address_file=str(address_file))
    assert head.read_state() is not None
    assert head.stop() is True
    assert child.poll() is not None and not head.state_path().exists()
    # The stopped head's address goes (else "auto" waits for it); another Ray's stays.
    assert address_file.exists() == (published != "127.0.0.1:1")


def test_down_after_a_head_that_died_clears_up_without_joining_the_cluster_it_named(home: Path,
                                                                                    tmp_path: Path) -> None:
    """A head can die as it starts (Ray's raylet exits when its dashboard agent is slow, on a loaded machine),
    leaving its address in Ray's address file: `down` clears up after it at once, never joining that address."""
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait()
    (tmp_path / "rt" / "ray").mkdir(parents=True)
    address_file = tmp_path / "rt" / "ray" / "ray_current_cluster"  # where Ray's "auto" looks, under RAY_TMPDIR
    address_file.write_text("192.0.2.1:6379")  # a documentation address: nothing answers there
    record(dead, create_time=time.time(), address="192.0.2.1:6379", address_file=str(address_file))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(CUBERAY_HOME=str(home), RAY_TMPDIR=str(tmp_path / "rt"))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from cuberay.platform import client; print(client.down())"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - started < 30, f"down waited for the dead head's cluster:\n{done.stderr[-2000:]}"
    assert not address_file.exists() and not head.state_path().exists()


@pytest.mark.parametrize("fields", [{"create_time": time.time() - 3600}, {"create_time": None}],
                         ids=["another-start-time", "old-file-without-start-time"])
def test_a_pid_with_another_start_time_is_stale_and_never_signalled(home: Path, children: list,
                                                                     fields: dict) -> None:
    """After a reboot the recorded pid may be any process's: its start time, not its pid, says it is not ours."""
    children.append(child := start_child())
    record(child, **fields)
    assert head.read_state() is None
    assert head.stop() is False
    assert not head.state_path().exists()  # stale: removed
    assert_still_runs(child)


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another user needs root")
def test_another_users_process_is_not_ours(home: Path, children: list) -> None:
    """Same pid and start time but another owner: not the head this user started (and never signalled)."""
    children.append(child := start_child(user=65534, group=65534))
    record(child)
    assert head.read_state() is None
    assert head.stop() is False
    assert_still_runs(child)


# ------------------------------------------------------------------ what stop ends besides the head

@pytest.fixture
def orphans(tmp_path: Path) -> Iterator[Callable[..., psutil.Process]]:
    """Start processes as Ray's job supervisor starts a driver: in a session of their own, then left (parent 1).

    ``mark`` is the head id in the process's environment (None: no mark); a ``deaf`` one ignores SIGTERM, as a
    driver stuck in ``ray.init`` did; ``named`` is put on its command line (a Ray daemon's name, say).
    """
    started: list[psutil.Process] = []

    def start(mark: str | None, *, deaf: bool = False, named: str = "") -> psutil.Process:
        env = {k: v for k, v in os.environ.items() if k != sweep.MARK} | ({sweep.MARK: mark} if mark else {})
        ready = tmp_path / f"ready-{len(started)}"
        program = (f"import pathlib, signal, time; signal.signal(signal.SIGTERM, "
                   f"{'signal.SIG_IGN' if deaf else 'signal.SIG_DFL'}); pathlib.Path({str(ready)!r}).touch(); "
                   f"time.sleep(120)")
        parent = (f"import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', {program!r}, {named!r}], "
                  f"start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
        pid = int(subprocess.run([sys.executable, "-c", parent], env=env, capture_output=True, text=True,
                                 check=True, timeout=30).stdout)
        started.append(proc := psutil.Process(pid))
        wait_for(ready.exists, 30, f"process {pid} to start")
        return proc

    yield start
    for proc in started:
        if sweep.running(proc):
            proc.kill()


def test_stop_ends_what_the_head_started_and_nothing_of_another_head(home: Path, children: list,
                                                                      orphans: Callable) -> None:
    children.append(leader := start_child())
    record(leader, head_id="head-1")
    driver, other_head, unmarked = orphans("head-1"), orphans("head-2"), orphans(None)
    assert head.stop() is True
    assert leader.poll() is not None
    assert not sweep.running(driver), "a driver of the stopped head, re-parented to 1, still runs"
    assert sweep.running(other_head) and sweep.running(unmarked)


def test_a_dead_heads_leftovers_go_and_one_deaf_to_sigterm_is_killed(home: Path, children: list, orphans: Callable,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head, "STOP_TIMEOUT_S", 1.0)
    children.append(gone := start_child())
    started = psutil.Process(gone.pid).create_time()
    gone.kill()
    gone.wait(timeout=10)
    deaf, other_head = orphans("head-1", deaf=True), orphans("head-2", deaf=True)
    record(gone, head_id="head-1", create_time=started)
    assert head.read_state() is None  # the head itself is gone
    assert head.stop() is True  # it ended the leftovers
    assert not sweep.running(deaf) and sweep.running(other_head)
    assert not head.state_path().exists()


def test_stop_waits_for_drivers_but_not_for_rays_own_daemons(home: Path, children: list, orphans: Callable,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's daemons drain for 10-30 s on SIGTERM as if the cluster went on; a head that stops whole skips that."""
    monkeypatch.setattr(head, "STOP_TIMEOUT_S", 8.0)
    children.append(leader := start_child())
    record(leader, head_id="head-1")
    daemons = [orphans("head-1", deaf=True, named=name) for name in ("/x/gcs_server", "/x/raylet", "ray::DashboardAgent")]
    driver = orphans("head-1")
    began = time.monotonic()
    assert head.stop() is True
    assert time.monotonic() - began < 4.0, "stop waited for Ray's daemons to drain"
    assert not any(sweep.running(p) for p in [*daemons, driver])
    # A driver deaf to SIGTERM still gets the whole grace before it is killed.
    monkeypatch.setattr(head, "STOP_TIMEOUT_S", 2.0)
    children.append(leader := start_child())
    record(leader, head_id="head-2")
    deaf = orphans("head-2", deaf=True)
    began = time.monotonic()
    assert head.stop() is True
    assert time.monotonic() - began >= 2.0 and not sweep.running(deaf)
