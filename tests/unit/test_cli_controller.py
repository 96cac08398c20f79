"""The CLI and the client against a real controller in this process, with Ray left out.

The controller is the real one (its store, admission core and access rules) on a cluster without Ray
(tests/unit/local_cluster.py); the client's calls reach it through the in-process transport, so what the CLI
sends is checked against the protocol and the rules, and what it prints comes from real records. The same
commands run against Ray in tests/integration/test_cli.py.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from cuberay.cli import main
from cuberay.platform import client
from cuberay.platform.api.records import JobRecord
from cuberay.platform.policy.states import JobState
from cuberay.platform.transport.in_process import InProcess
from tests.support import wait_for
from tests.unit.local_cluster import controller  # noqa: F401 (a fixture)


def task(name: str, tenant: str = "vision", gpu: str = "1", workers: int = 2) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": tenant},
            "spec": {"workers": workers, "resources": {"cpu": "1", "memory": "1Gi", "gpu": gpu},
                     "command": "echo hi"}}


def spec_file(tmp_path: Path, spec: dict[str, Any]) -> str:
    path = tmp_path / f"{spec['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def running(local: InProcess, job_id: str) -> JobRecord:
    with client.acting_as("ops"):
        return wait_for(lambda: (r := client.status(job_id)).state == JobState.RUNNING and r, 30, f"{job_id} to run")


@pytest.fixture
def alice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBERAY_USER", "alice")
    monkeypatch.setenv("COLUMNS", "250")


def test_submit_status_queue_and_tenants_through_the_real_controller(controller: InProcess, alice: None,  # noqa: F811
                                                                     tmp_path: Path, capsys) -> None:
    assert main(["submit", spec_file(tmp_path, task("train")), "-o", "json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["id"]
    assert job_id == "vision-train-1"
    record = running(controller, job_id)
    assert record.user == "alice" and len(record.allocation or []) == 2
    assert main(["status", job_id]) == 0
    out = capsys.readouterr().out
    assert "RUNNING" in out and "running as Ray Job cuberay-vision-train-1" in out
    assert main(["queue"]) == 0
    assert "vision-train-1" in capsys.readouterr().out
    assert main(["tenants", "-o", "json"]) == 0
    usage = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert usage["vision"]["in_use"]["GPU"] == 2.0 and usage["nlp"]["running"] == 0
    # The driver the launcher started carries its attempt's secret and its submitter's name, and nothing else
    # holds that secret: the store keeps its hash.
    launched = controller.cluster.launched.jobs["cuberay-vision-train-1"]
    assert launched["metadata"]["job_name"] == "train"  # the Ray dashboard's Jobs tab shows it as the Name
    env = launched["env"]
    assert env["CUBERAY_USER"] == "alice" and len(env["CUBERAY_DRIVER_TOKEN"]) > 30
    assert env["CUBERAY_DRIVER_TOKEN"] not in json.dumps(record.model_dump(mode="json"))


def test_a_drivers_end_is_the_jobs_end(controller: InProcess, alice: None, tmp_path: Path, capsys) -> None:  # noqa: F811
    ref = client.submit(task("short"))
    running(controller, ref.id)
    controller.cluster.launched.finish("cuberay-vision-short-1", "SUCCEEDED", "final line\n")
    record = client.wait(ref, timeout=30, poll_s=0.05)
    assert record.state == JobState.SUCCEEDED and record.reason == ""
    assert main(["logs", ref.id]) == 0
    assert "final line" in capsys.readouterr().out


def test_exit_codes_come_from_the_controllers_own_refusals(controller: InProcess, alice: None,  # noqa: F811
                                                           tmp_path: Path, capsys) -> None:
    assert main(["status", "vision-nothing-9"]) == 4  # not found
    assert main(["submit", spec_file(tmp_path, task("huge", gpu="1", workers=9))]) == 3  # over the tenant's max
    assert main(["submit", spec_file(tmp_path, task("theirs", tenant="nlp"))]) == 3  # not a member
    with client.acting_as("nina"):
        theirs = client.submit(task("nlp-job", tenant="nlp", gpu="0", workers=1))
    assert main(["status", theirs.id]) == 3 and main(["cancel", theirs.id]) == 3  # another tenant's job
    err = capsys.readouterr().err
    assert "Traceback" not in err and "may not see job nlp-nlp-job-1" in err
    with client.acting_as("ops"):
        denied = [e for e in client.api().events(None, None) if e.kind == "denied"]
    assert len(denied) == 3, [e.message for e in denied]  # submit to nlp, status and cancel of nina's job


def test_a_job_waits_with_its_reason_and_runs_when_the_blocker_is_cancelled(controller: InProcess,  # noqa: F811
                                                                            alice: None, capsys) -> None:
    big = client.submit(task("big", gpu="2", workers=2))  # the whole GPU node
    running(controller, big.id)
    waiting = client.submit(task("next", gpu="1", workers=1))
    reason = wait_for(lambda: client.status(waiting.id).reason, 30, "a waiting reason")
    assert client.status(waiting.id).state == JobState.QUEUED and reason
    assert main(["queue", "-o", "json"]) == 0
    rows = {r["job_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[waiting.id]["position"] == 1
    # A table is a page: the running job first, then the footer says where the waiting one is.
    assert main(["queue", "--limit", "1"]) == 0
    out, err = capsys.readouterr()
    assert big.id in out and waiting.id not in out and "rows 1-1 of 2: --offset 1 --limit 1 for the next 1" in err
    assert main(["queue", "--limit", "1", "--offset", "1", "-o", "json"]) == 0
    assert [r["job_id"] for r in json.loads(capsys.readouterr().out)] == [waiting.id]
    assert main(["queue", "--offset", "1", "-o", "json"]) == 0  # every row from the offset on
    assert [r["job_id"] for r in json.loads(capsys.readouterr().out)] == [waiting.id]
    assert main(["queue", "--offset", "5"]) == 2
    assert "--offset 5 is past the end of the queue (2 rows): give an offset from 0 to 1" in capsys.readouterr().err
    assert main(["cancel", big.id]) == 0
    running(controller, waiting.id)


def test_submit_prints_the_id_and_next_steps_and_a_repeated_request_id_returns_the_same_job(
        controller: InProcess, alice: None, tmp_path: Path, capsys) -> None:  # noqa: F811
    path = spec_file(tmp_path, task("steps"))
    assert main(["submit", path]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "Job 'vision-steps-1' submitted to tenant vision (metadata.tenant)"
    for line in ("Next steps", "cuberay status vision-steps-1", "cuberay logs vision-steps-1 -f",
                 "cuberay cancel vision-steps-1"):
        assert line in err
    assert main(["submit", path, "--request-id", "ci-build-42", "-o", "json"]) == 0
    first = json.loads(capsys.readouterr().out)["id"]
    assert main(["submit", path, "--request-id", "ci-build-42", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == first == "vision-steps-2"
    assert main(["submit", path, "--request-id", "ci-build-42"]) == 0  # a repeat says it is one
    assert re.fullmatch(r"Job 'vision-steps-2' was submitted before with this request id: nothing new was "
                        r"queued \(it is (queued|admitted|running)\)", capsys.readouterr().out.splitlines()[0])
    assert main(["submit", path, "--request-id", "ci-build-43"]) == 0  # a new id is a new job
    assert capsys.readouterr().out.splitlines()[0].startswith("Job 'vision-steps-3' submitted to tenant vision")


def test_cancel_says_whether_it_cancelled_or_the_job_had_ended(controller: InProcess, alice: None,  # noqa: F811
                                                                tmp_path: Path, capsys) -> None:
    path = spec_file(tmp_path, task("ends"))
    assert main(["submit", path]) == 0
    capsys.readouterr()
    assert main(["cancel", "ends"]) == 0 and capsys.readouterr().out.strip() == "Job 'vision-ends-1' cancelled"
    assert main(["cancel", "ends"]) == 0
    assert capsys.readouterr().out.strip() == "Job 'vision-ends-1' had already ended (cancelled): nothing to cancel"


@pytest.mark.parametrize(("end", "code"), [("SUCCEEDED", 0), ("FAILED", 1), ("STOPPED", 0)])
def test_submit_wait_exit_code_follows_the_end_state(controller: InProcess, alice: None, tmp_path: Path,  # noqa: F811
                                                     capsys, monkeypatch: pytest.MonkeyPatch, end: str,
                                                     code: int) -> None:
    monkeypatch.setattr("cuberay.cli.progress.POLL_S", 0.05)
    launcher = controller.cluster.launched

    def end_it() -> None:  # the driver ends as Ray would report it
        wait_for(lambda: "cuberay-vision-waited-1" in launcher.jobs, 30, "the driver to start", poll_s=0.02)
        launcher.finish("cuberay-vision-waited-1", end, "boom\n" if end == "FAILED" else "")

    threading.Thread(target=end_it, daemon=True).start()
    assert main(["submit", spec_file(tmp_path, task("waited")), "--wait", "-o", "json"]) == code
    out, err = capsys.readouterr()
    state = {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED", "STOPPED": "CANCELLED"}[end]
    assert json.loads(out)["state"] == state  # stdout holds the record and nothing else
    assert f": {state}" in err
    if end == "FAILED":
        assert "cuberay logs vision-waited-1" in err


def test_status_json_is_the_record_only_and_the_table_is_field_value(controller: InProcess, alice: None,  # noqa: F811
                                                                      capsys) -> None:
    ref = client.submit(task("shown"))
    running(controller, ref.id)
    assert main(["status", ref.id, "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == client.status(ref.id).model_dump(mode="json") and err == ""
    assert main(["status", ref.id]) == 0
    out = capsys.readouterr().out
    assert "FIELD" in out and "RUNNING" in out and "shown" in out


def test_history_list_shows_the_callers_ended_jobs_and_not_found_points_to_it(
        controller: InProcess, alice: None,  # noqa: F811
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["submit", spec_file(tmp_path, task("ended")), "-o", "json"]) == 0
    mine = json.loads(capsys.readouterr().out)
    running(controller, mine["id"])
    controller.cluster.launched.finish(f"cuberay-{mine['id']}", "SUCCEEDED")
    wait_for(lambda: client.status(mine["id"]).state == JobState.SUCCEEDED, 30, "the job to end")
    with client.acting_as("nina"):
        theirs = client.submit(task("other", tenant="nlp", gpu="0"), "nlp")
        client.cancel(theirs.id)
    assert main(["history", "list", "-o", "json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [mine["id"]]  # nlp's job is not alice's
    assert main(["history", "list"]) == 0
    out = capsys.readouterr().out
    assert mine["id"] in out and "SUCCEEDED" in out and theirs.id not in out
    assert main(["queue"]) == 0 and mine["id"] not in capsys.readouterr().out  # the queue lists no ended job
    assert main(["status", "vision-nothing-9"]) == 4
    assert "`cuberay history list` ended ones" in capsys.readouterr().err
    monkeypatch.setenv("CUBERAY_USER", "nina")
    assert main(["history", "list", "--tenant", "vision", "-o", "json"]) == 0  # lists hold what one may read
    assert json.loads(capsys.readouterr().out) == []
