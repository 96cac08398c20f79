"""No spec value other than ``command`` reaches a shell line unquoted.

A spec's ``command`` runs through a shell exactly as its author wrote it (CubeStudio and NNI habits); names,
labels, parameters and env travel as argv words or environment variables. The audit below lists every place
the code hands a string to a shell; a new one fails this test until it is reviewed and added.

Pipeline templates render values into a step's job, ``command`` included: there each value must travel as an
environment variable (:mod:`cuberay.platform.spec.shell_template`), never as command text. The second audit
lists every place the code renders a template, and a rendering of every bundled pipeline with hostile values
checks that none reaches a command.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import cuberay.platform.spec.templates as tpl
from cuberay.platform.control.drivers import driver_entrypoint
from cuberay.platform.spec.pipeline import Pipeline, load_pipeline, step_job

ROOT = Path(__file__).resolve().parents[2] / "cuberay"
# shell=True, sh/bash -c, os.system, a Ray Job's entrypoint (Ray runs it through a shell), a RayJob's entrypoint.
SHELL = re.compile(r"shell=True|\[\s*\"(?:/bin/)?(?:ba)?sh\",\s*\"-c\"|os\.system\(|submit_job\(|\{\"entrypoint\": ")
# file -> what goes to the shell there, and why it is safe.
AUDITED = {
    "runtime/process.py": "bash -c <spec.command>, env as a dict: the author's command (template values as variables)",
    "tune/nni_bridge.py": "/bin/sh -c <trial command>, parameters in a file and env dict: the author's command",
    "kuberay/render_cluster.py": "postStart /bin/sh -c of a constant (_START) with constant paths",
    "kuberay/render_job.py": "RayJob entrypoint: constant paths, shlex-quoted",
    "platform/control/launcher.py": "submit_job(entrypoint=...) of the string drivers.driver_entrypoint built",
    "train/gang.py": "bash -c <the daemon line mpirun hands its agent>, as sshd runs it: Open MPI quotes its own words; "
                     "the words come from the author's mpirun command and the hostfile cuberay wrote",
}


def test_every_shell_line_in_the_code_is_audited() -> None:
    found = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if SHELL.search(p.read_text())}
    assert found == set(AUDITED), f"review these shell lines, then list them here: {sorted(found ^ set(AUDITED))}"


def test_the_driver_entrypoint_quotes_every_word() -> None:
    hostile = "a-b; touch /tmp/pwned $(id) `id`"
    assert shlex.split(driver_entrypoint(hostile)) == [sys.executable, "-m", "cuberay.run", hostile]


def test_job_env_is_passed_as_variables_not_interpolated() -> None:
    process = (ROOT / "runtime" / "process.py").read_text()
    assert '["bash", "-c", command], env=dict(env)' in process


# A call of the template renderer, an import of its functions by name, or Jinja used directly.
RENDERS = re.compile(r"\btpl\.render(?:_text)?\(|from cuberay\.platform\.spec\.templates import|"
                     r"^\s*(?:from|import) jinja2\b|import cuberay\.platform\.spec\.templates(?! as tpl\b)", re.M)
# file -> what it renders, and why no value reaches a shell line as text there.
RENDERING = {
    "platform/spec/templates.py": "the renderer (Jinja, sandboxed)",
    "platform/spec/shell_template.py": "a step's job: command through render_command (values as variables), "
                                       "every other field as text",
    "platform/control/pipeline_driver.py": "a parameter's own template (day: '{{ execution_date }}'): a value, "
                                           "which then reaches command as a variable",
}
HOSTILE = "x'\"; touch /tmp/pwned; $(id) `id` \n-rf *"


class _AnyOutput(dict):  # type: ignore[type-arg]
    def __init__(self, value: str) -> None:
        super().__init__()
        self.value = value

    def __missing__(self, key: str) -> str:
        return self.value


def _context(pipe: Pipeline, value: str) -> dict:
    return {"run_id": value, "execution_date": value, "creator": value, "pipeline": value,
            "params": {k: value for k in pipe.spec.params},
            "steps": {s.name: {"outputs": _AnyOutput(value), "dir": value, "state": value} for s in pipe.spec.steps}}


def test_every_template_rendering_in_the_code_is_audited() -> None:
    found = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if RENDERS.search(p.read_text())}
    assert found == set(RENDERING), f"review these template renderings, then list them here: " \
                                    f"{sorted(found ^ set(RENDERING))}"


def test_template_values_reach_a_command_only_as_variables() -> None:
    """Every bundled pipeline's steps, and a step reading every variable in every kind of quoting: the command
    is the same whatever the values, holds none of them, and the job's env carries them."""
    every = " ".join(f"{{{{ {v} }}}} \"{{{{ {v} }}}}\" '{{{{ {v} }}}}'" for v in (
        "params.p", "creator", "run_id", "execution_date", "pipeline", "steps.a.outputs.x", "steps.a.dir"))
    own = load_pipeline({"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "p"},
                         "spec": {"params": {"p": "1"}, "steps": [
                             {"name": "a", "job": {"kind": "Task", "spec": {"command": "true"}}},
                             {"name": "b", "depends_on": ["a"], "job": {"kind": "Task", "spec": {
                                 "command": f"echo {every}"}}}]}})
    pipes = [load_pipeline(p) for p in sorted((ROOT.parent / "configs" / "pipelines").glob("*.yaml"))] + [own]
    templated = 0
    for pipe in pipes:
        for step in pipe.spec.steps:
            hostile = step_job(pipe, step, _context(pipe, HOSTILE))
            plain = step_job(pipe, step, _context(pipe, "7"))
            command = getattr(hostile.spec, "command", None) or ""
            assert command == (getattr(plain.spec, "command", None) or ""), (pipe.name, step.name, command)
            assert "pwned" not in command and "`id`" not in command
            if tpl.is_template(command and step.job["spec"]["command"]):
                templated += 1
                assert HOSTILE in hostile.spec.env.values(), (pipe.name, step.name)
    assert templated >= 6
