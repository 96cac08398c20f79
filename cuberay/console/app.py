"""The platform's HTTP API: the controller's typed API (cuberay/platform/api/protocol.py) served as JSON.

No Ray here: ``make_app(send, token)`` is an aiohttp application whose one job is to turn a request into a call
of ``send(method, caller, args, kwargs)`` and its answer (or refusal) back into JSON (cuberay/platform/api/wire.py).
In the platform, ``send`` calls the controller actor (cuberay/console/service.py); in the unit tier, a controller
in the test's own process. Either way the call carries its caller to the controller's access rules, so HTTP
grants nothing the Ray transport does not.

Who gets in: a request must carry the cluster's token (``Authorization: Bearer <token>``, the token of Ray's
token authentication), compared in constant time, and name this machine as its host (127.0.0.1 or localhost:
a page whose own name was made to resolve here is refused). The user a call acts for is the caller's claim, exactly as
``CUBERAY_USER`` is for the CLI (docs/security.md). Calls are POSTs of ``application/json`` with the bearer header,
which a page of another site cannot make a browser send without asking this server first (and it says no: no
CORS headers are ever served).

The console (``/``): pages in cuberay/console/static/, served from the package (nothing from the internet; a
Content-Security-Policy of 'self' says so to the browser too), whose scripts call the same API with a session
cookie instead of the bearer token (cuberay/console/sessions.py): the cookie is HttpOnly and SameSite=Strict,
each call also carries the session's CSRF token in a header and, when the browser names one, an Origin of this
server's, and the caller of every call is the session's user, whatever the body says.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from cuberay.console import login
from cuberay.console.sessions import CSRF_HEADER, Sessions
from cuberay.errors import CuberayError
from cuberay.platform.api import ENDPOINTS, SIGNATURES, Caller, wire

Send = Callable[[str, Caller, tuple[Any, ...], dict[str, Any]], Awaitable[Any]]
MAX_BODY = 16 << 20  # a job spec with an inline script, a pipeline of many steps: well under this
LOCAL_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})  # the names the server answers to (it listens on 127.0.0.1)
log = logging.getLogger(__name__)


def make_app(send: Send, token: str) -> web.Application:
    """The API as an aiohttp application: every call through ``send``, every request but /health with ``token``."""
    if not token:
        raise ValueError("the API server needs the cluster's token: without one it would admit any request")
    sessions = Sessions()
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_guard(token, sessions)])
    app.router.add_post(wire.CALL_PATH + "{method}", _call_handler(send))
    app.router.add_get(wire.PREFIX + "/health", _health)
    app.router.add_get(wire.PREFIX + "/openapi.json", _openapi)
    login.add_routes(app, token, sessions)
    return app


# Reached without a credential: the page itself (which then asks to sign in), its assets, sign-in, health.
_OPEN = (wire.PREFIX + "/health", login.LOGIN_PATH, login.SESSION_PATH, login.LOGOUT_PATH)


def _guard(token: str, sessions: Sessions) -> Any:
    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) \
            -> web.StreamResponse:
        host = (request.host or "").rsplit(":", 1)[0].strip("[]")
        if host not in LOCAL_NAMES:  # a page's own name resolved to this machine (DNS rebinding): not ours
            return _refused(421, "WrongHost", f"this API answers only as 127.0.0.1 or localhost, not {host!r}")
        if request.method == "POST" and not login.same_origin(request):
            return _refused(403, "CrossSite", f"a call from another site's page ({request.headers['Origin']!r}) "
                                              f"is refused: open the console at http://{request.host}/")
        if request.path in _OPEN or (request.method == "GET" and login.is_page(request.path)):
            pass
        elif request.headers.get("Authorization"):
            if not hmac.compare_digest(request.headers["Authorization"].encode(), f"Bearer {token}".encode()):
                return _not_signed_in()
        else:
            session = sessions.get(request.cookies.get(login.COOKIE))
            if session is None:
                return _not_signed_in()
            # The cookie rides along with any request the browser makes; the header only with the console's own.
            if not hmac.compare_digest(request.headers.get(CSRF_HEADER, "").encode(), session.csrf.encode()):
                return _refused(403, "CrossSite", f"a call with the session cookie must carry the session's "
                                                  f"{CSRF_HEADER} header (the console's pages send it): reload "
                                                  f"the console")
            request[login.USER_KEY] = session.user
        if request.method == "POST" and request.content_type != "application/json":
            return _refused(415, "WireError", f"a call's body is JSON: send Content-Type: application/json, not "
                                              f"{request.content_type!r}")
        try:
            return await handler(request)
        except web.HTTPException as err:  # aiohttp's own refusals (a body over the limit, an unknown path)
            return _refused(err.status, "WireError", f"{err.reason}: {err.text or ''}".strip(": "))

    return guard


def _call_handler(send: Send) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def call(request: web.Request) -> web.Response:
        method = request.match_info["method"]
        try:
            try:
                body = await request.json()
            except ValueError:
                raise wire.WireError("a call's body is JSON: {\"caller\": {\"user\": NAME}, \"args\": [], "
                                     "\"kwargs\": {}}") from None
            if request.get(login.USER_KEY) and isinstance(body, dict):  # a page acts as its session's user, only
                body = {**body, "caller": {"user": request[login.USER_KEY]}}
            caller, args, kwargs = wire.decode_call(method, body)
            value = await send(method, caller, args, kwargs)
            return web.json_response(wire.encode_answer(method, value))
        except CuberayError as err:
            status, answer = wire.encode_error(err)
            return web.json_response(answer, status=status)
        except web.HTTPException:
            raise
        except Exception as err:  # noqa: BLE001 - a fault of the server is an answer too, never a dropped request
            log.exception("the API server failed in %s()", method)
            return _refused(500, "CuberayError", f"the cuberay API server failed in {method}() "
                                                 f"({type(err).__name__}: {err}); retry, and report it if it persists")

    return call


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi())


@functools.cache
def openapi() -> dict[str, Any]:
    """An OpenAPI 3.1 document of every call: its parameters, its answer's JSON Schema and who may make it (built
    once: the API does not change while the server runs)."""
    paths: dict[str, Any] = {}
    for name, endpoint in ENDPOINTS.items():
        params = {p.name: {"description": f"default {p.default!r}" if p.default is not p.empty else "required"}
                  for p in SIGNATURES[name].parameters.values()}
        paths[wire.CALL_PATH + name] = {"post": {
            "summary": endpoint.summary,
            "description": f"Who may call it: {endpoint.rule.describe()}. Arguments, in the body's args (in order) "
                           f"or kwargs: {', '.join(params) or 'none'}.",
            "requestBody": {"required": True, "content": {"application/json": {"schema": _CALL_SCHEMA}}},
            "responses": {"200": {"description": "The answer", "content": {"application/json": {"schema": {
                "type": "object", "properties": {"result": wire.answer_schema(name)}}}}},
                "default": {"description": "A refusal", "content": {"application/json": {"schema": _ERROR_SCHEMA}}}},
        }}
    return {"openapi": "3.1.0", "info": {"title": "cuberay API", "version": "v1"}, "paths": paths,
            "components": {"securitySchemes": {"clusterToken": {"type": "http", "scheme": "bearer"}}},
            "security": [{"clusterToken": []}]}


_CALL_SCHEMA = {"type": "object", "required": ["caller"], "additionalProperties": False, "properties": {
    "caller": Caller.model_json_schema(), "args": {"type": "array"}, "kwargs": {"type": "object"}}}
_ERROR_SCHEMA = {"type": "object", "properties": {"error": {"type": "object", "properties": {
    "type": {"type": "string"}, "message": {"type": "string"}, "exit_code": {"type": "integer"}}}}}


def _not_signed_in() -> web.Response:
    return _refused(401, "NotAuthenticated",
                    "this API needs the cluster's token: send `Authorization: Bearer <token>`, or sign in to the "
                    "console with it (the token is in ~/.ray/auth_token on the machine that ran `cuberay up`)")


def _refused(status: int, kind: str, message: str) -> web.Response:
    return web.Response(status=status, content_type="application/json",
                        text=json.dumps({"error": {"type": kind, "message": message,
                                                   "exit_code": 2 if 400 <= status < 500 and status != 401 else 1}}))
