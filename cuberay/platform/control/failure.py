"""A failed driver's reason in one line, from the end of its log: what a job's ``message`` says."""

from __future__ import annotations

import re

# Ray colours and prefixes what it forwards from actors and tasks to the driver's log: "(GangWorker pid=25452)",
# "(RayTrainWorker pid=24788, ip=10.0.0.2)". When a gang fails, the driver's own lines name the worker and its
# error; the peers it then stops print their SIGTERM tracebacks after them, through Ray, in any order.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FORWARDED = re.compile(r"^\s*\([\w:.\-]+ pid=\d+(?:, ip=[^)]*)?\)")
LINES = 3     # the last lines kept
LIMIT = 600   # characters kept of them


def failure_tail(text: str) -> str:
    """The last lines of a failed run's log, joined by " | ", without colour codes; the driver's own lines when
    it wrote any (what Ray forwards from other processes only when it did not); "no output" for an empty log."""
    lines = [line for line in (_ANSI.sub("", raw).rstrip() for raw in text.splitlines()) if line.strip()]
    own = [line for line in lines if not _FORWARDED.match(line)]
    return " | ".join((own or lines)[-LINES:])[-LIMIT:] or "no output"
