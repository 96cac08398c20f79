"""Outputs of a pipeline step: values and files that later steps read.

Inside a step::

    import cuberay.outputs
    cuberay.outputs.set("accuracy", 0.93)                  # {{ steps.train.outputs.accuracy }} downstream
    torch.save(model, cuberay.outputs.dir() / "model.pt")  # {{ steps.train.dir }}/model.pt downstream

Each step has a working directory in the run's directory under the tenant's
storage (``CUBERAY_STEP_DIR``); a value is one JSON file in its ``outputs/``
folder, written atomically, so workers of a gang may each set names. The
platform reads them when the step SUCCEEDED (its reader,
``pipeline_driver.read_outputs``, follows this format; this module imports only
the standard library, so a step pays nothing to import it). Outside a pipeline
step these calls raise a RuntimeError that says so.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

ENV_STEP_DIR = "CUBERAY_STEP_DIR"
ENV_RUN_DIR = "CUBERAY_RUN_DIR"
OUTPUTS = "outputs"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def dir() -> Path:  # noqa: A001 - cuberay.outputs.dir() reads as what it is
    """This step's working directory (created if missing)."""
    raw = os.environ.get(ENV_STEP_DIR)
    if not raw:
        raise RuntimeError(f"{ENV_STEP_DIR} is not set: cuberay.outputs works inside a pipeline step, where the "
                           f"platform sets it; run this code as a step of a Pipeline")
    path = Path(raw)
    path.mkdir(parents=True, exist_ok=True)
    return path


def set(name: str, value: Any) -> None:  # noqa: A001 - the API is cuberay.outputs.set(NAME, VALUE)
    """Publish ``value`` (anything JSON can hold) as output ``name`` of this step."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"output name {name!r} must be letters, digits and '_' (not starting with a digit), "
                         f"so templates can read it as steps.STEP.outputs.{name}")
    text = json.dumps(value)
    folder = dir() / OUTPUTS
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, folder / f"{name}.json")


def read(step_dir: str | Path) -> dict[str, Any]:
    """Every output a step published (the platform reads them the same way once the step SUCCEEDED)."""
    folder = Path(step_dir) / OUTPUTS
    out: dict[str, Any] = {}
    if folder.is_dir():
        for file in sorted(folder.glob("*.json")):
            try:
                out[file.stem] = json.loads(file.read_text())
            except ValueError:
                continue  # a half-written file is never renamed into place; anything else is not ours
    return out
