"""The Pipeline spec: bad input is refused before anything runs, naming the step and the field; templates."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import cuberay.platform.spec.templates as tpl
from cuberay.errors import SpecError
from cuberay.platform.spec.pipeline import Pipeline, job_name, load_pipeline, pipeline_schema, step_job

REPO = Path(__file__).resolve().parents[2]


def task(command: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Task", "spec": {"command": command, **spec}}


def base() -> dict[str, Any]:
    return {
        "apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "flow", "tenant": "a"},
        "spec": {
            "params": {"rows": 100, "day": "{{ execution_date }}"},
            "parallelism": 2,
            "steps": [
                {"name": "prepare", "job": task("echo {{ params.rows }} {{ run_id }} {{ creator }}")},
                {"name": "train", "depends_on": ["prepare"], "retries": 2, "timeout": "10m",
                 "job": task("echo {{ steps.prepare.outputs.rows }} {{ params.day }}")},
                {"name": "report", "depends_on": ["train"], "when": "steps.train.outputs.acc > 0.5",
                 "job": task("cat {{ steps.train.dir }}/model.txt")},
            ],
        },
    }


def with_change(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base())
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def refused(data: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_pipeline(data)
    return info.value


def test_a_good_pipeline_loads_with_order_and_upstream() -> None:
    pipe = load_pipeline(base())
    assert pipe.spec.order() == ["prepare", "train", "report"]
    assert pipe.spec.upstream("report") == {"prepare", "train"}
    assert pipe.spec.step("train").timeout_s == 600


@pytest.mark.parametrize(("path", "value", "where", "words"), [
    (["spec", "steps", 1, "depends_on"], ["prepar"], "spec.steps[1].depends_on",
     ["step 'train'", "'prepar'", "did you mean 'prepare'"]),
    (["spec", "steps", 2, "name"], "train", "spec.steps[2].name", ["'train'", "unique"]),
    (["spec", "steps", 0, "depends_on"], ["report"], "spec.steps[0].depends_on", ["cycle", "prepare", "report"]),
    (["spec", "steps", 0, "depends_on"], ["prepare"], "spec.steps[0].depends_on", ["depends on itself"]),
    (["spec", "schedule"], {"cron": "0 2 * *"}, "spec.schedule.cron", ["5-field cron", "'0 2 * *'"]),
    (["spec", "schedule"], {"cron": "99 2 * * *"}, "spec.schedule.cron", ["'99 2 * * *'"]),
    (["spec", "steps", 1, "job", "spec", "command"], "echo {{ params.nope }}", "spec.steps[1].job.spec.command",
     ["step 'train'", "params.nope", "no parameter 'nope'"]),
    (["spec", "steps", 1, "job", "spec", "command"], "echo {{ run_idd }}", "spec.steps[1].job.spec.command",
     ["step 'train'", "'run_idd'", "did you mean 'run_id'"]),
    (["spec", "steps", 0, "job", "spec", "command"], "echo {{ steps.train.outputs.x }}",
     "spec.steps[0].job.spec.command", ["step 'prepare'", "not upstream"]),
    (["spec", "steps", 2, "when"], "steps.nope.outputs.acc > 1", "spec.steps[2].when",
     ["step 'report'", "steps.nope.outputs.acc"]),
    (["spec", "steps", 2, "when"], "{{ steps.train.outputs.acc }} > 1", "spec.steps[2].when",
     ["without {{ }}"]),
    (["spec", "steps", 1, "job", "spec", "command"], "echo {{ params.rows", "spec.steps[1].job.spec.command",
     ["does not parse"]),
    (["spec", "params", "day"], "{{ steps.prepare.outputs.x }}", "spec.params.day", ["parameter 'day'"]),
    (["spec", "steps", 1, "job", "spec", "workers"], "two", "spec.steps[1].job", ["step 'train'", "workers"]),
    (["spec", "steps", 1, "job", "kind"], "Pipeline", "spec.steps[1].job", ["not a job kind"]),
    (["spec", "steps", 1, "timeout"], "soon", "spec.steps[1].timeout", ["not a duration"]),
])
def test_bad_input_names_the_step_and_the_field(path: list[Any], value: Any, where: str, words: list[str]) -> None:
    err = refused(with_change(path, value))
    assert err.path == where, str(err)
    for word in words:
        assert word in str(err), (word, str(err))


def test_a_step_without_a_job_says_how_to_give_one() -> None:
    data = base()
    del data["spec"]["steps"][0]["job"]
    assert "set job" in str(refused(data))


def test_step_files_are_read_relative_to_the_pipeline(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "t.yaml").write_text(
        "apiVersion: cuberay.io/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec: {command: echo hi}\n")
    (tmp_path / "p.yaml").write_text(
        "apiVersion: cuberay.io/v1alpha1\nkind: Pipeline\nmetadata: {name: p, tenant: a}\n"
        "spec:\n  steps:\n    - {name: one, file: jobs/t.yaml}\n    - {name: two, file: jobs/missing.yaml}\n")
    err = refused(str(tmp_path / "p.yaml"))  # type: ignore[arg-type]
    assert err.path == "spec.steps[1].file" and "no job spec file" in str(err)
    (tmp_path / "p.yaml").write_text(
        "apiVersion: cuberay.io/v1alpha1\nkind: Pipeline\nmetadata: {name: p, tenant: a}\n"
        "spec:\n  steps:\n    - {name: one, file: jobs/t.yaml}\n")
    pipe = load_pipeline(tmp_path / "p.yaml")
    assert pipe.spec.steps[0].job["spec"]["command"] == "echo hi"


def test_step_job_is_named_rendered_and_in_the_pipelines_tenant() -> None:
    pipe = load_pipeline(base())
    ctx = {"run_id": "a-flow-r1", "execution_date": "2026-11-30T02:00:00+00:00", "creator": "ann",
           "pipeline": "flow", "params": {"rows": 100, "day": "2026-11-30"},
           "steps": {"prepare": tpl.step_context({"rows": 7}, "/w/prepare", "SUCCEEDED")}}
    job = step_job(pipe, pipe.spec.step("train"), ctx, {"env": {"X": "1"}, "labels": {"k": "v"},
                                                        "placement": "spread"})
    assert job.metadata.name == "flow-train" and job.tenant == "a"
    # values reach the shell as variables the job carries, not as command text
    assert job.spec.command == 'echo "${CUBERAY_TPL_0}" "${CUBERAY_TPL_1}"'
    assert job.spec.env == {"CUBERAY_TPL_0": "7", "CUBERAY_TPL_1": "2026-11-30", "X": "1"}
    assert job.metadata.labels == {"k": "v"} and job.spec.placement.value == "spread"
    with pytest.raises(tpl.TemplateError, match="outputs"):
        step_job(pipe, pipe.spec.step("train"), {**ctx, "steps": {"prepare": tpl.step_context({}, "/w", "x")}})
    assert len(job_name("p" * 40, "s" * 40)) <= 63


def test_templates_list_the_names_they_read() -> None:
    refs = tpl.references("{{ steps.a.outputs['acc'] | round(2) }} {% for x in params.list %}{{ x }}{% endfor %}")
    assert refs == {("steps", "a", "outputs", "acc"), ("params", "list")}
    assert tpl.condition("steps.a.outputs.acc > 0.9", {"steps": {"a": {"outputs": {"acc": 0.95}}}}) is True
    assert tpl.condition(False, {}) is False
    with pytest.raises(tpl.TemplateError):
        tpl.render_text("{{ ''.__class__.__mro__ }}", {})  # the sandbox refuses internals


def test_schema_validates_the_example() -> None:
    schema = pipeline_schema()
    jsonschema.validate(load_pipeline(REPO / "configs" / "pipelines" / "fan-out.yaml").model_dump(mode="json"),
                        schema)
    assert schema["title"] == Pipeline.__name__


def test_cli_checks_graphs_and_describes_a_pipeline_file_offline(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    from cuberay.cli import main

    example = str(REPO / "configs" / "pipelines" / "fan-out.yaml")
    assert main(["spec", "validate", example]) == 0
    assert "Pipeline fan-out, 6 steps, parallelism 2" in capsys.readouterr().out
    assert main(["pipeline", "graph", example, "--out", str(tmp_path / "dag.png")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "prepare" and lines[-1] == "        evaluate  <- train-a, train-b, train-c, draft"
    assert (tmp_path / "dag.png").stat().st_size > 1000
    assert main(["submit", example]) == 2  # a pipeline is not a job: the error says where it goes
    assert "cuberay pipeline submit" in capsys.readouterr().err
    assert main(["spec", "schema", "--kind", "pipeline"]) == 0
    assert '"Pipeline"' in capsys.readouterr().out
