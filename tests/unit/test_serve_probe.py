"""`cuberay serve rollout --probe FILE`: requests of one's own while a rollout runs, and the URL an app answers at."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from cuberay.cli import main
from cuberay.serve import deploy
from cuberay.serve.probe import probing
from tests.support import wait_for


@pytest.fixture
def server():
    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200 if len(bodies) % 4 else 500)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/digits", bodies
    httpd.shutdown()


def test_probing_posts_the_body_at_its_rate_until_the_block_ends(server) -> None:
    url, bodies = server
    with probing(url, b'{"inputs": [[0]]}', per_s=50) as seen:
        wait_for(lambda: len(seen) >= 8, 10, "eight probe answers")
    count = len(seen)
    assert set(bodies) == {b'{"inputs": [[0]]}'} and len(bodies) >= count
    assert 200 in seen and 500 in seen  # errors are seen as the versions' own, not hidden
    assert len(bodies) <= count + 1  # it stopped with the block (at most the one in flight)


def test_the_url_is_the_proxys_address_and_the_route() -> None:
    details = {"http_options": {"host": "0.0.0.0", "port": 8123}}
    assert deploy.url("/digits", details) == "http://127.0.0.1:8123/digits"
    assert deploy.url("/x", {"http_options": {"host": "10.0.0.2", "port": 8000}}) == "http://10.0.0.2:8000/x"
    assert deploy.url(None, details) is None  # a graph version's own Serve app has no route


@pytest.mark.parametrize(("text", "said"), [(None, "cannot read it"), ("not json", "is not JSON")])
def test_a_probe_file_that_is_no_json_body_is_refused_before_traffic_moves(tmp_path: Path, capsys, text, said) -> None:
    path = tmp_path / "body.json"
    if text is not None:
        path.write_text(text)
    assert main(["serve", "rollout", "digits-serve", "--to", "v2", "--probe", str(path)]) == 2
    assert said in capsys.readouterr().err
