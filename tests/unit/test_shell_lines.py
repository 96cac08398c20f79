"""No spec value other than ``command`` reaches a shell line unquoted.

A spec's ``command`` runs through a shell exactly as its author wrote it (CubeStudio and NNI habits); names,
labels, parameters and env travel as argv words or environment variables. The audit below lists every place
the code hands a string to a shell; a new one fails this test until it is reviewed and added.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from cuberay.platform.control.drivers import driver_entrypoint

ROOT = Path(__file__).resolve().parents[2] / "cuberay"
# shell=True, sh/bash -c, os.system, a Ray Job's entrypoint (Ray runs it through a shell), a RayJob's entrypoint.
SHELL = re.compile(r"shell=True|\[\s*\"(?:/bin/)?(?:ba)?sh\",\s*\"-c\"|os\.system\(|submit_job\(|\{\"entrypoint\": ")
# file -> what goes to the shell there, and why it is safe.
AUDITED = {
    "train/process.py": "bash -c <spec.command>, env as a dict: the author's command only",
    "tune/nni_bridge.py": "/bin/sh -c <trial command>, parameters in a file and env dict: the author's command",
    "kuberay/render_cluster.py": "postStart /bin/sh -c of a constant (_START) with constant paths",
    "kuberay/render_job.py": "RayJob entrypoint: constant paths, shlex-quoted",
    "platform/control/launcher.py": "submit_job(entrypoint=...) of the string drivers.driver_entrypoint built",
}


def test_every_shell_line_in_the_code_is_audited() -> None:
    found = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if SHELL.search(p.read_text())}
    assert found == set(AUDITED), f"review these shell lines, then list them here: {sorted(found ^ set(AUDITED))}"


def test_the_driver_entrypoint_quotes_every_word() -> None:
    hostile = "a-b; touch /tmp/pwned $(id) `id`"
    assert shlex.split(driver_entrypoint(hostile)) == [sys.executable, "-m", "cuberay.run", hostile]


def test_job_env_is_passed_as_variables_not_interpolated() -> None:
    process = (ROOT / "train" / "process.py").read_text()
    assert '["bash", "-c", command], env=dict(env)' in process
