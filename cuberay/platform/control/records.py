"""Records the platform hands back: job handles, queue lines, tenant usage, pieces of a job's log.

Frozen dataclasses and frozen pydantic models, safe to send across Ray actor boundaries;
the controller builds them, the client returns them, the CLI renders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field

from cuberay.platform.policy.states import JobState


@dataclass(frozen=True)
class JobRef:
    """A handle to a submitted job; prints as ``cuberay://<tenant>/<job id>``."""

    id: str
    tenant: str
    name: str

    def __str__(self) -> str:
        return f"cuberay://{self.tenant}/{self.id}"


@dataclass(frozen=True)
class QueueEntry:
    """One line of ``cuberay queue``: a running or waiting job, its position and why it waits."""

    job_id: str
    tenant: str
    name: str
    kind: str
    state: JobState
    position: int | None      # 1-based place in admission order; None when running
    reason: str               # why it waits / where it runs
    gpus: float
    workers: int
    age_s: float


@dataclass(frozen=True)
class TenantUsage:
    """One line of ``cuberay tenants``: quota and what is in use (resource name -> amount)."""

    name: str
    guaranteed: Mapping[str, float]
    max: Mapping[str, float] | None
    in_use: Mapping[str, float]
    borrowed: Mapping[str, float]
    running: int
    queued: int


@dataclass(frozen=True)
class JobIdentity:
    """Who and what a job is, as the ``KFJ_*`` names expose it to user code.

    Resource fields are the per-worker strings exactly as the user typed them
    (``"2(V100)"``, ``"32Gi"``), since CubeStudio scripts parse those raw strings.
    """

    job_id: str
    name: str
    tenant: str
    user: str
    run_id: str
    kind: str
    cpu: str = ""
    memory: str = ""
    gpu: str = ""
    rdma: str = ""
    namespace: str = ""
    environment: str = "local"


class LogChunk(BaseModel):
    """A piece of one attempt's log, read from a byte offset (control/logs.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: int = Field(description="The attempt the text is from, 1 for the first; 0 while none has started.")
    offset: int = Field(description="Byte offset in that attempt's log where the text begins.")
    text: str = Field(description="The log's bytes from offset, decoded as UTF-8; never ends inside a character.")
    next_offset: int = Field(description="Where to read on: offset plus the number of bytes the text came from.")
    more: bool = Field(description="Whether the log already holds bytes past next_offset (the read hit its limit).")
    latest_attempt: int = Field(description="The job's latest attempt: a higher one than attempt means a new "
                                            "attempt started; 0 while none has.")
    terminal: bool = Field(description="Whether the job has ended: once read to its end, no more text comes "
                                       "for the latest attempt.")
