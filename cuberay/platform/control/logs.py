"""A job's logs, attempt by attempt, read from a byte offset: what ``cuberay logs`` and ``logs -f`` are served from.

Each attempt writes a log of its own, and attempt ``n`` of a launcher job is submission id
``convert.submission_id(job, n)``:

- a small job's attempt (:mod:`.small`) appends to ``<tenant storage>/logs/<job-id>/<submission-id>.log``;
- a Ray Job driver's output is Ray's driver log, ``job-driver-<submission-id>.log`` in the session's logs
  folder of the node the driver runs on: the head, where the controller runs too, unless the driver asks
  for resources of its own (``TASK_RESOURCE_*``), which lets Ray place it on any node.

Both files are read from the offset with a seek, so a read costs what is new. A driver log on another
node is read through the Jobs API, which, like the state API's ``get_log``, only hands out a log whole (or
its last lines), never from an offset: there a read costs the whole log, as it always did.

An ``external`` job's driver (``ray job submit -- cuberay run``) is one Ray Job of the user's for every
attempt, so its log is one log, read as attempt 1.

The controller serves these reads with its other reads, off its admission loop, and runs them in a thread
pool of their own (``POOL`` below), so a follower of a long log never takes a thread the other reads need.
"""

from __future__ import annotations

import asyncio
import codecs
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuberay.errors import NotFoundError, SpecError
from cuberay.platform.api.records import JobRecord, LogChunk
from cuberay.platform.control import convert as conv
from cuberay.platform.control.small import log_file

POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="cuberay-log-read")  # threads start on first use
CHUNK = 1 << 20      # bytes per read unless the caller asks for fewer
MAX_CHUNK = 8 << 20  # the most one read returns
_MIN_READ = 4        # a UTF-8 character's most bytes: a read always moves on


@dataclass(frozen=True)
class Sources:
    """Where one job's attempts wrote, for :func:`read`."""

    storage: Path                                 # the job's tenant storage (small jobs' logs)
    driver_file: Callable[[str], Path | None]     # submission id -> Ray's driver log on this node
    full_text: Callable[[str], str]               # submission id -> the Jobs API's whole log (NotFoundError)


def latest_attempt(rec: JobRecord) -> int:
    if rec.driver == "external":
        return 1 if rec.submission_id else 0
    return rec.attempts


async def read_in_pool(rec: JobRecord, attempt: int | None, offset: int, limit: int, sources: Sources) -> LogChunk:
    """:func:`read` in the log reads' own threads."""
    return await asyncio.get_running_loop().run_in_executor(POOL, read, rec, attempt, offset, limit, sources)


def read(rec: JobRecord, attempt: int | None, offset: int, limit: int, sources: Sources) -> LogChunk:
    """Up to ``limit`` bytes of ``attempt``'s log (None: the latest) from byte ``offset``.

    ``rec`` is read before the log: when it is terminal, the log read after it is complete.
    """
    latest = latest_attempt(rec)
    n = latest if attempt is None else attempt
    if not (1 <= n <= latest or n == latest == 0):
        have = f"it has {latest} so far; ask for one of 1-{latest}" if latest else "none has started yet; ask"
        raise NotFoundError(f"job {rec.id} has no attempt {n}: {have} or for none (the latest)")
    if offset < 0 or limit < 1:
        raise SpecError(f"a log read needs offset >= 0 and limit >= 1, got offset {offset} and limit {limit}")
    sid = _submission_id(rec, n)
    data, size = _bytes(rec.id, sid, offset, max(_MIN_READ, min(limit, MAX_CHUNK)), sources) if sid else (b"", 0)
    if offset > size:
        raise SpecError(f"offset {offset} is past the end of attempt {n} of job {rec.id} ({size} bytes); read "
                        "from the next_offset the last read returned, or from 0")
    more = offset + len(data) < size
    complete = (rec.state.is_terminal or n < latest) and not more  # a cut character will never be finished
    text, used = decode(data, final=complete)
    return LogChunk(attempt=n, offset=offset, text=text, next_offset=offset + used, more=more,
                    latest_attempt=latest, terminal=rec.state.is_terminal)


def _submission_id(rec: JobRecord, attempt: int) -> str | None:
    """The Ray Job (or small job run) of one attempt; None while it has none yet."""
    if attempt == 0 or rec.driver == "external":
        return rec.submission_id if attempt else None
    if attempt == rec.attempts and rec.submission_id is None:
        return None  # admitted, its driver not submitted yet
    return conv.submission_id(rec.id, attempt)


def _bytes(job_id: str, sid: str, offset: int, limit: int, sources: Sources) -> tuple[bytes, int]:
    """(up to ``limit`` bytes from ``offset``, the log's size) of one attempt."""
    for path in (log_file(sources.storage, job_id, sid), sources.driver_file(sid)):
        if path is not None and path.is_file():
            return read_file(path, offset, limit)
    try:
        whole = sources.full_text(sid).encode()
    except NotFoundError:  # not started yet, or Ray no longer has it
        whole = b""
    return whole[offset:offset + limit], len(whole)


def read_file(path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """(up to ``limit`` bytes of ``path`` from ``offset``, its size after the read): one seek, one read."""
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read(limit)
        return data, os.fstat(f.fileno()).st_size


def decode(data: bytes, final: bool) -> tuple[str, int]:
    """(the text of ``data``, how many of its bytes it used): a character the read cut in two waits for the
    next read, unless ``final`` (the log is complete), where it becomes U+FFFD like any invalid byte."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final)
    pending, _ = decoder.getstate()
    return text, len(data) - len(pending)
