"""A local HTTP endpoint that records every request and answers like a small API server.

Not a mock of the client: the real ``kubernetes`` client talks HTTP to it, so the tests see
exactly what would go over the wire (method, path, query, headers, body). It stores applied
objects by URL path, so GET and DELETE answer as a server would (404 when absent).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


class FakeApiServer:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.status_of: dict[str, dict[str, Any]] = {}  # path -> status to report on GET
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                server.requests.append(Request(self.command, parts.path, parse_qs(parts.query),
                                               {k.lower(): v for k, v in self.headers.items()}, body))
                code, answer = server.answer(self.command, parts.path, parse_qs(parts.query), body)
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if method == "PATCH":
            if "dryRun" not in query:
                self.objects[path] = body
            return 200, body
        if path not in self.objects:
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                         "message": f"{path.rsplit('/', 1)[-1]} not found"}
        if method == "GET":
            return 200, {**self.objects[path], "status": self.status_of.get(path, {})}
        if method == "DELETE":
            if "dryRun" not in query:
                del self.objects[path]
            return 200, {"kind": "Status", "status": "Success"}
        return 405, {"message": "method not allowed"}

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def kubeconfig(self, folder: Path) -> Path:
        path = folder / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": "test-token"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}))
        return path

    def __enter__(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
