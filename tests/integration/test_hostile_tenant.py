"""A user of tenant B calls every public controller method against tenant A's jobs, pipelines, serve apps and
tune jobs: each call is refused (exit 3, a ``denied`` event) or answers with B's data only, and nothing of A's
specs, environments or logs is in any answer. B's own calls still work.

A's objects are real: a running Task (a Ray Job driver holding its attempt's secret), a finished one with a
log, a queued ServeApp, a queued TuneJob and a pipeline run. B holds a running job of its own too, whose real
driver secret (read from its Ray Job's environment, as code of B's job could) is tried against A's job.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import ray

from cuberay.errors import AdmissionError, CuberayError
from cuberay.platform import client
from cuberay.platform.api import ENDPOINTS, TOKEN_ENV, Caller
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

OPS, ANN, BEN = "ops", "ann", "ben"  # the platform's admin; a member of alpha; a member of beta
MARK = uuid.uuid4().hex[:10]
SPEC_MARK, ENV_MARK, LOG_MARK = f"alpha-spec-{MARK}", f"alpha-env-{MARK}", f"alpha-log-{MARK}"


def platform_spec(storage: Path) -> dict[str, Any]:
    def tenant(name: str, member: str, admin: str) -> dict[str, Any]:
        return {"name": name, "members": [member], "admins": [admin],
                "quota": {"guaranteed": {"cpu": "1", "memory": "2Gi"}, "max": {"cpu": "1", "memory": "2Gi"}}}

    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "hostile"},
            "spec": {"storage": str(storage), "database": f"sqlite:///{storage / 'cuberay.db'}",
                     "scheduler": {"cycle_interval_s": 0.5, "small_jobs": False},
                     "tenants": [tenant("alpha", ANN, "ada"), tenant("beta", BEN, "bea")]}}


def task(name: str, tenant: str, command: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": tenant},
            "spec": {"resources": {"cpu": "1", "memory": "128Mi"}, "command": command, "env": env or {}}}


def serve_app(tenant: str) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp", "metadata": {"name": "echo", "tenant": tenant},
            "spec": {"resources": {"cpu": "1", "memory": "256Mi"}, "route_prefix": f"/{tenant}-echo",
                     "versions": [{"name": "v1", "model": "cuberay.examples.echo_serve:Echo", "weight": 100}]}}


def tune_job(tenant: str) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "TuneJob", "metadata": {"name": "branin", "tenant": tenant},
            "spec": {"resources": {"cpu": "1", "memory": "256Mi"}, "entrypoint": "cuberay.examples.branin:trial",
                     "search_space": {"x1": {"_type": "uniform", "_value": [-5, 10]}},
                     "num_samples": 2, "metric": "value", "mode": "min", "env": {"SECRET": ENV_MARK}}}


def pipeline(tenant: str) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "flow", "tenant": tenant},
            "spec": {"steps": [{"name": "only", "job": {"kind": "Task", "spec": {
                "resources": {"cpu": "1", "memory": "128Mi"}, "command": f"echo {SPEC_MARK}",
                "env": {"SECRET": ENV_MARK}}}}]}}


@pytest.fixture(scope="module")
def tenants(ray_cluster, tmp_path_factory: pytest.TempPathFactory, job_client) -> Iterator[dict[str, Any]]:
    """A platform of two tenants with A's objects and a running job of B's; cleaned up afterwards.

    One for the module: every call the tests make as B is refused, and A's objects are only read.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUBERAY_USER", OPS)
        storage = tmp_path_factory.mktemp("hostile") / "cuberay"
        client.install(platform_spec(storage), address=ray_cluster.address, replace=True)
        try:
            yield _objects(job_client)
        finally:
            for record in client.list_jobs():  # ops is the admin: it reads and cancels every job
                if not record.state.is_terminal:
                    client.cancel(record.id)
            client.uninstall()


def _objects(job_client) -> dict[str, Any]:
    with client.acting_as(ANN):
        done = client.submit(task("done", "alpha", f"echo {LOG_MARK} {SPEC_MARK}", {"SECRET": ENV_MARK}))
        wait_for(lambda: client.status(done.id).state == JobState.SUCCEEDED, 120, "A's short job to succeed")
        running = client.submit(task("long", "alpha", f"echo {LOG_MARK}; sleep 600", {"SECRET": ENV_MARK}))
        wait_for(lambda: client.status(running.id).state == JobState.RUNNING, 120, "A's long job to run")
        serve = client.submit(serve_app("alpha"))    # waits: A's quota is full
        tune = client.submit(tune_job("alpha"))      # waits too
        pipe = client.api().pipeline_submit(pipeline("alpha"), None, True)
    with client.acting_as(BEN):
        theirs = client.submit(task("b-long", "beta", "sleep 600"))
        wait_for(lambda: client.status(theirs.id).state == JobState.RUNNING, 120, "B's job to run")
        sid = client.status(theirs.id).submission_id
    env = job_client.get_job_info(sid).runtime_env.get("env_vars") or {}
    return {"done": done.id, "running": running.id, "serve": serve.id, "tune": tune.id,
            "run": pipe["run"].id, "pipeline": "flow", "b_job": theirs.id, "b_token": env[TOKEN_ENV]}


def _raw(method: str, caller: Any, *args: Any) -> Any:
    """One call straight to the actor, as any holder of the cluster token could make it."""
    handle = client.connect()
    try:
        return ray.get(getattr(handle, method).remote(caller, *args), timeout=60)
    except ray.exceptions.RayTaskError as err:
        raise (err.cause if isinstance(err.cause, CuberayError) else err) from None


def _denied_count() -> int:
    with client.acting_as(OPS):
        return sum(1 for e in client.api().events(None, None) if e.kind == "denied")


def test_a_hostile_tenant_is_refused_or_sees_only_its_own(tenants: dict[str, Any]) -> None:
    a = tenants
    ben = Caller(user=BEN)
    forged = Caller(user=BEN, token=secrets.token_urlsafe(32))
    b_driver = Caller(user=BEN, token=a["b_token"])  # B's real driver secret, used on A's job
    other_spec = task("sneak", "alpha", "echo sneaked")
    calls: list[tuple[str, Caller | Any, tuple[Any, ...]]] = [
        ("submit", ben, (other_spec, "alpha")),
        ("submit_copies", ben, (other_spec, 2, "alpha")),
        ("cancel", ben, (a["running"],)),
        ("cancel", ben, ("long",)),               # by name
        ("cancel", ben, (a["serve"],)),
        ("status", ben, (a["running"],)),
        ("status", ben, ("done",)),
        ("status", ben, (a["tune"],)),
        ("logs", ben, (a["done"],)),
        ("logs", ben, (a["running"],)),
        ("events", ben, (a["running"], None)),
        ("admission", ben, (a["running"],)),
        ("admission", forged, (a["running"],)),
        ("job_context", b_driver, (a["running"], None)),
        ("allocation", b_driver, (a["running"], 1)),
        ("resized", b_driver, (a["running"], 1, 1, "pwned")),
        ("job_report", b_driver, (a["running"], 1, "pwned", True)),
        ("job_report", forged, (a["running"], 1, "pwned", True)),
        ("finished", b_driver, (a["running"], False, "pwned", 1)),
        ("finished", ben, (a["running"], False, "pwned", 1)),
        ("checkpointed", b_driver, (a["running"], 1, None)),
        ("usage", b_driver, (a["running"], 0, 64.0, 512.0)),
        ("trials_report", b_driver, (a["tune"], 1, [{"trial_id": "t", "index": 0, "state": "ERROR", "config": {},
                                                     "value": None, "iterations": 0, "history": [],
                                                     "error": "pwned"}])),
        ("trials", ben, (a["tune"],)),
        ("queue_entry", ben, (a["running"],)),
        ("pipeline_submit", ben, (pipeline("alpha"), "alpha", True)),
        ("pipeline_run", ben, (a["pipeline"], "alpha", None, False)),
        ("pipeline_run", ben, (a["pipeline"], "alpha", None, True)),  # --supersede: cancels A's runs
        ("pipeline_runs", ben, (None, "alpha")),
        ("pipeline_list", ben, ("alpha",)),
        ("pipeline_status", ben, (a["run"],)),
        ("pipeline_status", ben, (a["pipeline"],)),  # by name
        ("pipeline_cancel", ben, (a["run"],)),
        ("pipeline_cancel", ben, (a["pipeline"],)),
        ("train_run", ben, ("alpha", "anything", None, 0)),
        ("serve_traffic", ben, (a["serve"], "rollout", {"weights": {"v1": 0.0}}, "pwned")),
        ("serve_rollback", ben, (a["serve"], None)),
        ("serve_delete", ben, (a["serve"],)),
        ("serve_deploy", b_driver, (a["serve"], 1, {"name": "pwned"}, "pwned")),
        ("serve_undeploy", b_driver, (a["serve"], 1)),
        ("serve_history", ben, (a["serve"], None)),
        ("serve_stats", ben, (a["serve"], 60.0)),
        ("tenant_choice", ben, ("alpha", None)),   # asking about A's tenant is refused like a submit to it
        ("reload", ben, (platform_spec(Path("/tmp/elsewhere")),)),
        ("shutdown", ben, ()),
        ("status", None, (a["running"],)),           # no user: not the platform
        ("cancel", {"user": ""}, (a["running"],)),   # an empty user
        ("cancel", "cuberay", (a["running"],)),      # a bare name is no caller either
        ("finished", Caller(user="cuberay", token="platform:guess"), (a["running"], False, "pwned", 1)),
    ]
    reads: list[tuple[str, tuple[Any, ...]]] = [
        ("list_jobs", (None, None, None)), ("list_jobs", ("alpha", None, None)), ("events", (None, None)),
        ("event_counts", (0.0,)),
        ("tenants", ()), ("running", ()), ("nodes", ()), ("ping", ()),
        ("dashboard_url", ()), ("pipeline_runs", (None, None)), ("pipeline_list", (None,)),
        ("tenant_choice", (None, None)),
        ("job_page", ()), ("job_page", ("alpha",)), ("job_page", (None, ANN)),
        ("queue_page", ()), ("queue_page", ("alpha",)), ("queue_page", (None, ANN)),
    ]
    assert {m for m, _, _ in calls} | {m for m, _ in reads} == set(ENDPOINTS), "a method is left out"
    before = _denied_count()

    allowed = []
    for method, caller, args in calls:
        try:
            answer = _raw(method, caller, *args)
        except AdmissionError as err:
            assert err.exit_code == 3
            _no_secret_of_a(method, str(err))
            continue
        allowed.append((method, args, answer))
    assert not allowed, f"hostile calls that were let through: {allowed}"
    assert _denied_count() - before == len(calls), "every refusal is a denied event"

    # A shared queue shows ids, names, sizes and reasons; never who submitted another tenant's job.
    shared = {"queue_page", "running", "tenants", "nodes"}
    for method, args in reads:
        answer = _raw(method, ben, *args)
        text = _text(answer)
        _no_secret_of_a(method, text)
        if method not in shared:
            for job_id in (a["done"], a["running"], a["serve"], a["tune"], a["run"]):
                assert job_id not in text, (method, args, job_id)
    assert [r.id for r in _raw("list_jobs", ben, None, None, None)] == [a["b_job"]]
    assert [r.id for r in _raw("job_page", ben).records] == [a["b_job"]]
    assert all(p.tenant != "alpha" for p in _raw("pipeline_list", ben, None))  # A's stored "flow" is not listed
    # B's counts are of B's job's events alone: A's submits, admissions and ends are not counted (read until two
    # reads agree: B's job may still be adding events of its own).
    wait_for(lambda: _raw("event_counts", ben, 0.0) == dict(Counter(e.kind for e in _raw("events", ben, None, None))),
             30, "B's event counts to match the events B may read")
    assert set(_raw("queue_page", ben).users) == {a["b_job"]}  # names only A's jobs, never A's users
    assert _raw("queue_page", ben, None, ANN).total == 0       # a user filter sees within one's own tenants

    # A's job carries on untouched: still running, no report of B's in its record.
    with client.acting_as(ANN):
        record = client.status(a["running"])
        assert record.state == JobState.RUNNING and "pwned" not in _text(record)
        assert client.api().pipeline_status(a["run"])[0].id == a["run"]
    # B's own calls still work.
    with client.acting_as(BEN):
        assert client.status(a["b_job"]).state == JobState.RUNNING
        assert client.cancel(a["b_job"]).state == JobState.CANCELLED
    print(f"\nhostile calls tried {len(calls)}, allowed {len(allowed)}; shared reads {len(reads)}; "
          f"methods covered {len({m for m, _, _ in calls} | {m for m, _ in reads})} of {len(ENDPOINTS)}")


def test_the_cli_refuses_with_exit_3_and_no_traceback(tenants: dict[str, Any]) -> None:
    env = {**os.environ, "CUBERAY_USER": BEN}
    for argv in (["status", tenants["running"]], ["cancel", tenants["running"]], ["logs", tenants["done"]]):
        out = subprocess.run([sys.executable, "-m", "cuberay", *argv], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 3, (argv, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr and "may not" in out.stderr, out.stderr
        _no_secret_of_a(" ".join(argv), out.stdout + out.stderr)


def _text(value: Any) -> str:
    def plain(v: Any) -> Any:
        if hasattr(v, "model_dump"):
            return v.model_dump(mode="json")
        if hasattr(v, "__dataclass_fields__"):
            return {k: plain(getattr(v, k)) for k in v.__dataclass_fields__}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        return v
    return json.dumps(plain(value), default=str)


def _no_secret_of_a(what: str, text: str, marks: Callable[[], tuple[str, ...]] = lambda: (SPEC_MARK, ENV_MARK,
                                                                                          LOG_MARK)) -> None:
    for mark in marks():
        assert mark not in text, f"{what}: the answer holds A's {mark.split('-')[1]}: {text[:400]}"
