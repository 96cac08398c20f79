"""Template values cannot change how the shell parses a step's command: hostile parameters, outputs and users
reach the program as literal text, wherever they are placed, checked by really running the rendered command."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

import cuberay.platform.spec.shell_template as shell_template
import cuberay.platform.spec.templates as tpl
from cuberay.errors import SpecError
from cuberay.platform.spec.pipeline import load_pipeline, step_job

# A program that prints the arguments it was given, as JSON.
ARGV = shlex.quote(sys.executable) + " -S -c 'import sys, json; print(json.dumps(sys.argv[1:]))'"
SHELLS = ("bash", "sh")  # a Task or TrainJob command runs in bash, a tune trial's in sh


def hostile(canary: Path) -> list[str]:
    """Values that would run ``touch canary`` (or change the words) if the shell parsed them."""
    c = str(canary)
    return [
        f"x; touch {c}", f"x && touch {c}", f"x | touch {c}", f"x > {c}", f"$(touch {c})", f"`touch {c}`",
        f"it's'; touch {c}; '", f'say "hi"; touch {c}; "', f"' \"$(touch {c})\" '", f"one\ntouch {c}\n",
        "-rf", "--help", "$HOME ${HOME} $0 $1 $$", "*", "a  b\tc", "", "\\", "a\\", "a\\'b", "$'\\x41'",
        f"EOF\ntouch {c}\nEOF", f"}}; touch {c}", "!! !$", f"a[$(touch {c})]", "%s %d", "~", "#not a comment",
    ]


def pipeline_with(command: str, names: list[str]) -> Any:
    return load_pipeline({
        "apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "flow", "tenant": "a"},
        "spec": {"params": {n: "plain" for n in names},
                 "steps": [{"name": "only", "job": {"kind": "Task", "spec": {"command": command}}}]}})


def context(**over: Any) -> dict[str, Any]:
    return {"run_id": "a-flow-r1", "execution_date": "2026-11-30T02:00:00+00:00", "creator": "ann",
            "pipeline": "flow", "params": {}, "steps": {}, **over}


def run(command: str, env: dict[str, str], cwd: Path, shell: str = "bash") -> str:
    proc = subprocess.run([shell, "-c", command], env={"PATH": os.environ["PATH"], "HOME": str(cwd), **env},
                          cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (command, proc.stderr)
    return proc.stdout


@pytest.fixture
def place(tmp_path: Path) -> Path:
    (tmp_path / "a-file-a-glob-would-find").touch()
    return tmp_path


# placement -> (the command, with VALUE for each value's expression; what the program receives for values vs)
Expect = Callable[[list[str]], Any]
PLACES: dict[str, tuple[str, Expect, tuple[str, ...]]] = {
    "unquoted": (f"{ARGV} EACH({{{{ VALUE }}}})", lambda vs: vs, SHELLS),
    "double quotes": (f'{ARGV} EACH("<{{{{ VALUE }}}}>")', lambda vs: [f"<{v}>" for v in vs], SHELLS),
    "single quotes": (f"{ARGV} EACH('<{{{{ VALUE }}}}>')", lambda vs: [f"<{v}>" for v in vs], SHELLS),
    "inside a word": (f"{ARGV} EACH(--v={{{{ VALUE }}}}.txt)", lambda vs: [f"--v={v}.txt" for v in vs], SHELLS),
    "$( ) in double quotes": (f"""{ARGV} EACH("$(printf '<%s>' {{{{ VALUE }}}})")""",
                              lambda vs: [f"<{v}>" for v in vs], SHELLS),
    "single quotes in $( )": (f"""{ARGV} EACH("$(printf %s '<{{{{ VALUE }}}}>')")""",
                              lambda vs: [f"<{v}>" for v in vs], SHELLS),
    "backticks": (f"""{ARGV} EACH("`printf '<%s>' {{{{ VALUE }}}}`")""", lambda vs: [f"<{v}>" for v in vs], SHELLS),
    "$'...' quotes": (f"{ARGV} EACH($'\\x3c{{{{ VALUE }}}}\\x3e')", lambda vs: [f"<{v}>" for v in vs], ("bash",)),
    "{% if %} and {% for %}": (f"{ARGV}{{% if true %}}{{% for _ in [1] %}} EACH({{{{ VALUE }}}}){{% endfor %}}"
                               f"{{% endif %}}", lambda vs: vs, SHELLS),
    "after a comment with a quote": (f"# don't stop here\n{ARGV} EACH({{{{ VALUE }}}})", lambda vs: vs, SHELLS),
}


def expand(template: str, names: list[str]) -> str:
    """``EACH(x)`` -> one copy of x per value, each reading its own parameter."""
    head, rest = template.split("EACH(", 1)
    body, tail = rest.rsplit(")", 1)
    return head + " ".join(body.replace("VALUE", f"params.{n}") for n in names) + tail


@pytest.mark.parametrize("where", list(PLACES))
def test_hostile_values_reach_the_program_as_literal_text_wherever_they_are(where: str, place: Path) -> None:
    template, expect, shells = PLACES[where]
    values = hostile(place / "pwned")
    names = [f"v{i}" for i in range(len(values))]
    pipe = pipeline_with(expand(template, names), names)
    job = step_job(pipe, pipe.spec.steps[0], context(params=dict(zip(names, values))))
    plain = step_job(pipe, pipe.spec.steps[0], context(params={n: "plain" for n in names}))
    assert job.spec.command == plain.spec.command  # the shell never sees a value: it is not in the text
    for shell in shells:
        assert json.loads(run(job.spec.command, job.spec.env, place, shell)) == expect(values), shell
        assert not (place / "pwned").exists(), (shell, job.spec.command)


def test_a_here_document_gets_values_as_text_even_one_that_looks_like_its_end(place: Path) -> None:
    values = hostile(place / "pwned")
    names = [f"v{i}" for i in range(len(values))]
    lines = "".join(f"<{{{{ params.{n} }}}}>\n" for n in names)
    for shell in SHELLS:
        for operator, body in (("<<EOF", lines), ("<<-EOF", lines.replace("<", "\t<"))):
            pipe = pipeline_with(f"cat {operator}\n{body}EOF\necho after", names)
            job = step_job(pipe, pipe.spec.steps[0], context(params=dict(zip(names, values))))
            out = run(job.spec.command, job.spec.env, place, shell)
            assert out == "".join(f"<{v}>\n" for v in values) + "after\n", (shell, operator)
    assert not (place / "pwned").exists()


@pytest.mark.parametrize("variable", ["creator", "run_id", "execution_date", "steps.prep.outputs.x",
                                      "steps.prep.dir", "params.p"])
def test_every_template_variable_travels_as_a_variable(variable: str, place: Path) -> None:
    """Users (``creator``), step outputs and parameters are what an attacker can choose; the rest the platform
    makes, and goes the same way."""
    evil = f"x'\"; touch {place / 'pwned'}; $(touch {place / 'pwned'})"
    pipe = load_pipeline({
        "apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "flow", "tenant": "a"},
        "spec": {"params": {"p": "plain"}, "steps": [
            {"name": "prep", "job": {"kind": "Task", "spec": {"command": "true"}}},
            {"name": "use", "depends_on": ["prep"], "job": {"kind": "Task", "spec": {
                "command": f"{ARGV} {{{{ {variable} }}}} \"{{{{ {variable} }}}}\" '{{{{ {variable} }}}}'"}}}]}})
    ctx = context(creator=evil, run_id=evil, execution_date=evil, params={"p": evil},
                  steps={"prep": tpl.step_context({"x": evil}, evil, "SUCCEEDED")})
    job = step_job(pipe, pipe.spec.step("use"), ctx)
    assert evil not in job.spec.command
    assert json.loads(run(job.spec.command, job.spec.env, place)) == [evil] * 3
    assert not (place / "pwned").exists()


def test_shell_raw_is_the_one_way_to_write_a_value_into_the_command(place: Path) -> None:
    pipe = pipeline_with(f"{{{{ params.code | shell_raw }}}} && {ARGV} {{{{ params.code }}}}", ["code"])
    code = f"touch {place / 'made'}"
    job = step_job(pipe, pipe.spec.steps[0], context(params={"code": code}))
    assert job.spec.command.startswith(code + " && ")
    assert json.loads(run(job.spec.command, job.spec.env, place)) == [code]
    assert (place / "made").exists()  # the author asked for shell code, and got it
    assert tpl.render_text("{{ 'a b' | shell_raw }}", {}) == "a b"  # outside a command it is plain text


@pytest.mark.parametrize(("command", "words"), [
    ("echo $(( {{ params.v }} + 1 ))", ["$(( ))", "evaluates"]),
    ("(( n = {{ params.v }} ))", ["$(( ))", "evaluates"]),
    ("echo \\{{ params.v }}", ["backslash right before"]),
    ('echo "\\{{ params.v }}"', ["backslash right before"]),
    ("echo ${{ params.v }}", ["$ right before"]),
    ("cat <<'EOF'\n{{ params.v }}\nEOF", ["quoted", "<<EOF"]),
    ("cat <<{{ params.v }}\nx\n", ["delimiter"]),
    ("{% set t %}{{ params.v }}{% endset %}echo {{ t }}", ["NUL", "write its expressions into command"]),
])
def test_spots_where_the_shell_would_evaluate_a_value_are_refused_when_the_file_is_loaded(
        command: str, words: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        pipeline_with(command, ["v"])
    assert info.value.path == "spec.steps[0].job", str(info.value)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_a_value_no_environment_can_hold_and_a_reserved_env_name_are_refused() -> None:
    pipe = pipeline_with("echo {{ params.v }}", ["v"])
    with pytest.raises(tpl.TemplateError, match="NUL"):
        step_job(pipe, pipe.spec.steps[0], context(params={"v": "a\x00b"}))
    with pytest.raises(SpecError, match="CUBERAY_TPL_0.*rename"):
        load_pipeline({"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "f"},
                       "spec": {"params": {"v": "x"}, "steps": [{"name": "s", "job": {"kind": "Task", "spec": {
                           "command": "echo {{ params.v }}", "env": {"CUBERAY_TPL_0": "mine"}}}}]}})


def test_other_fields_stay_plain_text_and_commands_without_templates_are_untouched() -> None:
    job = shell_template.render_job({"kind": "Task", "spec": {"command": "echo 'a b' $HOME", "env": {
        "DAY": "{{ execution_date }}"}, "max_runtime": "{{ params.t }}"}}, context(params={"t": "5m"}))
    assert job["spec"] == {"command": "echo 'a b' $HOME", "env": {"DAY": "2026-11-30T02:00:00+00:00"},
                           "max_runtime": "5m"}
    assert list(job["spec"]) == ["command", "env", "max_runtime"]


# ---------------------------------------------------------------- through the pipeline driver


class SubmittedJobs:
    """Takes the place of the controller's ``submit`` (which needs Ray): stores and keeps what is submitted."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.specs: list[dict[str, Any]] = []

    async def submit(self, caller: Any, spec: dict[str, Any], tenant: str) -> Any:
        from cuberay.platform.api.records import JobRecord
        from cuberay.platform.policy.states import JobState

        self.specs.append(spec)
        user = caller["user"]  # the run's user: the driver acts for it (with the platform's credential live)
        record = JobRecord(id=f"{tenant}-job-{len(self.specs)}", tenant=tenant, name=spec["metadata"]["name"],
                           kind=spec["kind"], user=user, spec=spec, state=JobState.QUEUED, priority=0,
                           submit_time=0.0, seq=len(self.specs))
        self.store.add_job(record)
        return record


def test_a_run_with_hostile_params_and_user_submits_a_job_whose_command_keeps_them_literal(place: Path) -> None:
    from cuberay.platform.control.pipeline_driver import PipelineDriver
    from cuberay.platform.control.store import Store, default_url
    from cuberay.platform.spec import load_platform

    platform = load_platform({"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "t"},
                              "spec": {"storage": str(place / "storage"), "tenants": [
                                  {"name": "a", "members": ["ann"], "quota": {"guaranteed": {"cpu": "4"}}}]}})
    store = Store(default_url(place))
    try:
        jobs = SubmittedJobs(store)
        driver = PipelineDriver(store, platform, jobs=jobs, clock=lambda: 1.8e9)
        pipe = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "p", "tenant": "a"},
                "spec": {"params": {"v": "plain", "day": "{{ creator }}"}, "steps": [{"name": "s", "job": {
                    "kind": "Task", "spec": {"command": f"{ARGV} {{{{ params.v }}}} \"{{{{ params.day }}}}\" "
                                                        f"'{{{{ creator }}}}'"}}}]}}
        driver.put(pipe, "ann", None)
        evil = f"'\"; touch {place / 'pwned'} #"
        asyncio.run(driver.request_run("a", "p", evil, params={"v": f"$(touch {place / 'pwned'})"}))
        asyncio.run(driver.tick())
        asyncio.run(driver.tick())
        (spec,) = jobs.specs
        command, env = spec["spec"]["command"], spec["spec"]["env"]
        assert "touch" not in command
        assert json.loads(run(command, env, place)) == [f"$(touch {place / 'pwned'})", evil, evil]
        assert not (place / "pwned").exists()
    finally:
        store.close()


# ---------------------------------------------------------------- the bundled example, step by step


def test_the_bundled_fan_out_runs_step_by_step_in_bash_and_an_older_style_command_still_works(
        tmp_path: Path) -> None:
    """configs/pipelines/fan-out.yaml's commands as the platform renders them, run in order with the outputs
    each step sets (the integration test runs the pipeline itself). Values are arguments there; a command
    that writes a value into Python's source inside "..." (the older style) still runs as before."""
    from cuberay.platform.control.pipeline_driver import ENV_STEP_DIR, read_outputs

    repo = Path(__file__).resolve().parents[2]
    pipe = load_pipeline(repo / "configs" / "pipelines" / "fan-out.yaml")
    base_env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
                "PYTHONPATH": str(repo)}
    steps: dict[str, Any] = {}

    def run_step(name: str, job: Any = None) -> int:
        job = job or step_job(pipe, pipe.spec.step(name), context(params=dict(pipe.spec.params), steps=steps))
        step_dir = tmp_path / name
        step_dir.mkdir(exist_ok=True)
        proc = subprocess.run(["bash", "-c", job.spec.command], env={**base_env, **job.spec.env,
                              ENV_STEP_DIR: str(step_dir)}, capture_output=True, text=True, timeout=60)
        steps[name] = tpl.step_context(read_outputs(step_dir), str(step_dir), "SUCCEEDED")
        return proc.returncode

    for name in ("prepare", "train-a", "train-a", "train-b", "train-c", "evaluate"):
        run_step(name)
    assert steps["prepare"]["outputs"] == {"rows": 100}
    assert [steps[n]["outputs"]["score"] for n in ("train-a", "train-b", "train-c")] == [90.0, 80.0, 70.0]
    assert steps["evaluate"]["outputs"] == {"best": 90.0}

    older = pipeline_with("python -c \"import cuberay.outputs as o; o.set('n', {{ params.n }} + 1)\"", ["n"])
    assert run_step("older", step_job(older, older.spec.steps[0], context(params={"n": "41"}))) == 0
    assert steps["older"]["outputs"] == {"n": 42}
