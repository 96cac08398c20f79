"""Unique claims at submit: a kind says what it holds (a ServeApp: its Serve app name and route), the controller
refuses a claim an active job holds, and a finished holder frees it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.platform.control.claims import Claims
from cuberay.platform.control.store import JobRecord, Store, default_url
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec


def _serve_app(name: str, route: str, tenant: str = "a") -> object:
    return load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp",
                      "metadata": {"name": name, "tenant": tenant},
                      "spec": {"route_prefix": route, "versions": [{"name": "v1", "model": "m.mod:Echo"}]}})


@pytest.fixture
def store(tmp_path: Path):
    with Store(default_url(tmp_path)) as s:
        yield s


def _submitted(store: Store, claims: Claims, job, seq: int = 1) -> str:
    job_id = f"{job.tenant}-{job.name}-{seq}"
    store.add_job(JobRecord(id=job_id, tenant=job.tenant, name=job.name, kind=job.kind, user="alice",
                            spec=job.model_dump(mode="json"), state=JobState.QUEUED, priority=0,
                            submit_time=1000.0, seq=seq))
    claims.hold(job_id, job.claims())
    return job_id


def test_a_serve_app_claims_its_serve_name_and_route_and_other_kinds_nothing() -> None:
    app = _serve_app("web", "/web")
    assert [(c.what, c.value) for c in app.claims()] == [("Serve app name", "a-web"), ("route_prefix", "/web")]
    task = load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "t"},
                      "spec": {"command": "true"}})
    assert task.claims() == ()


def test_a_route_or_name_an_active_app_holds_is_refused_with_its_holder(store: Store) -> None:
    claims = Claims()
    held = _submitted(store, claims, _serve_app("web", "/web"))
    route = claims.clash(_serve_app("other", "/web", tenant="b").claims(), store.get_job)
    assert route == (f"route_prefix '/web' is already taken by ServeApp 'web' ({held}, QUEUED); choose another "
                     f"route_prefix, or take that app down first (`cuberay serve delete`)")
    name = claims.clash(_serve_app("web", "/elsewhere").claims(), store.get_job)
    assert name.startswith(f"Serve app name 'a-web' is already taken by ServeApp 'web' ({held}, QUEUED); change "
                           f"its traffic with `cuberay serve rollout web`")
    assert claims.clash(_serve_app("free", "/free").claims(), store.get_job) is None


def test_a_finished_holder_frees_its_claims(store: Store) -> None:
    claims = Claims()
    held = _submitted(store, claims, _serve_app("web", "/web"))
    store.update_job(held, state=JobState.CANCELLED)
    assert claims.clash(_serve_app("web", "/web").claims(), store.get_job) is None
    again = _submitted(store, claims, _serve_app("web", "/web"), seq=2)
    assert again in claims.clash(_serve_app("copy", "/web").claims(), store.get_job)
