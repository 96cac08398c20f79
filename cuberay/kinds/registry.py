"""The registry of job kinds: what the controller, the runner, the pipeline driver and the renderer ask about a kind.

A kind is one adapter: a :class:`JobKind` subclass in its own package, registered with :func:`register` when the
package is imported. Its answers are pure (the spec model and the facts below); the code that runs or renders a
job is named by import path (``"package.module:function"``) and loaded only where it runs, by :func:`load_object`:
the job's driver process runs ``driver``, ``cuberay kube render-job`` calls ``render``. So the controller learns
everything it needs without importing any workload.

Kinds beyond the built-in four are plugins: a module that registers its kinds when imported, named in the
platform file's ``spec.kinds`` (the controller imports those at start and on reload and hands the list to every
driver it launches, as ``CUBERAY_KINDS``) and, for the CLI and ``python -m cuberay.run``, in ``CUBERAY_KINDS``.
"""

from __future__ import annotations

import importlib
from typing import Any, Iterable, Mapping

from cuberay.errors import CuberayError, SpecError
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec.jobs import register_model
from cuberay.platform.spec.workload import JobBase

KINDS_ENV = "CUBERAY_KINDS"  # comma-separated plugin modules, for processes that read no platform file


class JobKind:
    """One kind of job, as the platform needs to know it. Subclass it once per kind and register an instance.

    The defaults describe a plain batch job: it neither resizes nor runs small, the controller retries its
    failed attempts ``spec.max_failures`` times, a pipeline step of it is done once it SUCCEEDED, and it has no
    Kubernetes form.
    """

    model: type[JobBase]         # the spec model; its ``kind`` literal is the kind's name
    driver: str                  # "pkg.module:function", ``run(job, ctx) -> exit code``, in the job's driver process
    render: str | None = None    # "pkg.module:function", ``(platform, job, opts) -> manifests``; None: no Kubernetes form
    service: bool = False        # runs until stopped (a server): never demoted for the service it had; a pipeline
    #                              step of it is done once it runs
    trials: bool = False         # runs a search and reports its trials (``trials_report``; ``objective`` names the
    #                              metric): the console's Tune page lists its jobs
    servable: bool = False       # a ServeApp version may serve its successful runs (``model: {job: NAME}``)
    import_fields: tuple[str, ...] = ()  # spec fields holding "pkg.module:attribute" paths (`cuberay spec validate`)
    # "module:function" (job -> lines) saying what the job's import paths name, imported, after the static check
    # (`cuberay spec validate`); it raises SpecError when one is not what the spec needs. None: nothing to tell.
    code_found: str | None = None

    @property
    def name(self) -> str:
        return str(self.model.model_fields["kind"].default)

    def resizes(self, job: JobBase) -> bool:
        """Whether an elastic job's running allocation may grow and shrink (policy/resize.py)."""
        return False

    def retries(self, job: JobBase) -> int:
        """How many failed attempts the controller puts back in the queue; 0 where the workload retries itself."""
        return job.spec.max_failures

    def small(self, job: JobBase) -> bool:
        """Whether the job is one worker running ``spec.command``, which the small-job runner may run as one Ray
        task (the controller adds its own conditions: no sized driver, no RDMA)."""
        return False

    def step_done(self, state: JobState) -> bool:
        """Whether a pipeline step running this job is done: it SUCCEEDED, or, for a service, it runs."""
        return state == JobState.SUCCEEDED or (self.service and state == JobState.RUNNING)

    def summary(self, message: str) -> str | None:
        """What a succeeded job's final message comes down to in a results table (None: nothing beyond "ok")."""
        return None

    def objective(self, job: JobBase) -> tuple[str, str] | None:
        """A search's metric and mode ("max" or "min"), for a kind with ``trials``. None: no trials."""
        return None


_KINDS: dict[str, JobKind] = {}
_PLUGINS: list[str] = []  # plugin modules this process imported (kinds outside this package), in order


def register(kind: JobKind) -> JobKind:
    """Make ``kind`` known to this process (its spec model too); the same adapter registered again replaces it.

    Raises SpecError when another adapter already holds the name.
    """
    held = _KINDS.get(kind.name)
    if held is not None and _origin(held) != _origin(kind):
        raise SpecError(f"job kind {kind.name!r} is registered twice, by {_origin(held)} and {_origin(kind)}; a kind "
                        f"name belongs to one adapter: rename one kind", path="kind")
    register_model(kind.model)
    _KINDS[kind.name] = kind
    module = type(kind).__module__
    if not module.startswith(f"{__package__}.") and module not in _PLUGINS:  # a plugin, imported however
        _PLUGINS.append(module)
    return kind


def _origin(kind: JobKind) -> str:
    return f"{type(kind).__module__}.{type(kind).__qualname__}"


def of(name: str) -> JobKind:
    """The adapter of kind ``name``; SpecError (exit 2) naming the known kinds when none is registered."""
    kind = _KINDS.get(name)
    if kind is None:
        raise SpecError(f"no job kind {name!r} is registered here (known: {', '.join(_KINDS)}); a plugin kind's "
                        f"module must be in the platform file's spec.kinds (the controller and its drivers) and "
                        f"in {KINDS_ENV} (the CLI)", path="kind")
    return kind


def get(name: str) -> JobKind | None:
    """The adapter of kind ``name``, or None (a stored job of a plugin kind no longer loaded)."""
    return _KINDS.get(name)


def registered() -> tuple[JobKind, ...]:
    """Every registered kind, in registration order (the built-in ones first)."""
    return tuple(_KINDS.values())


def names() -> tuple[str, ...]:
    return tuple(_KINDS)


def step_done(name: str, state: JobState) -> bool:
    """Whether a pipeline step whose job is of kind ``name`` is done in ``state``; a kind no longer loaded is
    done only once it SUCCEEDED."""
    kind = _KINDS.get(name)
    return kind.step_done(state) if kind is not None else state == JobState.SUCCEEDED


# ---------------------------------------------------------------- plugins and what they name

def load(modules: Iterable[str]) -> tuple[str, ...]:
    """Import each plugin module (it registers its kinds when imported), once per process; every plugin loaded.

    Raises SpecError naming the module and what went wrong when one cannot be imported.
    """
    for name in modules:
        if name in _PLUGINS:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import is the plugin's, told as such
            raise SpecError(f"cannot import job-kind module {name!r} ({type(exc).__name__}: {exc}); install it "
                            f"where the controller and the job drivers run (or put it on their PYTHONPATH), or "
                            f"take it out of spec.kinds / {KINDS_ENV}") from None
        if name not in _PLUGINS:  # (its adapters, registering, may have named it already)
            _PLUGINS.append(name)
    return tuple(_PLUGINS)


def load_env(environ: Mapping[str, str]) -> tuple[str, ...]:
    """:func:`load` the modules named in ``environ[CUBERAY_KINDS]`` (comma-separated)."""
    return load(m.strip() for m in environ.get(KINDS_ENV, "").split(",") if m.strip())


def plugins() -> tuple[str, ...]:
    """The plugin modules this process loaded (by :func:`load`, or imported): what its drivers must load too."""
    return tuple(_PLUGINS)


def env() -> dict[str, str]:
    """The environment that has a process this one starts (a job's driver) load the same plugin kinds."""
    return {KINDS_ENV: ",".join(_PLUGINS)} if _PLUGINS else {}


def load_object(path: str, what: str) -> Any:
    """The object an adapter names by ``"package.module:attribute"``, imported now.

    Raises CuberayError saying which of the kind's parts (``what``) could not be loaded, and why.
    """
    module, _, attribute = path.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as exc:  # noqa: BLE001 - import errors of any kind are the adapter's, told as such
        raise CuberayError(f"cannot load {what} {path!r} ({type(exc).__name__}: {exc}); install the kind's "
                           f"package where this runs, or fix the path in its adapter") from None
    return found
