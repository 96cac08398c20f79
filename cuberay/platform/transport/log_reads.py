"""A job's log read through the controller's API a chunk at a time: the whole of it, or followed as it grows."""

from __future__ import annotations

import time
from typing import Any, Iterator

from cuberay.platform.api.records import LogChunk


def whole(api: Any, ref: str) -> Iterator[str]:
    """Every attempt's log, oldest first; with several, each after a line ``--- attempt N ---``."""
    latest: LogChunk = api.logs(ref, None, 0)
    line_start = True
    for n in range(1, latest.latest_attempt + 1):
        if latest.latest_attempt > 1:
            yield ("" if line_start else "\n") + f"--- attempt {n} ---\n"
        chunk = latest if n == latest.latest_attempt else api.logs(ref, n, 0)
        while True:
            if chunk.text:
                yield chunk.text
                line_start = chunk.text.endswith("\n")
            if not chunk.more:
                break
            chunk = api.logs(ref, n, chunk.next_offset)


def follow(api: Any, ref: str, poll_s: float) -> Iterator[str]:
    """New text as it comes, every attempt from the first, until the job ends; each read goes on from the last."""
    attempt, offset, line_start = 0, 0, True  # attempt 0: none seen yet
    while True:
        chunk: LogChunk = api.logs(ref, attempt or None, offset)
        if attempt == 0 and chunk.latest_attempt:
            attempt = 1
            if chunk.attempt != 1:
                continue  # followed late: from the first attempt's start
        if chunk.text:
            yield chunk.text
            line_start = chunk.text.endswith("\n")
        offset = chunk.next_offset
        if chunk.more:
            continue
        if chunk.latest_attempt > attempt > 0:  # this attempt is read to its end: on to the next
            attempt, offset = attempt + 1, 0
            yield ("" if line_start else "\n") + f"--- cuberay: attempt {attempt} started ---\n"
            line_start = True
            continue
        if chunk.terminal:
            return
        time.sleep(poll_s)
