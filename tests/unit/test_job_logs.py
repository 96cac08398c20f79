"""A job's logs read attempt by attempt from a byte offset (control/logs.py), on real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.errors import NotFoundError, SpecError
from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import logs
from cuberay.platform.control.convert import submission_id
from cuberay.platform.control.small import log_file
from cuberay.platform.policy.states import JobState

JOB = "a-x-1"


def record(attempts: int, state: JobState = JobState.RUNNING, *, driver: str = "launcher",
           sid: str | None = "current") -> JobRecord:
    if sid == "current":
        sid = submission_id(JOB, attempts) if attempts else None
    return JobRecord(id=JOB, tenant="a", name="x", kind="Task", user="u", spec={}, state=state, priority=0,
                     submit_time=0.0, seq=1, attempts=attempts, submission_id=sid, driver=driver)


def no_jobs_api(sid: str) -> str:
    raise AssertionError(f"the Jobs API was asked for {sid}, though its log is a file here")


def sources(tmp_path: Path, full_text=no_jobs_api) -> logs.Sources:
    drivers = tmp_path / "ray-logs"
    return logs.Sources(tmp_path / "storage", lambda sid: drivers / f"job-driver-{sid}.log", full_text)


def small_log(tmp_path: Path, attempt: int, text: str | bytes) -> Path:
    path = log_file(tmp_path / "storage", JOB, submission_id(JOB, attempt))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        out.write(text.encode() if isinstance(text, str) else text)
    return path


def driver_log(tmp_path: Path, sid: str, text: str) -> Path:
    path = tmp_path / "ray-logs" / f"job-driver-{sid}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(text)
    return path


def test_a_read_from_an_offset_returns_only_what_came_since(tmp_path: Path) -> None:
    small_log(tmp_path, 1, "one\ntwo\n")
    first = logs.read(record(1), None, 0, logs.CHUNK, sources(tmp_path))
    assert (first.attempt, first.text, first.next_offset, first.more) == (1, "one\ntwo\n", 8, False)
    again = logs.read(record(1), None, first.next_offset, logs.CHUNK, sources(tmp_path))
    assert (again.text, again.next_offset) == ("", 8)
    small_log(tmp_path, 1, "three\n")
    new = logs.read(record(1), None, again.next_offset, logs.CHUNK, sources(tmp_path))
    assert (new.offset, new.text, new.next_offset) == (8, "three\n", 14)


def test_a_read_returns_at_most_its_limit_and_says_more_is_there(tmp_path: Path) -> None:
    small_log(tmp_path, 1, "0123456789")
    seen, offset = [], 0
    while True:
        chunk = logs.read(record(1), 1, offset, 4, sources(tmp_path))
        seen.append(chunk.text)
        offset = chunk.next_offset
        if not chunk.more:
            break
    assert seen == ["0123", "4567", "89"]


def test_a_character_cut_by_the_limit_or_half_written_waits_for_the_next_read(tmp_path: Path) -> None:
    small_log(tmp_path, 1, "aé€")  # 1 + 2 + 3 bytes
    cut = logs.read(record(1), 1, 0, 5, sources(tmp_path))
    assert (cut.text, cut.next_offset, cut.more) == ("aé", 3, True)
    assert logs.read(record(1), 1, 3, 5, sources(tmp_path)).text == "€"
    small_log(tmp_path, 1, "ü".encode()[:1])  # the writer has written half a character so far
    half = logs.read(record(1), 1, 6, 100, sources(tmp_path))
    assert (half.text, half.next_offset, half.more) == ("", 6, False)
    small_log(tmp_path, 1, "ü".encode()[1:])
    assert logs.read(record(1), 1, 6, 100, sources(tmp_path)).text == "ü"


def test_a_half_character_at_the_end_of_a_finished_log_is_replaced_not_held_back(tmp_path: Path) -> None:
    small_log(tmp_path, 1, b"ok\xc3")
    chunk = logs.read(record(1, JobState.FAILED), 1, 0, 100, sources(tmp_path))
    assert (chunk.text, chunk.next_offset, chunk.terminal) == ("ok\ufffd", 3, True)


def test_attempts_are_told_apart_by_number_whatever_their_lengths(tmp_path: Path) -> None:
    small_log(tmp_path, 1, "first attempt, long: " + "x" * 100 + "\n")
    small_log(tmp_path, 2, "second\n")
    rec = record(2)
    latest = logs.read(rec, None, 0, logs.CHUNK, sources(tmp_path))
    assert (latest.attempt, latest.latest_attempt, latest.text) == (2, 2, "second\n")
    assert logs.read(rec, 1, 0, logs.CHUNK, sources(tmp_path)).text.startswith("first attempt")
    # An offset into attempt 1 means nothing in attempt 2: reads name their attempt.
    assert logs.read(rec, 1, 6, logs.CHUNK, sources(tmp_path)).text.startswith("attempt, long")
    with pytest.raises(NotFoundError, match="no attempt 3: it has 2 so far"):
        logs.read(rec, 3, 0, logs.CHUNK, sources(tmp_path))


def test_ray_job_drivers_are_read_from_rays_driver_log_file(tmp_path: Path) -> None:
    driver_log(tmp_path, submission_id(JOB, 1), "attempt one\n")
    driver_log(tmp_path, submission_id(JOB, 2), "attempt two\nmore\n")
    rec = record(2)
    assert logs.read(rec, 1, 0, logs.CHUNK, sources(tmp_path)).text == "attempt one\n"
    assert logs.read(rec, 2, 12, logs.CHUNK, sources(tmp_path)).text == "more\n"


def test_a_driver_log_on_another_node_comes_whole_from_the_jobs_api_and_is_sliced(tmp_path: Path) -> None:
    asked = []

    def jobs_api(sid: str) -> str:
        asked.append(sid)
        return "héllo\nworld\n"

    chunk = logs.read(record(1), None, 7, logs.CHUNK, sources(tmp_path, jobs_api))
    assert (chunk.text, chunk.next_offset, asked) == ("world\n", 13, [submission_id(JOB, 1)])


def test_a_driver_ray_does_not_know_reads_as_empty(tmp_path: Path) -> None:
    def gone(sid: str) -> str:
        raise NotFoundError(f"Ray has no job {sid}")

    chunk = logs.read(record(1), None, 0, logs.CHUNK, sources(tmp_path, gone))
    assert (chunk.text, chunk.next_offset, chunk.more) == ("", 0, False)


def test_before_any_attempt_or_before_its_driver_starts_there_is_nothing_to_read(tmp_path: Path) -> None:
    queued = logs.read(record(0, JobState.QUEUED), None, 0, logs.CHUNK, sources(tmp_path))
    assert (queued.attempt, queued.latest_attempt, queued.text, queued.terminal) == (0, 0, "", False)
    with pytest.raises(NotFoundError, match="none has started yet"):
        logs.read(record(0, JobState.QUEUED), 1, 0, logs.CHUNK, sources(tmp_path))
    admitted = record(2, JobState.ADMITTED, sid=None)  # attempt 2 admitted, its driver not submitted yet
    chunk = logs.read(admitted, None, 0, logs.CHUNK, sources(tmp_path))  # no_jobs_api: Ray is not asked
    assert (chunk.attempt, chunk.text) == (2, "")
    cancelled = logs.read(record(0, JobState.CANCELLED), None, 0, logs.CHUNK, sources(tmp_path))
    assert cancelled.terminal and cancelled.latest_attempt == 0


def test_an_external_drivers_one_ray_job_is_one_log_whatever_the_attempt(tmp_path: Path) -> None:
    driver_log(tmp_path, "raysubmit_abc", "waiting\nrunning\n")
    rec = record(3, driver="external", sid="raysubmit_abc")
    chunk = logs.read(rec, None, 0, logs.CHUNK, sources(tmp_path))
    assert (chunk.attempt, chunk.latest_attempt, chunk.text) == (1, 1, "waiting\nrunning\n")


def test_the_latest_attempt_is_terminal_only_once_the_job_ended(tmp_path: Path) -> None:
    small_log(tmp_path, 1, "done\n")
    assert not logs.read(record(1), None, 0, logs.CHUNK, sources(tmp_path)).terminal
    assert logs.read(record(1, JobState.SUCCEEDED), None, 0, logs.CHUNK, sources(tmp_path)).terminal


@pytest.mark.parametrize(("offset", "limit", "problem"), [(-1, 10, "offset >= 0"), (0, 0, "limit >= 1"),
                                                           (99, 10, "past the end of attempt 1")])
def test_bad_offsets_and_limits_are_usage_errors(tmp_path: Path, offset: int, limit: int, problem: str) -> None:
    small_log(tmp_path, 1, "short\n")
    with pytest.raises(SpecError, match=problem):
        logs.read(record(1), 1, offset, limit, sources(tmp_path))


def bytes_read() -> int:
    """What this process has read through read() calls so far (Linux's own count)."""
    return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's per-process I/O counts")
def test_a_read_costs_what_is_new_not_the_log(tmp_path: Path) -> None:
    before = 64 << 20  # 64 MiB of log before the offset (a sparse file: no disk used)
    path = small_log(tmp_path, 1, b"")
    with path.open("r+b") as f:
        f.truncate(before)
        f.seek(before)
        f.write(b"the end\n")
    start = bytes_read()
    chunk = logs.read(record(1), 1, before, logs.CHUNK, sources(tmp_path))
    cost = bytes_read() - start
    assert (chunk.text, chunk.more) == ("the end\n", False)
    assert cost < 1 << 20, f"reading 8 new bytes read {cost} bytes"
