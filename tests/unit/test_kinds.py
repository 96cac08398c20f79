"""The registry of job kinds: what each built-in kind answers, and a plugin kind (tests/plugins/toy) taking part in
everything the spec layer, the controller's conversions and the CLI do with a kind, without a line of cuberay.

A plugin registers itself in the process that imports it, so the tests that load the toy kind give the
registry back as they found it (``toy`` fixture), and those that need a fresh process run one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from cuberay import kinds
from cuberay.errors import CuberayError, SpecError
from cuberay.kinds import registry
from cuberay.platform.control import convert as conv
from cuberay.platform.control.reloading import changes
from cuberay.platform.control.small import is_small
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import JOB_KINDS, job_schema, load_platform, load_spec
from cuberay.platform.spec.pipeline import load_pipeline

REPO_ROOT = Path(__file__).resolve().parents[2]
JOBS = REPO_ROOT / "configs" / "jobs"
TOY = "tests.plugins.toy"
PLATFORM: dict[str, Any] = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "p"},
                            "spec": {"storage": "/tmp/cuberay-kinds", "tenants": [{"name": "a", "members": ["u"]}]}}


def _doc(kind: str, spec: dict[str, Any], name: str = "j") -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": kind, "metadata": {"name": name, "tenant": "a"},
            "spec": spec}


def _request(job: Any) -> Any:
    return conv.job_request("a-j-1", job, load_platform(PLATFORM).tenants[0], 0.0, "alice")


@pytest.fixture
def toy() -> Iterator[kinds.JobKind]:
    """The toy plugin kind, loaded as the controller loads spec.kinds; the registry is restored afterwards."""
    saved = dict(registry._KINDS), list(registry._PLUGINS), dict(JOB_KINDS)
    sys.modules.pop(TOY, None)
    try:
        assert kinds.load([TOY]) == (TOY,)
        yield kinds.of("Toy")
    finally:
        for table, before in zip((registry._KINDS, registry._PLUGINS, JOB_KINDS), saved):
            table.clear()
            table.update(before) if isinstance(table, dict) else table.extend(before)  # type: ignore[attr-defined]
        sys.modules.pop(TOY, None)


# ---------------------------------------------------------------- the built-in kinds

def test_the_built_in_kinds_in_order_each_with_its_model() -> None:
    assert kinds.names() == ("TrainJob", "Task", "TuneJob", "ServeApp")
    assert {k.name: k.model for k in kinds.registered()} == {n: JOB_KINDS[n] for n in kinds.names()}
    assert kinds.plugins() == () and kinds.env() == {}


@pytest.mark.parametrize(("file", "service", "resizes", "retries", "small", "servable", "render"), [
    ("train-ddp.yaml", False, True, 0, False, True, "rayjob"),          # function mode: Ray Train's retries
    ("task.yaml", False, False, 0, False, False, "rayjob"),             # a 2-worker gang: not small
    ("tune.yaml", False, False, 0, False, False, None),
    ("serve.yaml", True, True, 0, False, False, "rayservice"),
])
def test_what_each_built_in_kind_answers(file: str, service: bool, resizes: bool, retries: int, small: bool,
                                         servable: bool, render: str | None) -> None:
    job = load_spec(JOBS / file)
    kind = kinds.of(job.kind)
    assert (kind.service, kind.resizes(job), kind.retries(job), kind.small(job), kind.servable) == (
        service, resizes, retries, small, servable)
    assert (kind.render or "").rpartition(":")[2] == (render or "")
    assert kind.step_done(JobState.SUCCEEDED) and kind.step_done(JobState.RUNNING) is service
    assert not kind.step_done(JobState.FAILED)


def test_retries_resizing_and_small_follow_the_spec() -> None:
    command = load_spec(_doc("TrainJob", {"command": "true", "max_failures": 2, "workers": {"min": 1, "max": 2}}))
    function = load_spec(_doc("TrainJob", {"entrypoint": "m:f", "max_failures": 2, "workers": {"min": 1, "max": 2}}))
    assert [kinds.of("TrainJob").retries(j) for j in (command, function)] == [2, 0]  # Ray Train owns function mode's
    assert [_request(j).resizable for j in (command, function)] == [False, True]
    one = load_spec(_doc("Task", {"command": "true", "max_failures": 3}))
    assert kinds.of("Task").retries(one) == 3 and is_small(one) and not _request(one).service
    serve = load_spec(JOBS / "serve.yaml")
    assert _request(serve).service and _request(serve).resizable  # its versions' replicas range: elastic


def test_an_unknown_kind_names_the_known_ones_and_the_fix() -> None:
    with pytest.raises(SpecError) as caught:
        kinds.of("Nope")
    assert caught.value.exit_code == 2
    assert "no job kind 'Nope' is registered here (known: TrainJob, Task, TuneJob, ServeApp)" in str(caught.value)
    assert "spec.kinds" in str(caught.value) and "CUBERAY_KINDS" in str(caught.value)
    assert kinds.get("Nope") is None
    assert kinds.step_done("Nope", JobState.SUCCEEDED) and not kinds.step_done("Nope", JobState.RUNNING)


# ---------------------------------------------------------------- a plugin kind

def test_a_plugin_kind_loads_validates_and_converts_like_a_built_in_one(toy: kinds.JobKind) -> None:
    assert kinds.names()[-1] == "Toy" and kinds.plugins() == (TOY,) and kinds.env() == {"CUBERAY_KINDS": TOY}
    job = load_spec(_doc("Toy", {"workers": 2, "message": "hi"}))
    assert type(job) is toy.model and job.spec.message == "hi"
    with pytest.raises(SpecError, match=r"spec\.mesage: unknown field 'mesage'; did you mean 'message'\?"):
        load_spec(_doc("Toy", {"mesage": "hi"}))
    conv.require_runnable(job)  # it has an adapter, so submit takes it
    request = _request(job)
    assert (request.workers, request.service, request.resizable) == (2, False, False)
    assert toy.retries(load_spec(_doc("Toy", {"max_failures": 2}))) == 2 and not is_small(job)
    assert "Toy" in {s["$ref"].split("/")[-1] for s in job_schema()["oneOf"]}
    pipe = load_pipeline({"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "p"},
                          "spec": {"steps": [{"name": "s", "job": _doc("Toy", {}, "s")}]}})
    assert pipe.spec.steps[0].name == "s"
    assert kinds.load_object(toy.driver, "the Toy driver").__module__ == f"{TOY}.driver"


def test_a_kind_without_a_kubernetes_form_is_refused_naming_those_with_one(toy: kinds.JobKind) -> None:
    from cuberay.kuberay.render_cluster import RenderOptions
    from cuberay.kuberay.render_job import render_job

    with pytest.raises(SpecError, match="Toy 'j' has no Kubernetes form in cuberay; render-job takes TrainJob, Task "
                                        "or ServeApp"):
        render_job(load_platform(PLATFORM), load_spec(_doc("Toy", {})), RenderOptions())


def test_a_kind_name_belongs_to_one_adapter(toy: kinds.JobKind) -> None:
    class Another(kinds.JobKind):
        model = toy.model
        driver = "x:y"

    with pytest.raises(SpecError, match="job kind 'Toy' is registered twice, by tests.plugins.toy.ToyKind and "):
        kinds.register(Another())
    kinds.register(type(toy)())  # the same adapter again (a module imported twice) just replaces it


def test_a_plugin_that_cannot_be_imported_or_loaded_says_which_and_how_to_fix_it() -> None:
    with pytest.raises(SpecError) as caught:
        kinds.load(["no_such_kinds_module"])
    assert "cannot import job-kind module 'no_such_kinds_module' (ModuleNotFoundError" in str(caught.value)
    assert "take it out of spec.kinds / CUBERAY_KINDS" in str(caught.value) and caught.value.exit_code == 2
    with pytest.raises(CuberayError, match="cannot load the Task driver 'cuberay.kinds.task.driver:nope' "
                                           r"\(AttributeError"):
        kinds.load_object("cuberay.kinds.task.driver:nope", "the Task driver")
    assert kinds.plugins() == ()


def test_the_platform_file_names_plugin_modules_and_a_reload_says_what_changed() -> None:
    with pytest.raises(SpecError, match=r"spec\.kinds\[0\]: 'my-kinds' is not a Python module name"):
        load_platform({**PLATFORM, "spec": {**PLATFORM["spec"], "kinds": ["my-kinds"]}})
    old = load_platform({**PLATFORM, "spec": {**PLATFORM["spec"], "kinds": ["a.kinds"]}})
    new = load_platform({**PLATFORM, "spec": {**PLATFORM["spec"], "kinds": ["b.kinds"]}})
    assert changes(old, new, {}, {}) == [
        "job kinds of b.kinds loaded", "a.kinds no longer listed (its kinds stay loaded until the controller restarts)"]


def test_the_cli_loads_the_plugin_kinds_cuberay_kinds_names(tmp_path: Path) -> None:
    """A fresh process each time: `cuberay spec validate` knows the toy kind with CUBERAY_KINDS, not without it."""
    spec = tmp_path / "toy.yaml"
    spec.write_text("apiVersion: cuberay.io/v1alpha1\nkind: Toy\nmetadata: {name: hi, tenant: a}\n"
                    "spec: {workers: 2, message: hi}\n")

    def validate(**env: str) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if k != "CUBERAY_KINDS"}
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        return subprocess.run([sys.executable, "-m", "cuberay", "spec", "validate", str(spec)], cwd=REPO_ROOT,
                              env={**environ, **env}, capture_output=True, text=True, timeout=120)

    without = validate()
    assert without.returncode == 2 and "kind 'Toy' is not a job kind" in without.stderr, without.stderr
    loaded = validate(CUBERAY_KINDS=TOY)
    assert loaded.returncode == 0 and "Toy hi in a, 2 workers" in loaded.stdout, loaded.stderr
    broken = validate(CUBERAY_KINDS="no_such_kinds_module")
    assert broken.returncode == 2 and "cannot import job-kind module 'no_such_kinds_module'" in broken.stderr
