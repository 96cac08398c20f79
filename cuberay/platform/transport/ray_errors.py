"""Ray's failures of a controller call, as the CuberayError a user can act on (the CLI prints them without a
traceback): what failed, and what to do."""

from __future__ import annotations

from cuberay.errors import ControllerRestartingError, CuberayError, PlatformNotRunningError

_WHERE_LOG = "its log is in the Ray dashboard (Actors tab, cuberay-controller)"


class NoRayClusterError(PlatformNotRunningError):
    """Nothing answered at the address: Ray's own words are in ``seen``."""

    def __init__(self, message: str, seen: str) -> None:
        super().__init__(message)
        self.seen = seen


def call_error(err: BaseException, method: str, timeout: float) -> CuberayError:
    """The CuberayError for a failed ``ray.get`` of the controller's ``method`` (``err`` one of Ray's)."""
    import ray

    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        if isinstance(cause, CuberayError):
            return cause
        what = f"{type(cause).__name__}: {_first_line(cause)}" if cause is not None else _first_line(err)
        return CuberayError(f"the cuberay controller failed in {method}() ({what}); that is a fault of the "
                            f"controller, not of your request: {_WHERE_LOG} with the traceback; retry, and report it "
                            f"if it persists")
    if isinstance(err, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)):
        return ControllerRestartingError(
            f"the cuberay controller died during {method}() ({type(err).__name__}); Ray restarts it and it "
            f"recovers its jobs from the store: retry in a few seconds")
    if isinstance(err, ray.exceptions.GetTimeoutError):
        return PlatformNotRunningError(
            f"the cuberay controller did not answer {method}() within {timeout:.0f}s; it may be overloaded or "
            f"stuck: retry, and if it stays silent look at {_WHERE_LOG[7:]} or restart the platform "
            f"(`cuberay down`, then `cuberay up`)")
    return PlatformNotRunningError(f"the call {method}() to the cuberay controller failed in Ray "
                                   f"({type(err).__name__}: {_first_line(err)}); check that the Ray cluster is up "
                                   f"(`ray status`) and retry")


def init_error(err: BaseException, target: str) -> CuberayError:
    """The CuberayError for a failed ``ray.init(address=target)``."""
    if isinstance(err, (ConnectionError, TimeoutError)):
        return NoRayClusterError(
            f"no Ray cluster at {target} ({_first_line(err)}); start one with `cuberay up` (local) or pass the "
            f"address of a running cluster (`--address HOST:6379` or RAY_ADDRESS)", _first_line(err))
    if type(err).__name__ == "AuthenticationError":
        return PlatformNotRunningError(
            f"the Ray cluster at {target} refused this process ({_first_line(err)}); it uses token "
            f"authentication: set RAY_AUTH_MODE=token and make its token available (~/.ray/auth_token or "
            f"RAY_AUTH_TOKEN)")
    return PlatformNotRunningError(
        f"could not join the Ray cluster at {target} ({type(err).__name__}: {_first_line(err)}); check the "
        f"address (`cuberay up` prints it) and that this Ray ({_ray_version()}) is the cluster's version")


def _first_line(err: object) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(err).__name__


def _ray_version() -> str:
    try:
        import ray

        return f"Ray {ray.__version__}"
    except ImportError:  # pragma: no cover - Ray is a dependency
        return "no Ray"
