"""`cuberay up`, jobs, `cuberay down`, as a new user runs them: down leaves no process of that head running.

Each test starts its own local head with the real CLI in subprocesses, with a home, a Ray temp root and a copy
of the bundled platform file of its own (the session's Ray cluster is not used and must survive untouched).
A process counts as the head's when it names the head's temp dir, carries the test's CUBERAY_HOME or the
head's address in its environment, or runs the job's driver: what Ray hands every process it starts, not the
mark `cuberay up` adds, so the check does not lean on the code it tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil
import pytest
import yaml

from cuberay.platform.demo import scratch_platform
from tests.integration.own_head import kill_leftovers, own_head_env
from tests.support import wait_for

pytestmark = pytest.mark.own_ray  # runs beside the session cluster's tests (tests/run_suite.py)

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LocalHead:
    root: Path
    env: dict[str, str]
    platform: Path

    @property
    def home(self) -> Path:
        return Path(self.env["CUBERAY_HOME"])

    def cli(self, *argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cuberay", *argv], env=self.env, cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=timeout)

    def up(self) -> dict:
        result = self.cli("up", "--platform", str(self.platform), "-o", "json")
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads((self.home / "local-head.json").read_text())

    def submit(self, spec: dict) -> str:
        path = self.root / f"{spec['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(spec))
        result = self.cli("submit", str(path), "-o", "json")
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout)["id"]

    def state(self, job_id: str) -> str:
        result = self.cli("status", job_id, "-o", "json", timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout)["state"]

    def leftovers(self, head: dict, job_id: str) -> list[str]:
        """Every live process of this head, described."""
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                line, env = " ".join(proc.cmdline()), proc.environ()
            except psutil.Error:
                continue
            if head["temp_dir"] in line or f"cuberay.run {job_id}" in line \
                    or env.get("CUBERAY_HOME") == self.env["CUBERAY_HOME"] or env.get("RAY_ADDRESS") == head["address"]:
                found.append(f"{proc.pid} (parent {proc.ppid()}): {line[:160]}")
        return found


@pytest.fixture
def local() -> Iterator[LocalHead]:
    root = Path(tempfile.mkdtemp(prefix="cr", dir="/tmp"))  # short: Ray's socket paths stay under 108 bytes
    env = own_head_env(root)
    head = LocalHead(root, env, scratch_platform(REPO_ROOT / "configs" / "platform.yaml", root))
    try:
        yield head
    finally:
        if (head.home / "local-head.json").exists():
            head.cli("down", timeout=120)
        kill_leftovers(env)
        shutil.rmtree(root, ignore_errors=True)


def stored_state(local: LocalHead, job_id: str) -> str:
    """The job's state in the platform's database, read directly (the platform is down)."""
    from cuberay.platform.control.store import Store
    from cuberay.platform.spec import load_platform

    with Store(load_platform(local.platform).database_url()) as store:
        return store.get_job(job_id).state.value


def sleeper(name: str) -> dict:
    """A 2-worker Task: it runs as a Ray Job with a `python -m cuberay.run` driver (one worker would be a small job)."""
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": "research"},
            "spec": {"workers": 2, "resources": {"cpu": "250m", "memory": "128Mi"}, "command": "sleep 600"}}


def drivers(job_id: str) -> list[psutil.Process]:
    """The job's Ray Job driver, as Ray's job supervisor started it."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.cmdline()[1:4] == ["-m", "cuberay.run", job_id]:
                found.append(proc)
        except (psutil.Error, IndexError):
            continue
    return found


def connected(proc: psutil.Process, address: str) -> bool:
    """Whether ``proc`` holds a TCP connection to the head's GCS (``ray.init`` has reached it)."""
    port = int(address.rsplit(":", 1)[1])
    try:
        return any(c.raddr and c.raddr.port == port for c in proc.net_connections(kind="tcp"))
    except psutil.Error:
        return False


def ended(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def ray_jobs(local: LocalHead, head: dict) -> list[dict]:
    """Every Ray Job the head's dashboard lists, drivers of plain `ray.init` connections included."""
    token = (Path(local.env["HOME"]) / ".ray" / "auth_token").read_text().strip()
    request = urllib.request.Request(f"{head['dashboard_url']}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def cli_reads_are_no_ray_drivers(local: LocalHead, head: dict) -> None:
    """The CLI's reads go to the head's API server: they answer, and none of them is a Ray Job of its own in the
    dashboard; the same read over Ray is one (so the count can tell)."""
    assert head.get("api_url", "").startswith("http://127.0.0.1:"), head
    before = len(ray_jobs(local, head))
    for argv in (["queue"], ["tenants", "-o", "json"]):
        result = local.cli(*argv)
        assert result.returncode == 0, result.stdout + result.stderr
    assert len(ray_jobs(local, head)) == before, ray_jobs(local, head)
    console = local.cli("console")  # the console is served by the same server
    assert console.returncode == 0 and console.stdout.strip() == head["api_url"] + "/", console.stdout + console.stderr
    with urllib.request.urlopen(console.stdout.strip(), timeout=30) as page:
        assert b"cuberay console" in page.read() and "script-src 'self'" in page.headers["Content-Security-Policy"]
    over_ray = subprocess.run([sys.executable, "-m", "cuberay", "queue"], env={**local.env, "CUBERAY_TRANSPORT": "ray"},
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert over_ray.returncode == 0, over_ray.stdout + over_ray.stderr
    wait_for(lambda: len(ray_jobs(local, head)) == before + 1, 30, "the read over Ray to show as a Ray Job")


@pytest.mark.timeout(480)
def test_down_stops_running_and_admitted_jobs_drivers_and_every_process_of_the_head(local: LocalHead) -> None:
    """One head, two jobs: one RUNNING with a connected driver, one ADMITTED whose driver has not connected yet.

    (One head for both cases: starting a head is most of the cost.) Down stops both drivers and every process
    of the head, and puts both jobs back in the queue.
    """
    head = local.up()
    cli_reads_are_no_ray_drivers(local, head)
    job_id = local.submit(sleeper("sleeper"))
    wait_for(lambda: local.state(job_id) == "RUNNING", 180, f"{job_id} to run", poll_s=1.0)
    # RUNNING comes when the Ray Job is submitted; its supervisor starts the driver moments later.
    found = wait_for(lambda: (d := drivers(job_id)) and connected(d[0], head["address"]) and d, 120,
                     f"{job_id}'s Ray Job driver to connect", poll_s=0.5)
    assert local.leftovers(head, job_id)  # the check below sees the head's processes

    admitted_id = local.submit(sleeper("admitted"))
    driver = wait_for(lambda: drivers(admitted_id), 180, f"{admitted_id}'s driver to start", poll_s=0.05)[0]
    assert not connected(driver, head["address"]), "the driver connected already: down came too late to test"

    down = local.cli("down", timeout=120)
    assert down.returncode == 0 and "cuberay is down." in down.stderr, down.stdout + down.stderr
    wait_for(lambda: not local.leftovers(head, job_id) and not local.leftovers(head, admitted_id), 15,
             "no process of the stopped head", poll_s=0.5)
    assert all(ended(d) for d in found)
    assert ended(driver)
    assert stored_state(local, job_id) == "QUEUED", "the stopped job is back in the queue, not left RUNNING"
    assert stored_state(local, admitted_id) == "QUEUED", "the admitted job is back in the queue, not left RUNNING"
    assert not (local.home / "local-head.json").exists() and not Path(head["temp_dir"]).exists()
    # Again: nothing of ours is left, and no other Ray on this machine (the session's cluster) is joined.
    again = local.cli("down", timeout=60)
    assert again.returncode == 0 and "Nothing to stop" in again.stderr, again.stdout + again.stderr
