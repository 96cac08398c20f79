"""The job and platform commands against a real controller on the session's Ray cluster.

Most commands run in this process through ``cuberay.cli.main`` (already
connected to the cluster, so they are fast); one test runs ``python -m
cuberay`` as a subprocess with only RAY_ADDRESS to find the cluster, as a user
would.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from cuberay.cli import main
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # rich fits tables to the terminal (80 columns without one); these tests read whole cells.
    monkeypatch.setenv("COLUMNS", "250")




def task_file(tmp_path: Path, name: str, command: str, *, tenant: str = "a", workers: int = 1,
              gpu: str = "0") -> Path:
    """A Task spec on disk, named uniquely (the session's cluster is shared)."""
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"{name}-{uuid.uuid4().hex[:6]}", "tenant": tenant},
            "spec": {"workers": workers, "resources": {"cpu": "1", "gpu": gpu}, "command": command}}
    path = tmp_path / f"{spec['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def py(code: str) -> str:
    return f"{sys.executable} -c \"{code}\""


@pytest.mark.timeout(240)
@pytest.mark.small_jobs  # one-worker Tasks, read through cuberay only
def test_submit_wait_status_logs_and_history(platform, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = task_file(tmp_path, "cli-ok", py("print('cli-marker', flush=True)"))
    code, out, err = cli(capsys, "submit", str(spec), "--wait", "-o", "json")
    assert code == 0, err
    record = json.loads(out)  # stdout is the record and nothing else
    assert record["state"] == "SUCCEEDED" and record["tenant"] == "a" and record["user"] == platform.user
    job_id = record["id"]
    assert f"{job_id}: SUCCEEDED" in err  # the progress lines went to stderr

    code, out, _ = cli(capsys, "status", job_id, "-o", "json")
    assert code == 0 and json.loads(out) == client.status(job_id).model_dump(mode="json")
    code, out, _ = cli(capsys, "status", job_id)
    assert code == 0 and "SUCCEEDED" in out and job_id in out
    code, out, _ = cli(capsys, "logs", job_id)
    assert code == 0 and "cli-marker" in out

    platform_yaml = tmp_path / "platform.yaml"
    platform_yaml.write_text(yaml.safe_dump(platform.spec))
    code, out, err = cli(capsys, "history", "export", "--platform", str(platform_yaml))
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert any(r["tenant"] == "a" and r["workers"] == "1" and float(r["duration"]) > 0 for r in rows), rows


@pytest.mark.timeout(240)
@pytest.mark.small_jobs  # one-worker Tasks, read through cuberay only
def test_submit_prints_next_steps_and_wait_exits_1_on_failure(platform, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    spec = task_file(tmp_path, "cli-fail", py("import sys; sys.exit(3)"))
    code, out, err = cli(capsys, "submit", str(spec), "--wait")
    assert code == 1, err
    job_id = out.splitlines()[0].split("'")[1]
    assert out.splitlines()[0].startswith(f"Job '{job_id}' submitted to tenant ")  # and why that tenant
    assert "Next steps" in err and f"cuberay logs {job_id} -f" in err and "FAILED" in err
    assert client.status(job_id).state == JobState.FAILED


@pytest.mark.timeout(240)
@pytest.mark.small_jobs  # one-worker Tasks, read through cuberay only
def test_submit_count_queues_copies_that_each_run_once(platform, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    spec = task_file(tmp_path, "cli-copies", py("print('copy-ran', flush=True)"))
    code, out, err = cli(capsys, "submit", str(spec), "--count", "3")
    assert code == 0, err
    ids_text, _, where = out.strip().removeprefix("Queued 3 jobs: ").partition(" in ")
    assert where == "tenant a (metadata.tenant)", out
    first, last = ids_text.split(" .. ")
    prefix = first.rsplit("-", 1)[0]
    seq = int(first.rsplit("-", 1)[1])
    ids = [f"{prefix}-{seq + i}" for i in range(3)]
    assert ids[-1] == last
    def ended() -> list | None:
        records = [client.status(i) for i in ids]
        return records if all(r.state.is_terminal for r in records) else None

    records = wait_for(ended, timeout=180, what="the three copies to end")
    assert [r.state for r in records] == [JobState.SUCCEEDED] * 3 and {r.attempts for r in records} == {1}
    assert all("copy-ran" in "".join(client.logs(i)) for i in ids)
    code, _, err = cli(capsys, "submit", str(spec), "--count", "2", "--wait")
    assert code == 2 and "--count takes neither" in err
    huge = task_file(tmp_path, "cli-copies-huge", "true", workers=64)
    code, _, err = cli(capsys, "submit", str(huge), "--count", "2")
    assert code == 3 and "2 copies of Task" in err


@pytest.mark.timeout(240)
def test_queue_shows_a_quota_wait_and_cancel_ends_it(platform, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Tenant a may use at most 8 GPUs: the filler takes all 8, so the next job waits for quota.
    filler = client.submit(task_file(tmp_path, "fill", py("import time; time.sleep(300)"), workers=2, gpu="4"))
    wait_for(lambda: client.status(filler.id).state == JobState.RUNNING, 90, "the filler to run")
    code, out, err = cli(capsys, "submit", str(task_file(tmp_path, "waits", py("print(1)"), gpu="1")))
    assert code == 0, err
    waiter = out.split("'")[1]

    def waiting_entry() -> dict[str, Any] | None:
        code, out, _ = cli(capsys, "queue", "--tenant", "a", "-o", "json")
        assert code == 0
        entries = {e["job_id"]: e for e in json.loads(out)}
        entry = entries.get(waiter)
        # The first reason is "waiting for the next admission cycle"; the cycle then names the quota.
        return entries if entry and entry["position"] == 1 and "max" in entry["reason"] else None

    entries = wait_for(waiting_entry, 30, "the queue to show the waiting job with its quota reason")
    assert entries[filler.id]["state"] == "RUNNING" and entries[filler.id]["position"] is None
    assert entries[waiter]["state"] == "QUEUED" and "tenant 'a'" in entries[waiter]["reason"]
    code, out, _ = cli(capsys, "queue", "--tenant", "a")
    assert code == 0 and "POSITION" in out and waiter in out

    code, out, _ = cli(capsys, "cancel", waiter)
    assert code == 0 and out.strip() == f"Job '{waiter}' cancelled"
    code, out, _ = cli(capsys, "cancel", filler.id, "-o", "json")
    assert code == 0 and json.loads(out)["state"] == "CANCELLED"
    code, _, err = cli(capsys, "cancel", "no-such-job-xyz")
    assert code == 4 and "no-such-job-xyz" in err


def test_tenants_table_and_json(platform, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "tenants", "-o", "json")
    assert code == 0
    usages = {t["name"]: t for t in json.loads(out)}
    assert set(usages) == {"a", "b", "c"}
    assert usages["a"]["guaranteed"]["GPU"] == 4 and usages["a"]["max"]["GPU"] == 8
    assert usages["c"]["max"]["GPU"] == 4 and usages["c"]["in_use"].get("GPU", 0) == 0
    code, out, _ = cli(capsys, "tenants")
    assert code == 0 and "GUARANTEED" in out and "BORROWED" in out and "GPU=8" in out


@pytest.mark.timeout(180)
def test_cli_as_a_subprocess_finds_the_cluster_by_ray_address(platform, ray_cluster) -> None:
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address, "CUBERAY_HOME": str(platform.storage / "home")}
    run = [sys.executable, "-m", "cuberay"]
    listed = subprocess.run([*run, "queue", "-o", "json"], env=env, cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []  # nothing else on stdout, and nothing queued
    missing = subprocess.run([*run, "status", "no-such-job-xyz"], env=env, cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 4, missing.stdout + missing.stderr
    assert "no-such-job-xyz" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.timeout(180)
def test_up_on_an_existing_cluster_then_down(ray_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # A home of its own: `down` stops the local head recorded there, and there must be none.
    monkeypatch.setenv("CUBERAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUBERAY_USER", "tester")
    storage = tmp_path / "storage"
    platform_yaml = tmp_path / "platform.yaml"
    platform_yaml.write_text(yaml.safe_dump({
        "apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "cli-up"},
        "spec": {"storage": str(storage), "tenants": [{"name": "solo", "members": ["tester"]}]}}))
    try:
        code, out, err = cli(capsys, "up", "--platform", str(platform_yaml), "--address", ray_cluster.address,
                             "-o", "json")
        assert code == 0, err
        assert json.loads(out) == {"dashboard_url": ray_cluster.dashboard_url, "storage": str(storage),
                                   "storage_from": f"spec.storage of {platform_yaml}"}
        code, out, _ = cli(capsys, "tenants", "-o", "json")
        assert code == 0 and [t["name"] for t in json.loads(out)] == ["solo"]
    finally:
        code, _, err = cli(capsys, "down")
    assert code == 0, err
    assert (storage / "cuberay.db").is_file()  # the controller kept its state where the file said
    code, _, err = cli(capsys, "queue")
    assert code == 1 and "cuberay up" in err  # no controller any more; the error says how to start one
