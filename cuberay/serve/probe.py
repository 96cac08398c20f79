"""Requests of one's own while a rollout runs: each step is judged on answers, and without users' traffic there are
none (a step with too few answers rolls back). Like Flagger's load tester, ``cuberay serve rollout --probe FILE``
sends FILE's body to the app's route at a steady rate until the rollout ends; Serve counts these answers with
every other (their errors and latency are the versions' own)."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Iterator

TIMEOUT_S = 10.0


@contextmanager
def probing(url: str, body: bytes, per_s: float) -> Iterator[list[int]]:
    """Inside, ``body`` is POSTed to ``url`` ``per_s`` times a second; yields the HTTP statuses seen so far."""
    seen: list[int] = []
    stop = threading.Event()

    def send() -> None:
        while not stop.wait(1.0 / per_s):
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                    seen.append(answer.status)
            except urllib.error.HTTPError as err:
                seen.append(err.code)
            except OSError:
                seen.append(0)  # no answer at all (refused, timed out)

    thread = threading.Thread(target=send, name="rollout-probe", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(TIMEOUT_S + 1)
