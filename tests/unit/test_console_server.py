"""The console's server side, served for real over an in-process controller: its pages come from the package,
a browser session is signed in with the cluster token and named by an HttpOnly cookie, and every call with that
cookie needs the session's CSRF header, comes from this origin, and acts as the session's user only.

The pages themselves are driven in a real browser in tests/integration/test_console.py.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest

from cuberay.console import login
from cuberay.console.sessions import CSRF_HEADER, Sessions
from cuberay.platform import client
from cuberay.platform.transport.in_process import InProcess
from tests.unit.local_cluster import controller  # noqa: F401 (a fixture)
from tests.unit.test_cli_controller import running, task
from tests.unit.test_http_api import TOKEN, api_url  # noqa: F401 (a fixture)


class Browser:
    """A cookie-keeping HTTP client, as a browser is to the server."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def send(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) \
            -> tuple[int, dict[str, str], bytes]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Content-Type": "application/json", **(headers or {})})
        try:
            with self.opener.open(request, timeout=30) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def json(self, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
        status, _, raw = self.send(method, path, body, headers)
        return status, json.loads(raw)

    def sign_in(self, user: str) -> str:
        status, answer = self.json("POST", login.LOGIN_PATH, {"token": TOKEN, "user": user})
        assert status == 200, answer
        return answer["csrf"]


def test_the_pages_come_from_the_package_and_name_nothing_elsewhere(api_url: str) -> None:  # noqa: F811
    browser = Browser(api_url)
    status, headers, page = browser.send("GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    assets = re.findall(rb'(?:src|href)="(/static/[^"]+)"', page)
    assert sorted(assets) == [b"/static/console.css", b"/static/console.js", b"/static/trials.js"]
    for asset in [page] + [browser.send("GET", a.decode())[2] for a in assets]:
        assert not re.search(rb"https?://(?!127\.0\.0\.1|localhost|www\.w3\.org/2000/svg)", asset), \
            "an asset names another site"  # (the SVG namespace is a name, never fetched)
    assert browser.send("GET", "/static/../app.py")[0] == 404


def test_signing_in_needs_the_token_and_sets_an_httponly_samesite_cookie(api_url: str) -> None:  # noqa: F811
    browser = Browser(api_url)
    assert browser.json("GET", login.SESSION_PATH) == (200, {"user": None})
    status, answer = browser.json("POST", login.LOGIN_PATH, {"token": "guess", "user": "alice"})
    assert status == 401 and "auth_token" in answer["error"]["message"]
    assert browser.json("POST", login.LOGIN_PATH, {"token": TOKEN, "user": "al ice; rm"})[0] == 400
    status, headers, raw = browser.send("POST", login.LOGIN_PATH, {"token": TOKEN, "user": "alice"})
    assert status == 200
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"{login.COOKIE}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert browser.json("GET", login.SESSION_PATH)[1]["user"] == "alice"
    browser.json("POST", login.LOGOUT_PATH, {})
    assert browser.json("GET", login.SESSION_PATH) == (200, {"user": None})


def test_a_sessions_calls_need_its_csrf_header_and_this_origin(controller: InProcess, api_url: str) -> None:  # noqa: F811
    browser = Browser(api_url)
    assert browser.json("POST", "/api/v1/call/tenants", {})[0] == 401  # no session, no token: nothing
    csrf = browser.sign_in("alice")
    status, answer = browser.json("POST", "/api/v1/call/tenants", {})
    assert status == 403 and CSRF_HEADER in answer["error"]["message"]
    status, answer = browser.json("POST", "/api/v1/call/tenants", {}, **{CSRF_HEADER: "not-it"})
    assert status == 403
    status, answer = browser.json("POST", "/api/v1/call/tenants", {}, **{CSRF_HEADER: csrf})
    assert status == 200 and {t["name"] for t in answer["result"]} == {"vision", "nlp"}
    status, answer = browser.json("POST", "/api/v1/call/tenants", {},
                                  **{CSRF_HEADER: csrf, "Origin": "http://evil.example"})
    assert status == 403 and answer["error"]["type"] == "CrossSite"
    status, answer = browser.json("GET", login.KINDS_PATH, **{CSRF_HEADER: csrf})
    assert status == 200 and answer["ServeApp"]["service"] and not answer["Task"]["service"]


def test_a_session_acts_as_its_user_whatever_the_body_claims(controller: InProcess, api_url: str) -> None:  # noqa: F811
    with client.acting_as("nina"):
        job_id = client.submit(task("theirs", tenant="nlp")).id
    running(controller, job_id)
    browser = Browser(api_url)
    csrf = browser.sign_in("alice")
    body = {"caller": {"user": "olga"}, "args": [job_id], "kwargs": {}}  # olga is nlp's admin; alice is not
    status, answer = browser.json("POST", "/api/v1/call/cancel", body, **{CSRF_HEADER: csrf})
    assert status == 403 and answer["error"]["exit_code"] == 3, answer
    with client.acting_as("ops"):
        assert client.status(job_id).state.value == "RUNNING"
    nina = Browser(api_url)
    status, answer = nina.json("POST", "/api/v1/call/cancel", {"args": [job_id]},
                               **{CSRF_HEADER: nina.sign_in("nina")})
    assert status == 200 and answer["result"]["state"] == "CANCELLED"


def test_sessions_expire_and_the_oldest_make_room() -> None:
    now = [0.0]
    sessions = Sessions(ttl_s=10, clock=lambda: now[0])
    first = sessions.open("alice")
    assert sessions.get(first.id) == first and sessions.get("unknown") is None
    now[0] = 11
    assert sessions.get(first.id) is None
    with pytest.raises(ValueError, match="not one cuberay accepts"):
        sessions.open("")
