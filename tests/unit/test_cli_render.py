"""Rendering of the platform's records and the exit codes of the job commands (no Ray).

The commands are run through ``cuberay.cli.main`` with the client's functions
replaced by stand-ins that return real records: the unit tier cannot start
Ray, and what is checked here is the CLI's side of the contract (which record
goes where, in which format, with which exit code). The same commands run
against a real controller in tests/integration/test_cli.py.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cuberay.cli import main, views
from cuberay.cli.output import Format, emit
from cuberay.platform import client
from cuberay.platform.api.records import JobRecord, QueuePage
from cuberay.platform.client import QueueEntry, TenantUsage
from cuberay.platform.control import head as controller_head
from cuberay.platform.control.store import Store
from cuberay.platform.policy.states import JobState

NOW = 1_700_000_000.0
GiB = 2**30


def record(job_id: str = "vision-digits-ddp-1", state: JobState = JobState.RUNNING, **kw: Any) -> JobRecord:
    values: dict[str, Any] = dict(
        id=job_id, tenant="vision", name="digits-ddp", kind="TrainJob", user="alice",
        spec={"kind": "TrainJob", "spec": {"workers": 2, "resources": {"cpu": "1", "memory": "1Gi"}}},
        state=state, priority=10, submit_time=NOW - 300, seq=1, start_time=NOW - 120, gpus=2.0)
    values.update(kw)
    return JobRecord(**values)


def entry(job_id: str, position: int | None, tenant: str = "vision", reason: str = "") -> QueueEntry:
    state = JobState.RUNNING if position is None else JobState.QUEUED
    return QueueEntry(job_id=job_id, tenant=tenant, name=job_id, kind="Task", state=state, position=position,
                      reason=reason, gpus=0.5, workers=3, age_s=7300.0)


USAGE = TenantUsage(name="vision", guaranteed={"GPU": 2.0, "CPU": 2.0, "memory": 4.0 * GiB},
                    max={"CPU": 4.0, "memory": 8.0 * GiB, "GPU": 4.0}, in_use={"CPU": 3.0},
                    borrowed={"CPU": 1.0}, running=1, queued=2)
SCAVENGER = TenantUsage(name="research", guaranteed={}, max=None, in_use={}, borrowed={}, running=0, queued=0)


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # rich wraps tables to the terminal width (80 without a terminal); these tests read whole cells.
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(client, "current_user", lambda: "alice")


# ------------------------------------------------------------------ views


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (-3, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m"), (3599, "59m"), (7200, "2h"),
    (86399, "23h"), (3 * 86400 + 5, "3d"),
])
def test_span_is_kubectl_style(seconds: float | None, text: str) -> None:
    assert views.span(seconds) == text


def test_job_row_has_age_runtime_and_gpus() -> None:
    row = views.job_row(record(gpus=0.5), now=NOW)
    assert row == {"job": "vision-digits-ddp-1", "tenant": "vision", "name": "digits-ddp", "kind": "TrainJob",
                   "state": "RUNNING", "gpus": "0.5", "age": "5m", "runtime": "2m", "user": "alice"}
    ended = views.job_row(record(state=JobState.SUCCEEDED, end_time=NOW - 60, gpus=2.0), now=NOW)
    assert (ended["runtime"], ended["gpus"]) == ("1m", "2")
    queued = views.job_row(record(state=JobState.QUEUED, start_time=None), now=NOW)
    assert queued["runtime"] == "-"


def test_queue_rows_group_tenants_running_first_then_by_position() -> None:
    rows = views.queue_rows([entry("v-late", 2, reason="behind v-first"), entry("r-run", None, "research"),
                             entry("v-first", 1, reason="vision at its max quota (CPU=4)"), entry("v-run", None)])
    assert [r["job"] for r in rows] == ["r-run", "v-run", "v-first", "v-late"]
    assert [r["position"] for r in rows] == ["-", "-", "1", "2"]
    assert rows[2]["reason"] == "vision at its max quota (CPU=4)"
    assert rows[0]["reason"] == "-" and rows[0]["age"] == "2h" and rows[0]["gpus"] == "0.5"


def test_tenant_rows_show_quota_in_the_spec_grammar() -> None:
    vision, research = views.tenant_rows([USAGE, SCAVENGER])
    assert vision == {"tenant": "vision", "guaranteed": "CPU=2, memory=4Gi, GPU=2",
                      "max": "CPU=4, memory=8Gi, GPU=4", "in_use": "CPU=3", "borrowed": "CPU=1",
                      "running": "1", "queued": "2"}
    assert (research["guaranteed"], research["max"], research["in_use"]) == ("none", "unlimited", "none")


def test_json_of_records_is_their_model_dump(capsys: pytest.CaptureFixture[str]) -> None:
    records = [record(), record("vision-digits-ddp-2", JobState.QUEUED, seq=2, start_time=None)]
    emit(records, Format.json)
    assert json.loads(capsys.readouterr().out) == [r.model_dump(mode="json") for r in records]


def test_json_and_yaml_of_dataclasses_keep_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    entries = [entry("a", None), entry("b", 1, reason="quota")]
    emit(views.plain(entries), Format.json)
    as_json = json.loads(capsys.readouterr().out)
    emit(views.plain([USAGE, SCAVENGER]), Format.yaml)
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    assert as_json[1] == {"job_id": "b", "tenant": "vision", "name": "b", "kind": "Task", "state": "QUEUED",
                          "position": 1, "reason": "quota", "gpus": 0.5, "workers": 3, "age_s": 7300.0}
    assert as_yaml[0]["guaranteed"] == {"GPU": 2.0, "CPU": 2.0, "memory": 4.0 * GiB}
    assert as_yaml[1]["max"] is None


# ------------------------------------------------------------------ commands
# Submit, status, queue, tenants, cancel and their exit codes run against a real in-process controller in
# tests/unit/test_cli_controller.py; the tables below are fed long ids and reasons directly.


def test_queue_and_tenants_tables(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [entry("v-run", None), entry("v-wait", 1, reason="q")]
    monkeypatch.setattr(client, "queue_page", lambda tenant, offset, limit: QueuePage(
        total=250, offset=offset, entries=rows, users={}, ticks=1))
    monkeypatch.setattr(client, "tenants", lambda: [USAGE, SCAVENGER])
    assert main(["queue"]) == 0
    out, err = capsys.readouterr()
    assert "POSITION" in out and "REASON" in out and "v-wait" in out
    assert "rows 1-2 of 250: --offset 100 for the next 100" in err  # a table is a page; it says where the rest is
    assert main(["tenants", "-o", "json"]) == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)] == ["vision", "research"]
    assert main(["tenants"]) == 0
    out = capsys.readouterr().out
    assert "GUARANTEED" in out and "BORROWED" in out and "unlimited" in out and "CPU=2, memory=4Gi, GPU=2" in out


LONG_ID = "vision-a-very-long-job-name-for-the-digits-model-sweep-12"
LONG_REASON = ("tenant 'vision' is at its max CPU: 2 in use + 3 asked > max 4; it waits until a job of vision "
               "ends or an admin raises tenants.vision.quota.max.cpu")


def _column(lines: list[str], index: int) -> str:
    """The text of one table column, its wrapped lines joined (rich folds on spaces or inside a long word)."""
    cells = [line.split("│")[index].strip() for line in lines if line.startswith("│")]
    return "".join(cells)


def test_tables_in_a_pipe_never_cut_ids_and_wrap_reasons(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # what rich assumes when stdout is not a terminal
    rows = [entry(LONG_ID, 1, reason=LONG_REASON), entry("TrainJob-short-1", None, reason="running on 2 workers")]
    monkeypatch.setattr(client, "queue_page", lambda tenant, offset, limit: QueuePage(
        total=2, offset=offset, entries=rows, users={}, ticks=1))
    assert main(["queue"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(LONG_ID in line for line in lines), out  # the whole id, on one line
    assert any("TrainJob-short-1" in line for line in lines) and "…" not in out
    assert LONG_REASON.replace(" ", "") in _column(lines, -2).replace(" ", ""), out  # all of the reason...
    assert sum(1 for line in lines if "│" in line and line.split("│")[-2].strip()) > 4, out  # ...wrapped


def test_tables_fit_the_console_when_the_ids_do(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(client, "status", lambda job: record(LONG_ID, JobState.QUEUED, reason=LONG_REASON))
    assert main(["status", LONG_ID]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(LONG_ID in line for line in lines)
    assert LONG_REASON.replace(" ", "") in _column(lines, 2).replace(" ", "")


# ------------------------------------------------------------------ history export (a real SQLite store)


def _platform_file(tmp_path: Path) -> Path:
    storage = tmp_path / "storage"
    text = (Path(__file__).resolve().parents[2] / "configs" / "platform.yaml").read_text()
    path = tmp_path / "platform.yaml"
    assert "  storage: null" in text  # the bundled file keeps its data in cuberay's home
    path.write_text(text.replace("  storage: null", f"  storage: {storage}", 1))
    return path


def test_history_export_writes_finished_jobs_as_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plat = _platform_file(tmp_path)
    (tmp_path / "storage").mkdir()
    with Store(f"sqlite:///{tmp_path / 'storage' / 'cuberay.db'}") as store:
        store.add_job(record("vision-a-1", JobState.SUCCEEDED, submit_time=100.0, start_time=110.0, end_time=150.0))
        store.add_job(record("vision-b-1", JobState.FAILED, name="b", submit_time=130.0, start_time=131.0,
                             end_time=132.5))
        store.add_job(record("vision-c-1", JobState.RUNNING, name="c", submit_time=140.0, start_time=141.0))
    out = tmp_path / "trace.csv"
    assert main(["history", "export", "--platform", str(plat), "--out", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [(r["submit_time"], r["duration"], r["workers"], r["cpus"], r["tenant"]) for r in rows] == [
        ("0", "40", "2", "1", "vision"), ("30", "1.5", "2", "1", "vision")]
    assert "exported 2 finished job(s)" in capsys.readouterr().err
    assert main(["history", "export", "--platform", str(plat)]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("submit_time,duration")


def test_history_export_without_a_database_is_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "export", "--platform", str(_platform_file(tmp_path))]) == 4
    assert "cuberay up" in capsys.readouterr().err
    assert main(["history", "export", "--platform", str(tmp_path / "missing.yaml")]) == 2


def test_every_platform_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("up", "down", "tenants", "demo", "submit", "run", "queue", "status", "logs", "cancel"):
        assert main([command, "--help"]) == 0, command
    assert main(["history", "export", "--help"]) == 0
    capsys.readouterr()
    assert main(["submit", "--help"]) == 0
    assert "--wait" in capsys.readouterr().out


# ------------------------------------------------------------------ the demo's pure helpers


def test_demo_platform_copy_keeps_tenants_and_moves_storage(tmp_path: Path) -> None:
    from cuberay.platform import demo
    from cuberay.platform.spec import load_platform

    source = Path(__file__).resolve().parents[2] / "configs" / "platform.yaml"
    copy = load_platform(demo.scratch_platform(source, tmp_path))
    original = load_platform(source)
    assert [t.name for t in copy.tenants] == [t.name for t in original.tenants]
    assert copy.database_url() == f"sqlite:///{tmp_path / 'storage' / 'cuberay.db'}"
    assert all(t.storage == f"{tmp_path / 'storage'}/{t.name}" for t in copy.tenants)
    assert controller_head.head_cpus(original) >= 6  # the node pools' CPUs: the three demo jobs fit at once


def test_demo_submits_as_a_member_of_each_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    from cuberay.platform import demo
    from cuberay.platform.spec import load_platform

    plat = load_platform(Path(__file__).resolve().parents[2] / "configs" / "platform.yaml")
    monkeypatch.setattr(client, "current_user", lambda: "somebody-else")
    assert demo.submitter(plat, "vision") == "somebody-else"    # the local platform lets everyone in ("*")
    assert demo.submitter(plat, "research") == "somebody-else"
    strict = plat.model_copy(update={"spec": plat.spec.model_copy(update={"tenants": [
        t.model_copy(update={"members": ["bob"]}) if t.name == "vision" else t for t in plat.tenants]})})
    assert demo.submitter(strict, "vision") == "alice"          # its admin: the caller is not a member
    monkeypatch.setattr(client, "current_user", lambda: "carol")
    assert demo.submitter(plat, "nlp") == "carol"


def test_demo_reads_the_final_accuracy_from_the_runner_log(monkeypatch: pytest.MonkeyPatch) -> None:
    from cuberay.platform import demo

    log = ('cuberay: final metrics {"epoch": 3, "loss": 0.21, "accuracy": 0.9611, "world_size": 2}\n'
           "cuberay: checkpoint /tmp/x\n")
    monkeypatch.setattr(client, "logs", lambda job, follow=False: iter([log]))
    assert demo.final_accuracy(record(state=JobState.SUCCEEDED, message="Ray Job x succeeded")) == 0.9611
    assert demo.final_accuracy(record(state=JobState.SUCCEEDED, message="accuracy=0.5")) == 0.5
    monkeypatch.setattr(client, "logs", lambda job, follow=False: iter(["no metrics here"]))
    assert demo.final_accuracy(record(state=JobState.FAILED, message="boom")) is None


def test_a_long_table_is_plain_aligned_text_with_every_cell_whole(capsys: pytest.CaptureFixture[str]) -> None:
    from cuberay.cli.output import PLAIN_ROWS

    rows = [{"job": f"q-bench-{i}", "reason": "waiting for tenant q's max\n(cpu 1 in use of 1)"}
            for i in range(PLAIN_ROWS + 1)]
    emit(rows, Format.table, columns=("job", "reason"))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == PLAIN_ROWS + 2 and lines[0].split() == ["JOB", "REASON"]
    assert lines[-1] == f"q-bench-{PLAIN_ROWS}  waiting for tenant q's max (cpu 1 in use of 1)"
    assert {line.index("waiting") for line in lines[1:]} == {lines[0].index("REASON")}  # one column, aligned
