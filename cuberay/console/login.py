"""The console's pages and its sign-in: the static files from the package, and the session they run in.

``GET /`` is the console (one page; its views are ``#/queue``, ``#/job/<id>``, ...), ``GET /static/<file>`` its
script and style sheet, both from cuberay/console/static/ inside the installed package. ``POST /api/v1/login``
with ``{"token", "user"}`` opens a session (cuberay/console/sessions.py) and sets its cookie; ``GET
/api/v1/session`` tells a page whether it has one (and its CSRF token); ``POST /api/v1/logout`` ends it.
"""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Any

from aiohttp import web

from cuberay import kinds
from cuberay.console.sessions import COOKIE, CSRF_HEADER, TTL_S, Sessions
from cuberay.platform.api import wire

LOGIN_PATH = wire.PREFIX + "/login"
SESSION_PATH = wire.PREFIX + "/session"
LOGOUT_PATH = wire.PREFIX + "/logout"
KINDS_PATH = wire.PREFIX + "/kinds"
USER_KEY = web.RequestKey("cuberay.user", str)  # the session's user, set on the request by the app's guard
STATIC = resources.files("cuberay.console") / "static"
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".png": "image/png",
          ".svg": "image/svg+xml"}
# Everything from this server, nothing inline or from elsewhere: the browser enforces what the package ships.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache",
}
__all__ = ["COOKIE", "CSRF_HEADER", "add_routes", "is_page", "same_origin"]


def add_routes(app: web.Application, token: str, sessions: Sessions) -> None:
    app.router.add_get("/", _file("index.html"))
    for path in STATIC.iterdir():
        if path.is_file() and not path.name.startswith("."):
            app.router.add_get(f"/static/{path.name}", _file(path.name))
    app.router.add_post(LOGIN_PATH, _login(token, sessions))
    app.router.add_get(SESSION_PATH, _session(sessions))
    app.router.add_post(LOGOUT_PATH, _logout(sessions))
    app.router.add_get(KINDS_PATH, _kinds)


def is_page(path: str) -> bool:
    return path == "/" or path.startswith("/static/")


def same_origin(request: web.Request) -> bool:
    """A browser names the page a request comes from (Origin); a call from another site's page is refused."""
    origin = request.headers.get("Origin")
    return origin is None or origin == f"http://{request.host}"


def _file(name: str) -> Any:
    body = (STATIC / name).read_bytes()  # read once: the package does not change under a running server
    content_type = _TYPES.get("." + name.rsplit(".", 1)[-1], "application/octet-stream")

    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type, headers=_HEADERS)

    return serve


def _login(token: str, sessions: Sessions) -> Any:
    async def login(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("token"), str) or \
                not isinstance(body.get("user"), str):
            return _answer(400, error=("WireError", 'sign in with {"token": CLUSTER_TOKEN, "user": NAME}'))
        if not hmac.compare_digest(body["token"].strip().encode(), token.encode()):
            return _answer(401, error=("NotAuthenticated", "that is not this cluster's token: it is in "
                                                           "~/.ray/auth_token on the machine that ran `cuberay up`"))
        try:
            session = sessions.open(body["user"].strip())
        except ValueError as err:
            return _answer(400, error=("SpecError", str(err)))
        answer = _answer(200, user=session.user, csrf=session.csrf, csrf_header=CSRF_HEADER)
        answer.set_cookie(COOKIE, session.id, httponly=True, samesite="Strict", path="/", max_age=int(TTL_S))
        return answer

    return login


def _session(sessions: Sessions) -> Any:
    async def session(request: web.Request) -> web.Response:
        found = sessions.get(request.cookies.get(COOKIE))
        if found is None:  # an answer, not a refusal: the page asks this first, to know whether to show sign-in
            return _answer(200, user=None)
        return _answer(200, user=found.user, csrf=found.csrf, csrf_header=CSRF_HEADER)

    return session


def _logout(sessions: Sessions) -> Any:
    async def logout(request: web.Request) -> web.Response:
        sessions.close(request.cookies.get(COOKIE))
        answer = _answer(200, ok=True)
        answer.del_cookie(COOKIE, path="/")
        return answer

    return logout


async def _kinds(request: web.Request) -> web.Response:
    """The job kinds and what the pages need of them (which are services, which run trials), from the registry:
    the pages never name a kind themselves."""
    return web.json_response({k.name: {"service": k.service, "trials": k.trials} for k in kinds.registered()})


def _answer(status: int, error: tuple[str, str] | None = None, **fields: Any) -> web.Response:
    body = {"error": {"type": error[0], "message": error[1], "exit_code": 3 if status == 401 else 2}} \
        if error else fields
    return web.json_response(body, status=status, headers={"Cache-Control": "no-store"})
