"""ServeApp: an online service on Ray Serve with model versions, a weighted split, a mirror and rollouts.

```yaml
kind: ServeApp
metadata: {name: digits-serve, tenant: vision}
spec:
  resources: {cpu: 500m, memory: 512Mi}     # per replica, every version alike
  route_prefix: /digits
  versions:
    - {name: v1, model: {job: digits-ddp}, weight: 90, replicas: {min: 1, max: 2}}
    - {name: v2, model: {run: vision-digits-ddp-3}, weight: 10}
  mirror: {version: v2, percent: 10}
  rollout: {steps: [10, 50, 100], interval: 30s, max_error_rate: 0.05, max_p99_ms: 500}
  rate_limit: {requests_per_s: 200, burst: 400}
```

A version's ``model`` is a TrainJob's final checkpoint (``{job: NAME}``: the
tenant's latest SUCCEEDED run of that name; ``{run: ID}``: one run;
``{checkpoint: DIR}``: a checkpoint directory) served by the generic torch
predictor, or an import path ``pkg.module:Class`` of your own Serve deployment
(engine ``custom``), a bound Serve application ``pkg.module:app`` (``app =
Ingress.bind(Model.bind(...))``, deployed as written, constructor arguments and
graph kept; its ``deployments`` list each deployment of the graph with its
replicas), or ``{source: PATH}`` of an LLM served with vLLM (engine
``vllm``). The app's replicas are the sum of its versions' replicas: admission
holds the ``min`` of each as a gang and may grant up to ``max``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from cuberay.platform.spec.common import Duration, ImportPath, Name, SpecModel
from cuberay.platform.spec.load import FieldError, parse_duration, require_unique
from cuberay.platform.spec.workload import Claim, JobBase, Workers, WorkloadSpec, bounds

Engine = Literal["torch", "custom", "vllm"]
# A serving app keeps each version's samples of the last 10 minutes (at most 100,000): a rollout step is judged
# on what it got since it started, so it may wait no longer than that, and need no more requests than it keeps.
MAX_STEP_TIMEOUT_S = 600.0
MAX_MIN_REQUESTS = 10_000


class ModelRef(SpecModel):
    """Where a version's model comes from: exactly one of job, run, checkpoint, source."""

    job: Name | None = Field(None, description="A TrainJob name: the tenant's latest SUCCEEDED run of it.")
    run: str | None = Field(None, description="A TrainJob run id, e.g. vision-digits-ddp-3 (must have SUCCEEDED).")
    checkpoint: str | None = Field(None, description="A checkpoint directory holding model.pt.")
    source: str | None = Field(None, description="vLLM: a model directory (or hub id) to load.")
    previous: int = Field(0, ge=0, description="With job: skip this many newer SUCCEEDED runs (1 = the one "
                                               "before the latest).")

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelRef:
        given = [k for k in ("job", "run", "checkpoint", "source") if getattr(self, k) is not None]
        if len(given) != 1:
            raise FieldError([], f"give exactly one of job, run, checkpoint, source (got {given or 'none'})")
        if self.previous and self.job is None:
            raise FieldError(["previous"], "previous counts runs of a job; use it with job: NAME")
        return self


class LLMSettings(SpecModel):
    """vLLM engine settings (engine: vllm)."""

    tensor_parallel: int = Field(1, ge=1, description="Tensor-parallel size (GPUs per replica).")
    pipeline_parallel: int = Field(1, ge=1, description="Pipeline-parallel size.")
    max_model_len: int | None = Field(None, ge=1, description="Longest context; null = the model's.")
    accelerator: Literal["gpu", "cpu"] = Field("gpu", description="gpu, or cpu for vLLM's CPU backend.")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict, description="Further vLLM engine arguments.")


def _model_tag(value: Any) -> str:
    return "model-import-path" if isinstance(value, str) else "model-ref"


ModelSource = Annotated[Union[Annotated[ImportPath, Tag("model-import-path")], Annotated[ModelRef, Tag("model-ref")]],
                        Discriminator(_model_tag)]


# Serve deployment options cuberay sets itself on every deployment of a bound application's graph.
OWNED_OPTIONS = frozenset({"name", "num_replicas", "autoscaling_config", "ray_actor_options", "user_config",
                           "max_ongoing_requests", "placement_group_bundles", "placement_group_strategy",
                           "placement_group_bundle_label_selector"})


class GraphDeployment(SpecModel):
    """One deployment of a bound application's graph: its replicas and the Serve options it is deployed with."""

    name: str = Field(min_length=1, description="The deployment's name in the graph (its class name unless "
                                                "the code names it), e.g. Model.")
    replicas: Workers = Field(1, description="Replicas: a number, or {min, max} for Serve's autoscaling "
                                             "(min is held at admission, growth up to max is borrowed).")
    user_config: Any = Field(None, description="The deployment's user_config (passed to its reconfigure); "
                                               "null = the code's.")
    max_ongoing_requests: int | None = Field(None, ge=1, description="Requests one replica handles at once; "
                                                                      "null = the code's.")
    target_ongoing_requests: float | None = Field(None, gt=0, description="With replicas {min, max}: requests "
                                                                          "per replica before the autoscaler "
                                                                          "adds one; null = cuberay's 4.")
    options: dict[str, Any] = Field(default_factory=dict, description="Further Serve deployment options, "
                                                                      "passed verbatim (e.g. "
                                                                      "health_check_period_s).")

    @field_validator("options")
    @classmethod
    def _not_owned(cls, v: dict[str, Any]) -> dict[str, Any]:
        owned = sorted(set(v) & OWNED_OPTIONS)
        if owned:
            raise ValueError(f"options {owned} are set by cuberay or by this deployment's own fields (replicas, "
                             f"user_config, max_ongoing_requests; resources and placement come from the spec); "
                             f"remove them from options")
        return v

    @property
    def min_replicas(self) -> int:
        return bounds(self.replicas)[0]

    @property
    def max_replicas(self) -> int:
        return bounds(self.replicas)[1]


class ServeVersion(SpecModel):
    """One model version behind the app's route."""

    name: Name = Field(description="Version name, e.g. v2.")
    model: ModelSource = Field(description='A checkpoint {job|run|checkpoint}, a Serve deployment '
                                                           '"pkg.module:Class", or {source} for vLLM.')
    engine: Engine | None = Field(None, description="torch | custom | vllm; null = from the model "
                                                    "(import path: custom, source: vllm, else torch).")
    weight: float = Field(100, ge=0, le=100, description="Percent of traffic; an app's weights sum to 100.")
    replicas: Workers = Field(1, description="Replicas: a number, or {min, max} for autoscaling.")
    factory: ImportPath | None = Field(None, description='torch: "module:function" building the module from the '
                                                         "training config; null = build_model in the TrainJob's "
                                                         "entrypoint module.")
    llm: LLMSettings | None = Field(None, description="vLLM settings (engine: vllm).")
    deployments: list[GraphDeployment] = Field(default_factory=list, description="A bound application's graph "
                                               "(model: pkg.module:app): every deployment in it, with its "
                                               "replicas; the version's replicas are their sum.")

    @property
    def is_graph(self) -> bool:
        """A bound application deployed as written (its own Serve app), not a deployment cuberay wraps."""
        return bool(self.deployments)

    @property
    def resolved_engine(self) -> str:
        if self.engine is not None:
            return self.engine
        if isinstance(self.model, str):
            return "custom"
        return "vllm" if self.model.source is not None else "torch"

    @property
    def min_replicas(self) -> int:
        if self.deployments:
            return sum(d.min_replicas for d in self.deployments)
        return bounds(self.replicas)[0]

    @property
    def max_replicas(self) -> int:
        if self.deployments:
            return sum(d.max_replicas for d in self.deployments)
        return bounds(self.replicas)[1]

    @model_validator(mode="after")
    def _engine_matches_model(self) -> ServeVersion:
        engine = self.resolved_engine
        if engine == "custom" and not isinstance(self.model, str):
            raise FieldError(["model"], 'engine custom needs an import path model: "pkg.module:Class"')
        if engine == "torch" and (isinstance(self.model, str) or self.model.source is not None):
            raise FieldError(["model"], "engine torch needs a checkpoint model: {job: NAME}, {run: ID} or "
                                        "{checkpoint: DIR}")
        if engine == "vllm" and (isinstance(self.model, str) or self.model.source is None):
            raise FieldError(["model"], "engine vllm needs {source: MODEL_DIR}")
        if self.llm is not None and engine != "vllm":
            raise FieldError(["llm"], f"llm settings apply to engine vllm only, this version is {engine}")
        if self.deployments:
            if engine != "custom":
                raise FieldError(["deployments"], f"deployments list a bound application's graph (model: "
                                                  f"pkg.module:app); this version is engine {engine}")
            if self.replicas != 1:  # the field at its default (dumps carry it) means nothing here
                raise FieldError(["replicas"], "a bound application's replicas are set per deployment: "
                                               "deployments[i].replicas (the version holds their sum); remove "
                                               "replicas")
            require_unique((d.name for d in self.deployments), "deployments", "deployment", "list it once")
        return self


class Mirror(SpecModel):
    """Copy a share of the requests to a shadow version; its answers are dropped."""

    version: Name = Field(description="The shadow version (one of versions).")
    percent: float = Field(gt=0, le=100, description="Percent of requests copied.")


class Rollout(SpecModel):
    """How `cuberay serve rollout` moves traffic, and when it rolls back by itself."""

    steps: Union[int, list[float]] = Field(3, description="A number of even steps, or the target's percentages "
                                                          "after each step, rising to 100, e.g. [10, 50, 100].")
    interval: Duration = Field("30s", description='Time at each step before checking health: seconds or '
                                                           '"30s", "5m".')
    max_error_rate: float = Field(0.05, ge=0, le=1, description="Roll back above this error rate (0..1).")
    max_p99_ms: float | None = Field(None, gt=0, description="Roll back above this p99 latency; null = no check.")
    min_requests: int = Field(10, ge=1, le=MAX_MIN_REQUESTS,
                              description="Requests the target version must answer in a step before the step "
                                          "can pass; no data is no health.")
    step_timeout: Duration = Field("5m", description="How long a step may wait for min_requests on the "
                                                              "target version (from the step's start, at least "
                                                              "interval, at most 10m); a step without them by "
                                                              "then halts the rollout and rolls back.")

    @model_validator(mode="after")
    def _timeout_covers_interval(self) -> Rollout:
        if self.step_timeout_s < self.interval_s:
            raise FieldError(["step_timeout"], f"step_timeout {self.step_timeout_s:g}s is shorter than interval "
                                               f"{self.interval_s:g}s; a step waits at least its interval")
        if self.step_timeout_s > MAX_STEP_TIMEOUT_S:
            raise FieldError(["step_timeout"], f"step_timeout {self.step_timeout_s:g}s is over "
                                               f"{MAX_STEP_TIMEOUT_S:g}s, the figures a serving app keeps; "
                                               f"lower it, or send more traffic during rollouts")
        return self

    @property
    def interval_s(self) -> float:
        return parse_duration(self.interval)

    @property
    def step_timeout_s(self) -> float:
        return parse_duration(self.step_timeout)


class RateLimit(SpecModel):
    """A token bucket for the whole app, shared out over its ingress replicas; excess requests get 429 with Retry-After."""

    requests_per_s: float = Field(gt=0, description="Sustained requests per second.")
    burst: int | None = Field(None, ge=1, description="Requests allowed at once; null = requests_per_s.")


class ServeSpec(WorkloadSpec):
    """An online service on Ray Serve; its replicas are the versions' replicas."""

    route_prefix: str = Field("/", description='HTTP route, starting with "/"; unique among the apps.')
    versions: list[ServeVersion] = Field(min_length=1, description="The model versions and their weights.")
    mirror: Mirror | None = Field(None, description="Copy a share of the traffic to a shadow version.")
    rollout: Rollout = Field(default_factory=Rollout, description="Steps and health limits of rollouts.")
    rate_limit: RateLimit | None = Field(None, description="Requests per second the app accepts.")
    sticky_header: str | None = Field(None, description="HTTP header whose value keeps a caller on one version.")

    @field_validator("route_prefix")
    @classmethod
    def _route(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"route_prefix {v!r} must start with '/', e.g. '/{v}'")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> ServeSpec:
        if self.workers != 1:  # the inherited field at its default (dumps carry it) means nothing here
            raise FieldError(["workers"], "a ServeApp's replicas are set per version: versions[i].replicas "
                                          "(a number or {min, max})")
        names = [v.name for v in self.versions]
        require_unique(names, "versions", "version", "rename one")
        total = sum(v.weight for v in self.versions)
        if abs(total - 100) > 1e-6:
            shown = ", ".join(f"{v.name}={v.weight:g}" for v in self.versions)
            raise FieldError(["versions"], f"weights are percentages and must sum to 100; {shown} sum to "
                                           f"{total:g}")
        if self.mirror is not None and self.mirror.version not in names:
            raise FieldError(["mirror", "version"], f"mirror version {self.mirror.version!r} is not one of the "
                                                    f"versions ({', '.join(names)})")
        engines = {v.resolved_engine for v in self.versions}
        if "vllm" in engines and (engines != {"vllm"} or self.mirror or self.rate_limit):
            raise FieldError(["versions"], "an app with engine vllm serves only vllm versions, by model name "
                                           "through the OpenAI API; mirror and rate_limit do not apply to it")
        return self

    @property
    def engines(self) -> set[str]:
        return {v.resolved_engine for v in self.versions}

    @property
    def min_workers(self) -> int:
        return sum(v.min_replicas for v in self.versions)

    @property
    def max_workers(self) -> int:
        return sum(v.max_replicas for v in self.versions)

    def weights(self) -> dict[str, float]:
        return {v.name: v.weight for v in self.versions}


class ServeApp(JobBase):
    """An online service on Ray Serve: model versions behind one route."""

    kind: Literal["ServeApp"] = Field("ServeApp", description="ServeApp.")
    spec: ServeSpec = Field(description="Service.")

    @property
    def serve_name(self) -> str:
        """The Serve application name: unique across tenants."""
        return f"{self.tenant}-{self.name}" if self.tenant else self.name

    def claims(self) -> tuple[Claim, ...]:
        """Serve app names and route prefixes are one namespace on the cluster, across tenants."""
        return (Claim(what="Serve app name", value=self.serve_name,
                      fix=f"change its traffic with `cuberay serve rollout {self.name}`, or take it down first "
                          f"(`cuberay serve delete {self.name}`)"),
                Claim(what="route_prefix", value=self.spec.route_prefix,
                      fix="choose another route_prefix, or take that app down first (`cuberay serve delete`)"))
