"""What a serving app answers when a request goes wrong, and what it keeps to itself.

A request the app cannot take as sent is a 400 whose short message says what was
expected (``BadRequest``; a custom version may raise it too). Anything else that
fails is a 500 with a short message and the request's id; the traceback goes only to
the replica's log (``ray.serve``'s logger, which Serve writes to the replica log files
under the session's ``logs/serve/``), never to the caller: code paths and library
versions are nobody's business outside.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

log = logging.getLogger("ray.serve")
VERSION_HEADER = "x-cuberay-version"


class BadRequest(ValueError):
    """The request cannot be answered as sent; the message says what was expected (HTTP 400)."""


async def json_body(request: Any) -> Any:
    """The JSON body of an HTTP request, or the payload itself from a handle call; BadRequest if not JSON."""
    if not isinstance(request, Request):
        return request
    body = await request.body()
    try:
        return json.loads(body)
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError alike
        raise BadRequest(f"the request body is not JSON ({err}); send Content-Type: application/json") from None


def client_error(err: BaseException) -> BadRequest | None:
    """The BadRequest behind ``err`` (raised here or in another deployment, arriving as Ray's task error)."""
    cause = getattr(err, "cause", None)  # Ray's error of a remote call (whose text is the remote traceback)
    if isinstance(cause, BadRequest):
        return cause
    return err if isinstance(err, BadRequest) and cause is None else None


def request_id() -> str:
    """The id Serve gave this request (its ``x-request-id`` header), else a fresh one."""
    try:
        from ray.serve.context import _get_serve_request_context

        found = _get_serve_request_context().request_id
    except Exception:  # noqa: BLE001 - outside a replica, or Serve moved it: a fresh id still ties log and answer
        found = ""
    return found or uuid.uuid4().hex


def bad_request(err: BadRequest, version: str | None = None) -> JSONResponse:
    headers = {VERSION_HEADER: version} if version else {}
    return JSONResponse({"error": str(err)}, status_code=400, headers=headers)


def internal_error(err: BaseException, app: str, version: str | None) -> JSONResponse:
    """A 500 with the request id; the traceback into the replica's log under the same id."""
    rid = request_id()
    what = f"version {version}" if version else "the app"
    log.error("request %s to %s: %s failed", rid, app, what, exc_info=err)
    headers = {VERSION_HEADER: version} if version else {}
    return JSONResponse({"error": f"{what} failed to answer; the app's log has the details under this request id",
                         "request_id": rid}, status_code=500, headers=headers)
