"""The HTTP transport: the controller's API as the platform's API server serves it (cuberay/console/app.py).

Standard library only, and no Ray: a CLI command that only reads or changes the platform's records answers in
a fraction of a second instead of joining the cluster as a Ray driver. The server admits a request that carries
the cluster's token (the one Ray's token authentication uses) and passes each call, with its caller, to the
controller's access rules like every other transport.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any, Mapping

from cuberay.errors import ControllerRestartingError, PlatformNotRunningError
from cuberay.platform.api import Caller, wire


class ApiUnreachableError(PlatformNotRunningError):
    """Nothing answers at the API's address (the server is not running, or restarting)."""


class HttpTransport:
    """Calls the controller through the API server at ``url`` (``http://host:port``), sending ``token``."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self._token = token

    def send(self, method: str, caller: Caller, args: tuple[Any, ...], kwargs: Mapping[str, Any],
             timeout: float) -> Any:
        try:
            body = json.dumps(wire.encode_call(caller, args, kwargs)).encode()
        except (TypeError, ValueError) as err:
            raise wire.WireError(f"an argument of {method}() cannot travel as JSON ({err}); pass plain values: "
                                 f"text, numbers, lists and mappings") from None
        headers = {"Content-Type": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(f"{self.url}{wire.CALL_PATH}{method}", data=body, headers=headers,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                text = answer.read()
            try:
                data = json.loads(text)
            except ValueError:
                raise wire.WireError(f"the cuberay API at {self.url} answered {method}() with something other than "
                                     f"JSON: {text[:200]!r}; is that address the API's (`cuberay up` prints it)?") from None
            return wire.decode_answer(method, data)
        except urllib.error.HTTPError as err:
            raise self._refusal(method, err) from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, ConnectionRefusedError):  # nothing was sent: another transport may try
                raise ApiUnreachableError(f"nothing answers at the cuberay API ({self.url}: {err.reason}); is the "
                                          f"platform up? `cuberay up` starts it") from None
            raise self._broken(method, err.reason, timeout) from None
        except (ConnectionError, TimeoutError, OSError, http.client.HTTPException) as err:  # after the request
            # went out: it may have acted
            raise self._broken(method, err, timeout) from None

    def _broken(self, method: str, reason: object, timeout: float) -> PlatformNotRunningError:
        if isinstance(reason, TimeoutError):
            return PlatformNotRunningError(
                f"the cuberay API at {self.url} did not answer {method}() within {timeout:.0f}s; the controller "
                f"may be overloaded: retry, or restart the platform (`cuberay down`, then `cuberay up`)")
        return ControllerRestartingError(
            f"the connection to the cuberay API at {self.url} broke during {method}() ({type(reason).__name__}: "
            f"{reason}); the API server may be restarting. A change you asked for may or may not have been made: "
            f"check (`cuberay status`, `cuberay queue`) before you repeat it")

    def _refusal(self, method: str, err: urllib.error.HTTPError) -> Exception:
        try:
            body = json.loads(err.read() or b"null")
        except ValueError:
            body = None
        if err.code == 401:
            return PlatformNotRunningError(
                f"the cuberay API at {self.url} refused this process's cluster token (HTTP 401); use the token of "
                f"the cluster's head (~/.ray/auth_token, or RAY_AUTH_TOKEN)")
        decoded = wire.decode_error(err.code, body)
        if err.code == 503 and not isinstance(decoded, ControllerRestartingError) and body is None:
            return ControllerRestartingError(f"the cuberay API answered {method}() with HTTP 503; retry")
        return decoded
