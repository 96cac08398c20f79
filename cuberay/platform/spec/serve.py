"""ServeApp: an online service on Ray Serve."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from cuberay.platform.spec.common import ImportPath, Name, SpecModel
from cuberay.platform.spec.load import FieldError
from cuberay.platform.spec.workload import JobBase, WorkloadSpec


class ServeVersion(SpecModel):
    """One model version behind the app's route."""

    name: Name = Field(description="Version name, e.g. v2.")
    import_path: ImportPath = Field(description='The Serve application, "pkg.module:app".')
    weight: float = Field(1.0, ge=0, description="Share of traffic, relative to the other versions.")


class ServeSpec(WorkloadSpec):
    """An online service on Ray Serve; workers are replicas."""

    import_path: ImportPath | None = Field(None, description='The Serve application, "pkg.module:app" (one version).')
    route_prefix: str = Field("/", description='HTTP route, starting with "/".')
    versions: list[ServeVersion] = Field(default_factory=list, description="Several versions with traffic weights "
                                                                           "(instead of import_path).")

    @field_validator("route_prefix")
    @classmethod
    def _route(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"route_prefix {v!r} must start with '/', e.g. '/{v}'")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> ServeSpec:
        if (self.import_path is None) == (not self.versions):
            raise FieldError(["import_path"], "set exactly one of import_path (one version) and versions")
        seen: dict[str, int] = {}
        for i, version in enumerate(self.versions):
            if version.name in seen:
                raise FieldError(["versions", i, "name"], f"version {version.name!r} is listed at "
                                                          f"[{seen[version.name]}] and [{i}]; rename one")
            seen[version.name] = i
        if self.versions and not sum(v.weight for v in self.versions) > 0:
            raise FieldError(["versions"], "all weights are 0, so no version gets traffic; give one a weight > 0")
        return self


class ServeApp(JobBase):
    """An online service on Ray Serve."""

    kind: Literal["ServeApp"] = Field("ServeApp", description="ServeApp.")
    spec: ServeSpec = Field(description="Service.")
