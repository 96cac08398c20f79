"""TrainJob (Ray Train function mode or a command gang) and Task (a command gang)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

import cuberay.platform.spec.deepspeed as ds
from cuberay.platform.spec.common import ImportPath, Labels, Placement, SpecModel, WorkerResources
from cuberay.platform.spec.load import FieldError
from cuberay.platform.spec.resources import WorkerRequest
from cuberay.platform.spec.workload import ElasticWorkers, JobBase, WorkloadSpec

# Function mode: the Ray Train trainer each framework runs under (cuberay/train/trainers.py).
Framework = Literal["torch", "deepspeed", "tensorflow", "xgboost", "lightgbm"]


class MpiLaunch(SpecModel):
    """Command mode as an MPI job: worker 0 runs the command (an mpirun line) with the gang as its hosts."""

    slots_per_worker: int = Field(1, ge=1, description="MPI ranks each worker's node takes (the hostfile's "
                                                       "slots=), as the MPI operator's slotsPerWorker; mpirun "
                                                       "without -np starts workers x slots ranks.")


# TensorFlow's task types besides "worker" (the spec's own workers and resources), in the gang's member order.
ROLE_ORDER = ("chief", "ps", "evaluator")
RoleName = Literal["chief", "ps", "evaluator"]
SINGLE_ROLES = ("chief", "evaluator")  # TensorFlow runs at most one of each


class Role(SpecModel):
    """One role of a gang with roles besides its workers: how many members, what each needs, where they go."""

    workers: int = Field(1, ge=1, description="Members of this role (chief and evaluator: 1).")
    resources: WorkerResources = Field(default_factory=WorkerResources, description="Resources of EACH member.")
    placement: Placement = Field(Placement.SPREAD, strict=False, description="How this role's members share "
                                 "nodes: spread (the default, parameter servers on different nodes), pack, "
                                 "strict_spread, strict_pack, best_fit, frag, random or auto.")
    node_selector: Labels = Field(default_factory=dict, description="Node labels this role's nodes must have, "
                                                                    "e.g. cuberay.io/pool: cpu for parameter "
                                                                    "servers off the GPU nodes.")


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
    roles: dict[RoleName, Role] = Field(default_factory=dict, description="Command mode: roles besides the "
                                        "workers (TensorFlow's parameter-server training): chief, ps, evaluator, "
                                        "each with its own workers, resources, placement and node_selector. The "
                                        "workers and resources above are the worker role; every member gets a "
                                        "TF_CONFIG naming its role, and the gang is admitted as one. The gang "
                                        "ends when the chief exits. {} = every member is a worker.")
    deepspeed: dict[str, Any] | str | None = Field(
        None, description="backend: deepspeed. A DeepSpeed JSON config (zero_optimization stage 0-3, offload, "
                          "bf16/fp16, gradient_accumulation_steps, train_micro_batch_size_per_gpu, ...) or the "
                          "path of a ds_config.json, read when the spec is loaded.")

    @field_validator("roles", mode="before")
    @classmethod
    def _worker_is_the_spec(cls, v: Any) -> Any:
        if isinstance(v, dict) and "worker" in v:
            raise FieldError(["worker"], "the worker role is the spec's own workers and resources: set "
                                         "spec.workers and spec.resources there, and list only chief, ps and "
                                         "evaluator under roles")
        return v

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
        if self.roles:
            self._check_roles()
        if self.deepspeed is not None and self.backend != "deepspeed":
            raise FieldError(["backend"], f"a deepspeed config is set but backend is {self.backend}; "
                                          f"set backend: deepspeed")
        if isinstance(self.deepspeed, dict):
            ds.check(self.deepspeed, self.workers if isinstance(self.workers, int) else None)
        return self

    def _check_roles(self) -> None:
        if self.command is None:
            raise FieldError(["roles"], "roles apply to command mode: set command to the script every member runs "
                                        "(it reads its role from TF_CONFIG), instead of entrypoint")
        if self.mpi is not None:
            raise FieldError(["roles"], "an MPI job has no roles: mpirun starts its ranks itself; drop roles or mpi")
        if isinstance(self.workers, ElasticWorkers):
            raise FieldError(["workers"], "a gang with roles has a fixed size: set workers to a number, not "
                                          "{min, max}")
        if "ps" in self.roles and "chief" not in self.roles:
            raise FieldError(["roles", "chief"], "parameter servers need a chief to coordinate the training "
                                                 "(ParameterServerStrategy runs on the chief); add roles.chief")
        for name in SINGLE_ROLES:
            role = self.roles.get(name)  # type: ignore[call-overload]
            if role is not None and role.workers != 1:
                raise FieldError(["roles", name, "workers"], f"TensorFlow runs one {name}; set "
                                                             f"roles.{name}.workers to 1")


class TaskSpec(WorkloadSpec):
    """A gang of workers each running one shell command (CubeStudio env names set)."""

    command: str = Field(min_length=1, description="Shell command each worker runs.")


class TrainJob(JobBase):
    """Distributed training: Ray Train (function mode) or a command gang (command mode)."""

    kind: Literal["TrainJob"] = Field("TrainJob", description="TrainJob.")
    spec: TrainSpec = Field(description="Training gang.")

    def role_requests(self) -> tuple[tuple[str, WorkerRequest, int, Placement], ...]:
        """(role, what each member needs, members, placement) of each role besides the workers, in member order."""
        return tuple((name, role.resources._request(labels=role.node_selector), role.workers, role.placement)
                     for name in ROLE_ORDER if (role := self.spec.roles.get(name)) is not None)  # type: ignore[call-overload]


class Task(JobBase):
    """A gang running a shell command."""

    kind: Literal["Task"] = Field("Task", description="Task.")
    spec: TaskSpec = Field(description="Command gang.")
