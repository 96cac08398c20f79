"""A failed driver's reason in one line, from the end of its log: what a job's ``message`` says."""

from __future__ import annotations

import re

# Ray colours and prefixes what it forwards from actors and tasks to the driver's log: "(GangWorker pid=25452)",
# "(RayTrainWorker pid=24788, ip=10.0.0.2)", "(MapBatches(fn) pid=7)". When a gang fails, the driver names the
# worker and its error, then stops the peers, whose SIGTERM tracebacks Ray forwards after the driver's lines, in
# any order: those processes' lines are noise, while what other workers forwarded (a Ray Train worker's error)
# may be the very reason.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_FORWARDED = re.compile(r"^\s*\((?P<who>[^()]*(?:\([^)]*\)[^()]*)*?)\s*pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)")
_STOPPED = ("sigterm_handler", "raise_sys_exit_with_custom_error_message")  # Ray's worker exiting on SIGTERM
LINES = 3     # the last lines kept
LIMIT = 600   # characters kept of them


def failure_tail(text: str) -> str:
    """The last lines of a failed run's log, joined by " | ", without colour codes, leaving out the lines of
    processes that were stopped (their SIGTERM tracebacks) when anything else is left; "no output" if empty."""
    lines = [line for line in (_ANSI.sub("", raw).rstrip() for raw in text.splitlines()) if line.strip()]
    stopped = {m["pid"] for line in lines if (m := _FORWARDED.match(line)) and any(s in line for s in _STOPPED)}
    kept = [line for line in lines if not ((m := _FORWARDED.match(line)) and m["pid"] in stopped)]
    return " | ".join((kept or lines)[-LINES:])[-LIMIT:] or "no output"
