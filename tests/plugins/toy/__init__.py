"""A toy job kind defined outside cuberay: a plugin, as docs/architecture.md ("How to add a job kind") describes.

Its model and adapter live here; its driver in ``driver.py``, which only the job's driver process imports. A
platform file lists this module in ``spec.kinds``; a client process sets ``CUBERAY_KINDS`` or imports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cuberay import kinds
from cuberay.platform.spec import JobBase, WorkloadSpec


class ToySpec(WorkloadSpec):
    """A gang that says one thing and exits."""

    message: str = Field("hello", description="What the driver prints.")
    exit_code: int = Field(0, ge=0, le=255, description="The driver's exit code: 0 succeeds, anything else fails.")


class Toy(JobBase):
    """A toy job."""

    kind: Literal["Toy"] = Field("Toy", description="Toy.")
    spec: ToySpec = Field(description="What to say.")


class ToyKind(kinds.JobKind):
    model = Toy
    driver = "tests.plugins.toy.driver:run"


KIND = kinds.register(ToyKind())
