"""The cuberay exception tree: one root, typed subclasses, one exit code each.

Every message says what was seen, the rule, and the fix. The CLI prints them
without a traceback (set CUBERAY_DEBUG=1 to see one).
"""

from __future__ import annotations


class CuberayError(Exception):
    """Root of every error cuberay raises on purpose."""

    exit_code = 1


class SpecError(CuberayError):
    """A spec, platform file, resource string or CLI usage is invalid."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None) -> None:
        self.file = file
        self.path = path
        where = ""
        if file and path:
            where = f"{file}: {path}: "
        elif file:
            where = f"{file}: "
        elif path:
            where = f"{path}: "
        super().__init__(f"{where}{message}")
        self.reason = message


class AdmissionError(CuberayError):
    """The platform refused a job: quota, capacity, membership or policy."""

    exit_code = 3


class NotFoundError(CuberayError):
    """A job, tenant or other named object does not exist."""

    exit_code = 4


class JobFailedError(CuberayError):
    """A job ended FAILED."""

    exit_code = 1


class PlatformNotRunningError(CuberayError):
    """No controller is reachable."""

    exit_code = 1


class ControllerRestartingError(PlatformNotRunningError):
    """The controller died mid-call or is restarting: Ray brings it back, so the call can be repeated."""


class ServeDeployError(CuberayError):
    """Ray Serve refused, failed or did not keep a deployment."""

    exit_code = 1
