"""Paged reads (the console's Queue and Jobs tables): one page and the count, through the real controller's
access rules, equal to the slice of the whole list the unpaged calls return."""

from __future__ import annotations

import pytest

from cuberay.errors import AdmissionError, SpecError
from cuberay.platform import client
from cuberay.platform.transport.in_process import InProcess
from tests.unit.local_cluster import controller  # noqa: F401 (a fixture)
from tests.unit.test_cli_controller import running, task


def submit_as(user: str, spec: dict) -> str:
    with client.acting_as(user):
        return client.submit(spec).id


@pytest.fixture
def backlog(controller: InProcess) -> dict[str, list[str]]:  # noqa: F811
    """vision: alice's job running and four waiting (bob's last); nlp: nina's three waiting."""
    ids = {"vision": [submit_as("alice", task("run", gpu="2", workers=2))]}
    running(controller, ids["vision"][0])
    ids["vision"] += [submit_as("alice", task(f"wait-{i}", gpu="2", workers=2)) for i in range(3)]
    ids["vision"].append(submit_as("bob", task("bobs", gpu="2", workers=2)))
    ids["nlp"] = [submit_as("nina", task(f"nlp-{i}", tenant="nlp", gpu="2", workers=2)) for i in range(3)]
    controller.tick()
    return ids


def test_a_queue_page_is_the_slice_of_the_whole_queue_with_users_only_where_readable(
        controller: InProcess, backlog: dict[str, list[str]]) -> None:  # noqa: F811
    with client.acting_as("alice"):
        api = client.api()
        whole = client.queue()
        assert len(whole) == 8 and whole[0].position is None  # the running job first
        for offset, limit in ((0, 3), (3, 3), (6, 3), (7, 50)):
            page = api.queue_page(offset=offset, limit=limit)
            assert page.total == 8 and page.offset == offset
            assert [(e.job_id, e.position, e.reason) for e in page.entries] == \
                [(e.job_id, e.position, e.reason) for e in whole[offset:offset + limit]]
        every = api.queue_page(limit=50)
        # alice reads her tenant's jobs (bob's too) and sees who submitted them; nina's are names and sizes only
        assert every.users == {**{i: "alice" for i in backlog["vision"][:4]}, backlog["vision"][4]: "bob"}
        assert [e.job_id for e in api.queue_page(tenant="nlp").entries] == backlog["nlp"]
        assert [e.job_id for e in api.queue_page(state="running").entries] == backlog["vision"][:1]
        assert api.queue_page(state="waiting").total == 7
        assert [e.job_id for e in api.queue_page(user="bob").entries] == backlog["vision"][4:]
        assert api.queue_page(user="nina").total == 0  # a user filter looks within the viewer's own tenants
        with pytest.raises(SpecError, match="'done' is not a queue state"):
            api.queue_page(state="done")
        with pytest.raises(SpecError, match="1 to 1000 rows"):
            api.queue_page(limit=0)


def test_a_job_page_filters_in_the_store_and_counts_what_matches(
        controller: InProcess, backlog: dict[str, list[str]]) -> None:  # noqa: F811
    with client.acting_as("alice"):
        api = client.api()
        page = api.job_page(limit=2)
        assert page.total == 5 and [r.id for r in page.records] == backlog["vision"][:-3:-1]  # newest first
        assert [r.id for r in api.job_page(offset=4, limit=2).records] == backlog["vision"][:1]
        assert api.job_page(tenant="nlp").total == 0  # not readable: not counted either
        assert [r.id for r in api.job_page(user="bob").records] == backlog["vision"][4:]
        assert api.job_page(states=["RUNNING"]).records[0].id == backlog["vision"][0]
        assert api.job_page(name="WAIT").total == 3  # a part of the name, in any case
        assert api.job_page(kinds=["TrainJob"]).total == 0 and api.job_page(kinds=["Task"]).total == 5
        assert api.job_page(since=api.status(backlog["vision"][4]).submit_time).total == 1
        waiting = api.job_page(states=["QUEUED"], limit=1).records[0]
        assert waiting.reason  # the live reason, as status shows it
        with pytest.raises(SpecError, match="'DONE' is not a job state"):
            api.job_page(states=["DONE"])
    with client.acting_as("nina"):
        assert client.api().job_page(name="%").total == 0  # a % is a character to find, not a wildcard
        assert client.api().job_page(name="p-0").total == 1 and client.api().job_page(name="p_0").total == 0


def test_event_counts_count_the_readable_jobs_events_since_a_time(
        controller: InProcess, backlog: dict[str, list[str]]) -> None:  # noqa: F811
    """The overview's "last hour": counted in the store, of what the caller may read, like ``events``."""
    with client.acting_as("alice"):
        api = client.api()
        events = api.events(limit=None)
        cut = sorted(e.time for e in events)[len(events) // 2]
        expected: dict[str, int] = {}
        for e in events:
            if e.time >= cut:
                expected[e.kind] = expected.get(e.kind, 0) + 1
        assert api.event_counts(since=cut) == expected
        assert api.event_counts(since=0.0)["submitted"] == 5  # alice's tenant's five, not nina's three
        assert api.event_counts(since=events[-1].time + 1) == {}
    with client.acting_as("nina"):
        assert client.api().event_counts(since=0.0)["submitted"] == 3
    with client.acting_as("ops"):  # the platform's admin: every tenant's jobs
        counts = client.api().event_counts(since=0.0)
        assert counts["submitted"] == 8


def test_one_jobs_queue_line_is_its_line_in_the_whole_queue_for_members_only(
        controller: InProcess, backlog: dict[str, list[str]]) -> None:  # noqa: F811
    with client.acting_as("alice"):
        api = client.api()
        whole = {e.job_id: e for e in client.queue()}
        for job_id in backlog["vision"][1:]:
            line = api.queue_entry(job_id)
            assert line is not None and whole[job_id].position is not None
            assert (line.position, line.reason) == (whole[job_id].position, whole[job_id].reason)
        assert api.queue_entry(backlog["vision"][0]) is None  # running: it has no place in the queue
    with client.acting_as("nina"), pytest.raises(AdmissionError):
        client.api().queue_entry(backlog["vision"][1])  # another tenant's job: its line is its members'


def test_a_waits_progress_line_names_the_jobs_position(
        controller: InProcess, backlog: dict[str, list[str]]) -> None:  # noqa: F811
    from cuberay.cli import progress

    with client.acting_as("alice"):
        record = client.status(backlog["vision"][2])
        line = progress.waiting_line(record, progress.queue_entry(record))
        position = next(e.position for e in client.queue() if e.job_id == record.id)
    assert line.startswith(f"QUEUED (position {position}): behind "), line


def test_list_jobs_answers_a_bounded_list_and_says_how_to_page_past_it(
        controller: InProcess, backlog: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from cuberay.platform.control import store_pages, views

    for module in (views, store_pages):  # a bound the backlog passes: alice may read vision's 5 jobs
        monkeypatch.setattr(module, "MAX_PAGE", 4)
    with client.acting_as("alice"):
        api = client.api()
        with pytest.raises(SpecError, match="5 jobs match and list_jobs answers at most 4 at once: give a limit"):
            api.list_jobs()
        assert [r.id for r in api.list_jobs(None, None, 4)] == backlog["vision"][1:]  # the newest 4
        assert len(api.list_jobs("vision", ["RUNNING"])) == 1  # narrowed under the bound: answered whole
        with pytest.raises(SpecError, match="limit 5 is not a page size"):
            api.list_jobs(None, None, 5)
