"""TuneJob: hyperparameter search on Ray Tune, with NNI's search spaces, tuners and trial code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import Field, ValidationInfo, field_validator, model_validator

from cuberay.errors import SpecError
from cuberay.platform.spec.load import FieldError, import_path
from cuberay.platform.spec.search_space import validate as validate_space
from cuberay.platform.spec.workload import JobBase, WorkloadSpec

ALGORITHMS = ("nni:tpe", "nni:random", "nni:anneal", "nni:evolution", "nni:gridsearch", "random", "grid")
SCHEDULERS = ("asha", "hyperband", "median_stopping", "pbt")
EVOLUTION_POPULATION = 32  # NNI's default population_size
_FILE_ENTRYPOINT = re.compile(r"^[\w./-]+\.py:[A-Za-z_]\w*$")

Algorithm = Literal["nni:tpe", "nni:random", "nni:anneal", "nni:evolution", "nni:gridsearch", "random", "grid"]
Scheduler = Literal["asha", "hyperband", "median_stopping", "pbt"]


def _entrypoint(value: str) -> str:
    return value if _FILE_ENTRYPOINT.match(value) else import_path(value)


def _path_parts(path: str) -> list[str | int]:
    """``search_space.opt[0].lr`` -> ["opt", 0, "lr"] (below search_space)."""
    parts: list[str | int] = []
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    return parts[1:]


class TuneSpec(WorkloadSpec):
    """Hyperparameter search with Ray Tune; each worker slot runs one trial at a time.

    ``resources`` are one trial's; ``workers`` is the number of trial slots, admitted as one gang.
    """

    entrypoint: str | None = Field(None, description='Function trial: "pkg.module:function" or "trial.py:function" '
                                                     '(NNI style, calling nni.get_next_parameter(), or Ray Tune '
                                                     'style func(config)). Exactly one of entrypoint, command.')
    command: str | None = Field(None, description="Command trial: a shell command run unchanged as NNI runs "
                                                  "trialCommand (e.g. python3 trial.py), one process per trial.")
    code_dir: str | None = Field(None, description="Where command trials start and trial.py entrypoints are found "
                                                   "(NNI's trialCodeDirectory); relative to the job's working "
                                                   "directory; null = that directory.")
    search_space: dict[str, Any] | str = Field(default_factory=dict, description="NNI search space, inline ({lr: {_type: "
                                         "loguniform, _value: [0.0001, 0.1]}}; plain values are constants) or the "
                                         "path of a JSON/YAML file, relative to the spec file.")
    num_samples: int = Field(1, ge=1, description="Number of trials.")
    metric: str = Field(min_length=1, description="Metric the trials report, e.g. accuracy (NNI's reported value "
                                                  "or its 'default' key).")
    mode: Literal["max", "min"] = Field(description="Whether to maximise or minimise the metric.")
    max_concurrent_trials: int | None = Field(None, ge=1, description="Trials at once; null = one per worker.")
    algorithm: Algorithm = Field("nni:tpe", description="Search algorithm: nni:tpe, nni:random, nni:anneal, "
                                                        "nni:evolution, nni:gridsearch (NNI's tuners), or Ray "
                                                        "Tune's random / grid.")
    algorithm_args: dict[str, Any] = Field(default_factory=dict, description="The tuner's arguments (NNI's "
                                           "tuner classArgs, e.g. {population_size: 16} for nni:evolution); "
                                           "include_intermediate_results: false stops feeding early-stopped "
                                           "trials' last value to the tuner.")
    scheduler: Scheduler | None = Field(None, description="Early stopping on intermediate results: asha, "
                                                          "hyperband, median_stopping or pbt; null = none.")
    scheduler_args: dict[str, Any] = Field(default_factory=dict, description="The scheduler's arguments, e.g. "
                                           "{max_t: 10, grace_period: 1} (counted in intermediate reports).")
    seed: int | None = Field(None, description="Seed of the search algorithm (nni:evolution cannot be seeded).")

    @model_validator(mode="before")
    @classmethod
    def _slots_from_concurrency(cls, data: Any) -> Any:
        # The gang is max_concurrent_trials x one trial's resources when workers is not given.
        if isinstance(data, Mapping) and "workers" not in data and isinstance(data.get("max_concurrent_trials"), int):
            return {**data, "workers": data["max_concurrent_trials"]}
        return data

    @field_validator("entrypoint")
    @classmethod
    def _entry(cls, v: str | None) -> str | None:
        return None if v is None else _entrypoint(v)

    @field_validator("code_dir")
    @classmethod
    def _code_dir(cls, v: str | None, info: ValidationInfo) -> str | None:
        spec_file = (info.context or {}).get("file")
        if v is None or Path(v).is_absolute() or not spec_file or (info.data.get("runtime_env") or {}).get(
                "working_dir"):
            return v
        # Beside the spec file, as NNI finds trialCodeDirectory beside its config; stored absolute.
        return str((Path(spec_file).parent / v).resolve())

    @field_validator("search_space", mode="before")
    @classmethod
    def _space_file(cls, v: Any, info: ValidationInfo) -> Any:
        if not isinstance(v, str):
            return v
        spec_file = (info.context or {}).get("file")
        base = Path(spec_file).parent if spec_file else Path()
        path = Path(v) if Path(v).is_absolute() else base / v
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as err:
            raise ValueError(f"search space file {str(path)!r} cannot be read ({err.strerror}); give a path "
                             f"relative to the spec file, or the space inline") from None
        except yaml.YAMLError as err:
            raise ValueError(f"search space file {str(path)!r} is not JSON or YAML: {err}") from None
        if not isinstance(data, Mapping):
            raise ValueError(f"search space file {str(path)!r} holds {type(data).__name__}, not a mapping of "
                             f"parameter names to {{_type, _value}}")
        return data

    @field_validator("search_space")
    @classmethod
    def _nni(cls, v: dict[str, Any] | str) -> dict[str, Any] | str:
        try:
            validate_space(v)
        except SpecError as err:
            raise FieldError(_path_parts(err.path or "search_space"), err.reason) from None
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TuneSpec:
        if (self.entrypoint is None) == (self.command is None):
            raise FieldError(["entrypoint"], "set exactly one of entrypoint (a function trial: 'pkg.module:func' "
                                             "or 'trial.py:main') and command (a trial script: 'python3 trial.py')")
        if self.max_concurrent_trials is not None and self.max_concurrent_trials > self.max_workers:
            raise FieldError(["max_concurrent_trials"], f"{self.max_concurrent_trials} trials at once need as many "
                                                        f"workers, but workers is {self.max_workers}; raise workers")
        if self.algorithm == "nni:evolution":
            population = self.algorithm_args.get("population_size", EVOLUTION_POPULATION)
            if isinstance(population, int) and population < self.trial_slots:
                raise FieldError(["algorithm_args", "population_size"],
                                 f"nni:evolution needs population_size >= trials at once ({self.trial_slots}), "
                                 f"got {population}; raise it or lower max_concurrent_trials")
        if self.scheduler is None and self.scheduler_args:
            raise FieldError(["scheduler_args"], "scheduler_args are set but no scheduler; set scheduler")
        return self

    @property
    def trial_slots(self) -> int:
        """Trials that run at once."""
        return self.max_concurrent_trials or self.max_workers


class TuneJob(JobBase):
    """Hyperparameter search with Ray Tune."""

    kind: Literal["TuneJob"] = Field("TuneJob", description="TuneJob.")
    spec: TuneSpec = Field(description="Search.")
