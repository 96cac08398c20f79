"""The platform's HTTP API, served for real (aiohttp on a port of this machine) over a real controller in this
process, with Ray left out: the CLI's commands go over it and meet the same access rules as over Ray.

The server is cuberay/console/app.py as the head's API server runs it; its ``send`` is the in-process
controller's own method (the head's calls the controller actor instead). The client side is the HTTP transport
the CLI uses when the local head serves the API (cuberay/platform/transport/auto.py chooses it).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from cuberay.cli import main
from cuberay.console.app import make_app
from cuberay.errors import AdmissionError, NotFoundError, PlatformNotRunningError
from cuberay.platform import client
from cuberay.platform.api import ENDPOINTS, Caller, wire
from cuberay.platform.control import head
from cuberay.platform.control.head import free_port
from cuberay.platform.transport.auto import AutoTransport
from cuberay.platform.transport.http import ApiUnreachableError, HttpTransport
from cuberay.platform.transport.in_process import InProcess
from tests.unit.local_cluster import controller  # noqa: F401 (a fixture)
from tests.unit.test_cli_controller import running, spec_file, task

TOKEN = "t0ken-of-the-cluster"


@pytest.fixture
def api_url(controller: InProcess) -> Iterator[str]:  # noqa: F811
    """The API server on the controller's own event loop, as its actor would serve it."""
    from aiohttp import web

    async def send(method: str, caller: Caller, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await getattr(controller.controller, method)(caller, *args, **kwargs)

    port = free_port()
    runner = web.AppRunner(make_app(send, TOKEN), access_log=None)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    asyncio.run_coroutine_threadsafe(start(), controller.loop).result(30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), controller.loop).result(30)


@pytest.fixture
def over_http(api_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpTransport]:
    monkeypatch.setenv("CUBERAY_USER", "alice")
    monkeypatch.setenv("COLUMNS", "250")
    transport = HttpTransport(api_url, TOKEN)
    with client.using(transport):
        yield transport


def test_cli_commands_over_http_meet_the_controllers_rules(controller: InProcess, over_http: HttpTransport,  # noqa: F811
                                                           tmp_path: Path, capsys, monkeypatch) -> None:
    assert main(["submit", spec_file(tmp_path, task("train")), "-o", "json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["id"]
    with client.using(controller):
        record = running(controller, job_id)
    # The same record over HTTP as in process: every field survives JSON both ways.
    assert client.status(job_id) == record
    assert main(["status", job_id]) == 0 and "RUNNING" in capsys.readouterr().out
    assert main(["queue", "-o", "json"]) == 0 and job_id in capsys.readouterr().out
    assert main(["tenants", "-o", "json"]) == 0
    assert {t["name"] for t in json.loads(capsys.readouterr().out)} == {"vision", "nlp"}
    # A non-member's cancel is refused with the rule, exit 3; an unknown job is exit 4; a bad spec exit 2.
    monkeypatch.setenv("CUBERAY_USER", "nina")
    assert main(["cancel", job_id]) == 3
    assert "vision" in capsys.readouterr().err
    monkeypatch.setenv("CUBERAY_USER", "alice")
    assert main(["status", "vision-nothing-9"]) == 4
    bad = task("bad")
    bad["spec"]["workers"] = 0
    assert main(["submit", spec_file(tmp_path, bad)]) == 2
    assert main(["cancel", job_id]) == 0
    assert client.status(job_id).state.is_terminal or client.status(job_id).state.value == "CANCELLING"


def test_errors_come_back_as_the_class_the_controller_raised(over_http: HttpTransport) -> None:
    with pytest.raises(NotFoundError):
        client.status("vision-missing-1")
    with client.acting_as("nina"), pytest.raises(AdmissionError):
        client.submit(task("x"))  # nina is no member of vision


def test_requests_without_the_cluster_token_are_refused(api_url: str) -> None:
    with client.using(HttpTransport(api_url, "not-the-token")), pytest.raises(PlatformNotRunningError,
                                                                               match="HTTP 401"):
        client.tenants()
    request = urllib.request.Request(f"{api_url}{wire.CALL_PATH}tenants", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
    with urllib.request.urlopen(f"{api_url}{wire.PREFIX}/health", timeout=10) as health:  # health needs none
        assert json.loads(health.read()) == {"ok": True}


def test_a_malformed_call_says_what_the_api_takes(api_url: str) -> None:
    def post(path: str, body: bytes, **headers: str) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(f"{api_url}{path}", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {TOKEN}",
                                                  "Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    status, body = post(wire.CALL_PATH + "no_such_method", b'{"caller": {"user": "alice"}}')
    assert status == 404 and "openapi.json" in body["error"]["message"]
    status, body = post(wire.CALL_PATH + "status", b"not json")
    assert status == 400 and "caller" in body["error"]["message"]
    status, body = post(wire.CALL_PATH + "status", b'{"caller": {"user": "alice"}, "args": [1, 2, 3, 4, 5]}')
    assert status == 400 and "signature" in body["error"]["message"]
    status, body = post(wire.CALL_PATH + "status", b'{"caller": {}, "args": ["x"]}')
    assert status == 400 and "user" in body["error"]["message"]
    # What a page of another site can make a browser send without asking first: a form's text/plain POST; and
    # a request for another name that was made to resolve to this machine.
    call = b'{"caller": {"user": "alice"}, "args": []}'
    status, body = post(wire.CALL_PATH + "tenants", call, **{"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in body["error"]["message"]
    status, body = post(wire.CALL_PATH + "tenants", call, Host="evil.example:80")
    assert status == 421 and "127.0.0.1" in body["error"]["message"]
    status, body = post(wire.CALL_PATH + "tenants", b'{"caller": {"user": "alice"}, "args": ["' + b"x" * (17 << 20) +
                        b'"]}')
    assert status == 413 and body["error"]["exit_code"] == 2
    assert post(wire.CALL_PATH + "tenants", call)[0] == 200


def test_the_server_will_not_run_without_a_token() -> None:
    async def send(*_: Any) -> None: ...

    with pytest.raises(ValueError, match="token"):
        make_app(send, "")


def test_the_openapi_document_lists_every_call_with_its_rule(api_url: str) -> None:
    request = urllib.request.Request(f"{api_url}{wire.PREFIX}/openapi.json",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        doc = json.loads(answer.read())
    assert set(doc["paths"]) == {wire.CALL_PATH + name for name in ENDPOINTS}
    cancel = doc["paths"][wire.CALL_PATH + "cancel"]["post"]
    assert "submitter" in cancel["description"] and cancel["summary"] == "Cancel a job."


def test_nothing_listening_is_unreachable_not_a_hang() -> None:
    transport = HttpTransport(f"http://127.0.0.1:{free_port()}", TOKEN)
    with pytest.raises(ApiUnreachableError, match="cuberay up"):
        transport.send("tenants", Caller(user="alice"), (), {}, timeout=5)


def _record_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **fields: Any) -> None:
    """A head state naming this test's own process as the head (it runs, so the state counts as live)."""
    monkeypatch.setenv("CUBERAY_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    me = psutil.Process()
    head.state_path().write_text(json.dumps({"pid": me.pid, "pgid": os.getpgid(0), "create_time": me.create_time(),
                                             "address": "10.0.0.1:6379", **fields}))


def test_the_cli_goes_over_http_only_to_the_local_heads_own_cluster(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    _record_head(tmp_path, monkeypatch)
    assert AutoTransport().http() is None  # a head without an API server: Ray
    head.update_state(api_url="http://127.0.0.1:1")
    chosen = AutoTransport().http()
    assert chosen is not None and chosen.url == "http://127.0.0.1:1"
    for same in ("10.0.0.1:6379", "http://127.0.0.1:8265"):  # its address, or a dashboard URL (ray job submit's)
        monkeypatch.setenv("RAY_ADDRESS", same)
        assert AutoTransport().http() is not None, same
    monkeypatch.setenv("RAY_ADDRESS", "10.9.9.9:6379")  # another cluster: never this head's API
    assert AutoTransport().http() is None
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setenv("CUBERAY_TRANSPORT", "ray")  # asked for Ray
    assert AutoTransport().http() is None
