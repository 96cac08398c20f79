"""TuneJob: hyperparameter search on Ray Tune."""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import Field, field_validator, model_validator

from cuberay.platform.spec.common import ImportPath
from cuberay.platform.spec.load import FieldError
from cuberay.platform.spec.workload import JobBase, WorkloadSpec

_NNI_TYPES = ("choice", "randint", "uniform", "quniform", "loguniform", "qloguniform",
              "normal", "qnormal", "lognormal", "qlognormal")


class TuneSpec(WorkloadSpec):
    """Hyperparameter search with Ray Tune; each worker slot runs one trial at a time."""

    entrypoint: ImportPath = Field(description='The trainable, "pkg.module:function".')
    search_space: dict[str, Any] = Field(default_factory=dict, description='Parameters to search; NNI format '
                                         'accepted: {lr: {_type: loguniform, _value: [0.0001, 0.1]}}.')
    num_samples: int = Field(1, ge=1, description="Number of trials.")
    metric: str = Field(min_length=1, description="Metric the trainable reports, e.g. accuracy.")
    mode: Literal["max", "min"] = Field(description="Whether to maximise or minimise the metric.")
    max_concurrent_trials: int | None = Field(None, ge=1, description="Trials at once; null = one per worker.")

    @field_validator("search_space")
    @classmethod
    def _nni(cls, v: dict[str, Any]) -> dict[str, Any]:
        for name, dist in v.items():
            if isinstance(dist, Mapping) and "_type" in dist:
                if dist["_type"] not in _NNI_TYPES or not isinstance(dist.get("_value"), list):
                    raise FieldError([name], f"NNI parameter needs _type (one of {', '.join(_NNI_TYPES)}) and a "
                                             f"_value list, got {dict(dist)!r}")
        return v

    @model_validator(mode="after")
    def _trials_fit(self) -> TuneSpec:
        if self.max_concurrent_trials is not None and self.max_concurrent_trials > self.max_workers:
            raise FieldError(["max_concurrent_trials"], f"{self.max_concurrent_trials} trials at once need as many "
                                                        f"workers, but workers is {self.max_workers}; raise workers")
        return self


class TuneJob(JobBase):
    """Hyperparameter search with Ray Tune."""

    kind: Literal["TuneJob"] = Field("TuneJob", description="TuneJob.")
    spec: TuneSpec = Field(description="Search.")
