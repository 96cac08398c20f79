"""TrainJob (Ray Train function mode or a command gang) and Task (a command gang)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

import cuberay.platform.spec.deepspeed as ds
from cuberay.platform.spec.common import ImportPath, SpecModel
from cuberay.platform.spec.load import FieldError
from cuberay.platform.spec.workload import JobBase, WorkloadSpec

# Function mode: the Ray Train trainer each framework runs under (cuberay/train/trainers.py).
Framework = Literal["torch", "deepspeed", "tensorflow", "xgboost", "lightgbm"]


class MpiLaunch(SpecModel):
    """Command mode as an MPI job: worker 0 runs the command (an mpirun line) with the gang as its hosts."""

    slots_per_worker: int = Field(1, ge=1, description="MPI ranks each worker's node takes (the hostfile's "
                                                       "slots=), as the MPI operator's slotsPerWorker; mpirun "
                                                       "without -np starts workers x slots ranks.")


class TrainSpec(WorkloadSpec):
    """A distributed training gang: a Ray Train function, or a command on every worker."""

    entrypoint: ImportPath | None = Field(None, description='Function mode: "pkg.module:train_func", run by the Ray '
                                                            'Train trainer of backend. Exactly one of entrypoint, '
                                                            'command.')
    command: str | None = Field(None, description="Command mode: a shell command each worker runs with RANK, "
                                                  "WORLD_SIZE, MASTER_ADDR, MASTER_PORT, VC_*, TF_CONFIG, JAX_*, "
                                                  "PADDLE_* and MLP_* set.")
    config: dict[str, Any] = Field(default_factory=dict, description="Passed to train_func (function mode).")
    backend: Framework = Field("torch", description="Function mode's framework: torch (DDP), deepspeed, "
                                                    "tensorflow (MultiWorkerMirroredStrategy), xgboost or lightgbm, "
                                                    "each under its Ray Train trainer.")
    mpi: MpiLaunch | None = Field(None, description="Command mode: run command once, on worker 0, as an Open "
                                                    "MPI launcher (mpirun) whose hostfile is the gang; remote "
                                                    "ranks start in the gang's own workers, no ssh. null = every "
                                                    "worker runs command.")
    deepspeed: dict[str, Any] | str | None = Field(
        None, description="backend: deepspeed. A DeepSpeed JSON config (zero_optimization stage 0-3, offload, "
                          "bf16/fp16, gradient_accumulation_steps, train_micro_batch_size_per_gpu, ...) or the "
                          "path of a ds_config.json, read when the spec is loaded.")

    @field_validator("deepspeed", mode="before")
    @classmethod
    def _read_deepspeed(cls, v: Any) -> Any:
        return ds.read(v)

    def deepspeed_config(self) -> dict[str, Any] | None:
        """The DeepSpeed config to run: the user's over cuberay's defaults; None for backend torch."""
        if self.backend != "deepspeed":
            return None
        return ds.merged(self.deepspeed if isinstance(self.deepspeed, dict) else {})

    @model_validator(mode="after")
    def _one_mode(self) -> TrainSpec:
        if (self.entrypoint is None) == (self.command is None):
            raise FieldError(["entrypoint"], "set exactly one of entrypoint ('pkg.module:train_func', function "
                                             "mode) and command ('python train.py', command mode)")
        if self.command is not None:
            for field, bad in (("config", bool(self.config)), ("backend", self.backend != "torch"),
                               ("deepspeed", self.deepspeed is not None)):
                if bad:
                    raise FieldError([field], f"{field} applies to function mode (entrypoint) only; in command "
                                              f"mode pass settings on the command line")
        if self.mpi is not None and self.command is None:
            raise FieldError(["mpi"], "mpi applies to command mode: set command to the mpirun line "
                                      "(e.g. 'mpirun python train.py') instead of entrypoint")
        if self.deepspeed is not None and self.backend != "deepspeed":
            raise FieldError(["backend"], f"a deepspeed config is set but backend is {self.backend}; "
                                          f"set backend: deepspeed")
        if isinstance(self.deepspeed, dict):
            ds.check(self.deepspeed, self.workers if isinstance(self.workers, int) else None)
        return self


class TaskSpec(WorkloadSpec):
    """A gang of workers each running one shell command (CubeStudio env names set)."""

    command: str = Field(min_length=1, description="Shell command each worker runs.")


class TrainJob(JobBase):
    """Distributed training: Ray Train (function mode) or a command gang (command mode)."""

    kind: Literal["TrainJob"] = Field("TrainJob", description="TrainJob.")
    spec: TrainSpec = Field(description="Training gang.")


class Task(JobBase):
    """A gang running a shell command."""

    kind: Literal["Task"] = Field("Task", description="Task.")
    spec: TaskSpec = Field(description="Command gang.")
