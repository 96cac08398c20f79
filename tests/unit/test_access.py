"""Who may see and cancel a job (access.py), and job ids that outlive a database (ids.py)."""

from __future__ import annotations

from cuberay.platform.control import access
from cuberay.platform.control.ids import SeqFloor
from cuberay.platform.control.store import JobRecord
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_platform

PLATFORM = load_platform({
    "apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "p"},
    "spec": {"tenants": [
        {"name": "vision", "members": ["alice", "bob"], "admins": ["vera"]},
        {"name": "nlp", "members": ["nina"], "admins": ["olga"]},
        {"name": "open", "members": ["*"]},
    ]}})


def job(tenant: str = "vision", user: str = "alice") -> JobRecord:
    return JobRecord(id=f"{tenant}-x-1", tenant=tenant, name="x", kind="Task", user=user, spec={},
                     state=JobState.RUNNING, priority=0, submit_time=0.0, seq=1)


def test_members_read_their_tenants_jobs_others_are_denied_with_the_way_in() -> None:
    for user in ("alice", "bob", "vera"):
        assert access.denial(PLATFORM, job(), user, access.READ) is None
    for user in ("nina", "olga", "mallory"):
        problem = access.denial(PLATFORM, job(), user, access.READ)
        assert problem and f"user {user!r} may not see job vision-x-1" in problem and "vera" in problem


def test_only_the_submitter_and_the_tenants_admins_cancel() -> None:
    assert access.denial(PLATFORM, job(), "alice", access.CANCEL) is None
    assert access.denial(PLATFORM, job(), "vera", access.CANCEL) is None
    for user in ("bob", "olga", "mallory"):  # a fellow member, another tenant's admin, a stranger
        problem = access.denial(PLATFORM, job(), user, access.CANCEL)
        assert problem and "only its submitter (alice) and the admins of tenant 'vision' (vera)" in problem


def test_a_wildcard_tenant_lets_everyone_read_but_not_cancel_others_jobs() -> None:
    assert access.denial(PLATFORM, job("open"), "anyone", access.READ) is None
    assert access.denial(PLATFORM, job("open"), "anyone", access.CANCEL) is not None


def test_a_job_of_a_tenant_no_longer_in_the_platform_file_is_its_submitters_only() -> None:
    assert access.denial(PLATFORM, job("gone"), "alice", access.CANCEL) is None
    assert access.denial(PLATFORM, job("gone"), "vera", access.READ) is not None


def test_seq_floor_keeps_ids_above_what_the_cluster_has_seen() -> None:
    kv: dict[bytes, bytes] = {}
    floor = SeqFloor(kv.get, kv.__setitem__)
    assert floor.next("vision", "x", store_next=1) == 1
    floor.record("vision", "x", 1)
    floor.record("vision", "x", 2)
    assert floor.next("vision", "x", store_next=1) == 3  # a fresh database counts from 1 again
    assert floor.next("vision", "x", store_next=7) == 7  # a database ahead of the cluster (a new cluster)
    assert floor.next("vision", "y", store_next=1) == 1 and floor.next("nlp", "x", store_next=1) == 1
