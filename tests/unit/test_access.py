"""The access boundary: every public controller method declares a rule, and the guard applies it.

The guard runs against a real store (SQLite in a temp dir): jobs, driver secrets and ``denied`` events are
rows, as in the controller. Job ids that outlive a database (ids.py) are checked at the end.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from cuberay.errors import AdmissionError, NotFoundError
from cuberay.platform.api import ENDPOINTS, Caller, Endpoint
from cuberay.platform.api.endpoints import rules_table
from cuberay.platform.api.records import JobRecord
from cuberay.platform.control.guard import Guard, new_driver_token, token_hash
from cuberay.platform.control.ids import SeqFloor
from cuberay.platform.control.store import Store
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_platform

REPO = Path(__file__).resolve().parents[2]
PLATFORM = load_platform({
    "apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "p"},
    "spec": {"admins": ["root-ops"], "tenants": [
        {"name": "vision", "members": ["alice", "bob"], "admins": ["vera"]},
        {"name": "nlp", "members": ["nina"], "admins": ["olga"]},
        {"name": "open", "members": ["*"]},
    ]}})


# ---------------------------------------------------------------- the declared surface


def undeclared(cls: type) -> list[str]:
    """Public methods of ``cls`` that wear no declared rule, and declared endpoints it lacks."""
    from cuberay.platform.control.endpoint import declared

    public = {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}
    missing = sorted(name for name in public if declared(getattr(cls, name)) is None)
    return missing + sorted(f"{name} (declared, not implemented)" for name in set(ENDPOINTS) - public)


def test_every_public_controller_method_declares_its_rule() -> None:
    from cuberay.platform.control.controller import Controller

    assert undeclared(Controller) == [], (
        "every public controller method is an endpoint: declare its rule in cuberay/platform/api/endpoints.py "
        "and wrap it with @endpoint, or make it private (a leading underscore)")


def test_the_check_fails_for_a_method_without_a_rule() -> None:
    from cuberay.platform.control.controller import Controller

    class Leaky(Controller):  # type: ignore[misc, valid-type]
        async def peek(self, ref: str) -> None:  # a new public method, no rule
            return None

    assert undeclared(Leaky) == ["peek"]


def test_an_endpoint_wrapper_refuses_a_method_missing_from_the_table() -> None:
    from cuberay.platform.control.endpoint import endpoint

    async def peek(self, who, ref: str) -> None:  # noqa: ANN001
        return None

    with pytest.raises(TypeError, match="no entry in cuberay/platform/api/endpoints.py"):
        endpoint(peek)


def test_the_actor_takes_the_caller_first() -> None:
    from cuberay.platform.control.controller import Controller

    for name in ENDPOINTS:
        params = list(inspect.signature(getattr(Controller, name)).parameters)
        assert params[:2] == ["self", "caller"], (name, params)


def test_the_actor_has_one_concurrency_group_and_every_method_runs_where_it_exists() -> None:
    # Ray starts each group's event loop from a lambda that reads the loop variable late: with a second group
    # the first group's loop can go unrun and its methods hang (the controller's ping never answered).
    from cuberay.platform.control.groups import CONCURRENCY_GROUPS

    assert len(CONCURRENCY_GROUPS) == 1, CONCURRENCY_GROUPS
    for name, declared in ENDPOINTS.items():
        assert declared.concurrency_group in (None, *CONCURRENCY_GROUPS), name


def test_the_actor_ray_runs_takes_every_call_as_the_controller_does() -> None:
    # Ray binds a call's arguments to the actor class's method and runs it in the method's concurrency group: the
    # front (control/actor.py) must present each endpoint exactly as the controller's own method does.
    from cuberay.platform.control.actor import ControllerActor
    from cuberay.platform.control.controller import Controller

    def shape(method: object) -> tuple[object, ...]:
        params = inspect.signature(method).parameters.values()  # type: ignore[arg-type]
        return (*[(p.name, p.default, p.kind) for p in params], getattr(method, "__ray_concurrency_group__", None))

    public = {name for name, _ in inspect.getmembers(ControllerActor, callable) if not name.startswith("_")}
    assert public == set(ENDPOINTS)
    for name in ENDPOINTS:
        assert shape(getattr(ControllerActor, name)) == shape(getattr(Controller, name)), name


def test_taking_the_controllers_handle_loads_none_of_the_controllers_code() -> None:
    # ray.get_actor imports the actor class's module in the caller: a job's driver, the console, a script.
    probe = ("import sys, cuberay.platform.control.actor; "
             "print(' '.join(m for m in sys.modules if m.startswith(('sqlalchemy', 'cuberay.platform.control.',"
             " 'cuberay.platform.policy.admission')) and m != 'cuberay.platform.control.actor'))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], loaded


def test_docs_security_lists_every_method_and_its_rule() -> None:
    doc = REPO / "docs" / "security.md"
    text = doc.read_text()
    begin, end = "<!-- rules: begin (generated from cuberay/platform/api/endpoints.py) -->", "<!-- rules: end -->"
    table = rules_table()
    if __import__("os").environ.get("CUBERAY_UPDATE_GOLDEN") == "1":
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        doc.write_text(f"{head}{begin}\n{table}\n{end}{tail}")
        text = doc.read_text()
    assert f"{begin}\n{table}\n{end}" in text, "docs/security.md's table is stale: run this test with " \
                                               "CUBERAY_UPDATE_GOLDEN=1 and review the diff"


# ---------------------------------------------------------------- the guard


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(f"sqlite:///{tmp_path / 'db.sqlite'}") as s:
        yield s


@pytest.fixture
def guard(store: Store) -> Guard:
    return Guard(lambda: PLATFORM, store, installer="installer")


def add_job(store: Store, tenant: str = "vision", user: str = "alice", name: str = "x", seq: int = 1,
            token: str | None = None) -> JobRecord:
    rec = JobRecord(id=f"{tenant}-{name}-{seq}", tenant=tenant, name=name, kind="Task", user=user, spec={},
                    state=JobState.RUNNING, priority=0, submit_time=float(seq), seq=seq)
    store.add_job(rec, [("submitted", f"by {user}")], driver_token=None if token is None else token_hash(token))
    return rec


def as_(user: str, token: str | None = None) -> Caller:
    return Caller(user=user, token=token)


def denied(store: Store) -> list[str]:
    return [e.message for e in store.events(limit=None) if e.kind == "denied"]


def test_members_read_their_tenants_jobs_others_are_denied_with_the_way_in(store: Store, guard: Guard) -> None:
    add_job(store)
    for user in ("alice", "bob", "vera", "root-ops", "installer"):
        assert guard.admit(ENDPOINTS["status"], as_(user), "vision-x-1").target.id == "vision-x-1"
    for user in ("nina", "olga", "mallory"):
        with pytest.raises(AdmissionError, match=f"user '{user}' may not see job vision-x-1.*vera"):
            guard.admit(ENDPOINTS["status"], as_(user), "vision-x-1")
    assert len(denied(store)) == 3
    assert all(e.job_id == "vision-x-1" for e in store.events(limit=None) if e.kind == "denied")


def test_only_the_submitter_and_the_tenants_admins_cancel(store: Store, guard: Guard) -> None:
    add_job(store)
    for user in ("alice", "vera", "root-ops"):
        guard.admit(ENDPOINTS["cancel"], as_(user), "vision-x-1")
    for user in ("bob", "olga", "mallory"):  # a fellow member, another tenant's admin, a stranger
        with pytest.raises(AdmissionError, match=r"only its submitter \(alice\) and the admins of tenant 'vision'"):
            guard.admit(ENDPOINTS["cancel"], as_(user), "vision-x-1")


def test_a_name_resolves_among_the_callers_jobs_only(store: Store, guard: Guard) -> None:
    add_job(store, "vision", "alice", name="train", seq=1)
    add_job(store, "nlp", "nina", name="train", seq=1)
    # Two jobs are called "train": each user finds their own, and the ambiguity error never lists the other's.
    assert guard.admit(ENDPOINTS["status"], as_("alice"), "train").target.id == "vision-train-1"
    assert guard.admit(ENDPOINTS["status"], as_("nina"), "train").target.id == "nlp-train-1"
    add_job(store, "nlp", "nina", name="only-nlp", seq=1)
    with pytest.raises(AdmissionError, match="may not see the jobs named 'only-nlp'"):
        guard.admit(ENDPOINTS["status"], as_("alice"), "only-nlp")
    with pytest.raises(NotFoundError):
        guard.admit(ENDPOINTS["status"], as_("alice"), "nothing-by-that-name")


def test_no_call_is_the_platforms_without_its_credential(store: Store, guard: Guard) -> None:
    add_job(store)
    for missing in (None, {"user": ""}, {"user": None}, "alice"):
        with pytest.raises(AdmissionError, match="every call says which user"):
            guard.admit(ENDPOINTS["status"], missing, "vision-x-1")
    with pytest.raises(AdmissionError, match="not this controller's"):
        guard.admit(ENDPOINTS["status"], as_("mallory", "platform:guessed"), "vision-x-1")
    platform = guard.platform_caller("pipeline-user")
    assert guard.admit(ENDPOINTS["cancel"], platform, "vision-x-1").is_platform
    other = Guard(lambda: PLATFORM, store)  # another controller process: another credential
    with pytest.raises(AdmissionError):
        other.admit(ENDPOINTS["cancel"], platform, "vision-x-1")


def test_a_driver_reports_for_its_own_job_only(store: Store, guard: Guard) -> None:
    mine, theirs = new_driver_token(), new_driver_token()
    add_job(store, "vision", "alice", name="a", token=mine)
    add_job(store, "nlp", "nina", name="b", token=theirs)
    who = guard.admit(ENDPOINTS["job_report"], as_("anyone", mine), "vision-a-1")
    assert (who.kind, who.job_id) == ("driver", "vision-a-1")
    with pytest.raises(AdmissionError, match="is for the driver of job nlp-b-1"):
        guard.admit(ENDPOINTS["job_report"], as_("anyone", mine), "nlp-b-1")
    for user in ("nina", "olga", "root-ops"):  # no person, not even an admin, reports as a driver
        with pytest.raises(AdmissionError, match="is for the driver of job nlp-b-1"):
            guard.admit(ENDPOINTS["finished"], as_(user), "nlp-b-1")
    with pytest.raises(AdmissionError, match="no current attempt's"):
        guard.admit(ENDPOINTS["finished"], as_("nina", new_driver_token()), "nlp-b-1")
    # A driver reads its own job and what its tenant may: a member's view, not another tenant's.
    assert guard.admit(ENDPOINTS["status"], as_("ray", mine), "vision-a-1").job_id == "vision-a-1"
    guard.admit(ENDPOINTS["train_run"], as_("ray", mine), "vision")
    with pytest.raises(AdmissionError):
        guard.admit(ENDPOINTS["train_run"], as_("ray", mine), "nlp")


def test_a_new_attempt_retires_the_old_attempts_secret(store: Store, guard: Guard) -> None:
    old, new = new_driver_token(), new_driver_token()
    add_job(store, token=old)
    store.update_job("vision-x-1", attempts=2, driver_token=token_hash(new))
    guard.admit(ENDPOINTS["job_report"], as_("x", new), "vision-x-1")
    with pytest.raises(AdmissionError, match="stale attempt"):
        guard.admit(ENDPOINTS["job_report"], as_("x", old), "vision-x-1")
    assert "driver_token" not in store.get_job("vision-x-1").model_dump()  # never handed to callers


def test_tenant_rules_and_platform_admins(store: Store, guard: Guard) -> None:
    guard.admit(ENDPOINTS["submit"], as_("alice"), "vision")
    guard.admit(ENDPOINTS["submit"], as_("alice"), None)  # the caller's own tenant: the method resolves it
    guard.admit(ENDPOINTS["submit"], as_("anyone"), "open")
    with pytest.raises(AdmissionError, match="may not call pipeline_run for tenant 'vision'"):
        guard.admit(ENDPOINTS["pipeline_run"], as_("nina"), "vision")
    for user in ("root-ops", "installer"):
        guard.admit(ENDPOINTS["reload"], as_(user), None)
    with pytest.raises(AdmissionError, match="only platform admins may .root-ops, installer."):
        guard.admit(ENDPOINTS["reload"], as_("vera"), None)


def test_lists_hold_what_the_caller_may_read(store: Store, guard: Guard) -> None:
    add_job(store, "vision", "alice", name="a")
    add_job(store, "nlp", "nina", name="b")
    add_job(store, "nlp", "alice", name="mine-there")  # alice's own job in a tenant she is not in
    store.add_event("node_joined", "a node joined")  # about no job: admins only
    visible = guard.visible_tenants(guard.identify(as_("alice")))
    jobs = store.list_jobs(visible=(visible, "alice"))
    assert {r.id for r in jobs} == {"vision-a-1", "nlp-mine-there-1"}
    assert {e.job_id for e in store.events(limit=None, visible=(visible, "alice"))} == {"vision-a-1",
                                                                                         "nlp-mine-there-1"}
    assert guard.visible_tenants(guard.identify(as_("root-ops"))) is None


@pytest.mark.parametrize("name", sorted(ENDPOINTS))
def test_each_rule_reads_in_words(name: str) -> None:
    endpoint: Endpoint = ENDPOINTS[name]
    assert endpoint.rule.describe() and endpoint.summary.endswith(".")


# ---------------------------------------------------------------- job ids


def test_seq_floor_keeps_ids_above_what_the_cluster_has_seen() -> None:
    kv: dict[bytes, bytes] = {}
    floor = SeqFloor(kv.get, kv.__setitem__)
    assert floor.next("vision", "x", store_next=1) == 1
    floor.record("vision", "x", 1)
    floor.record("vision", "x", 2)
    assert floor.next("vision", "x", store_next=1) == 3  # a fresh database counts from 1 again
    assert floor.next("vision", "x", store_next=7) == 7  # a database ahead of the cluster (a new cluster)
    assert floor.next("vision", "y", store_next=1) == 1 and floor.next("nlp", "x", store_next=1) == 1
