"""What the platform commands show: records as plain data (JSON/YAML) and as table rows.

JSON and YAML carry the records the Python API returns, field for field
(``model_dump`` of a JobRecord, the fields of a QueueEntry or TenantUsage).
Tables carry the same records made readable: ages and durations as ``45s``,
``5m``, ``2h``, ``3d`` (kubectl's style), GPU counts without a trailing ``.0``,
resource vectors in the spec grammar (``CPU=2, memory=4Gi, GPU=1``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable, Mapping, Sequence

from rich.table import Table

from cuberay.cli.output import make_table
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec.resources import format_resources

JOB_COLUMNS = ("job", "tenant", "name", "kind", "state", "gpus", "age", "runtime", "user")
QUEUE_COLUMNS = ("tenant", "job", "kind", "state", "position", "gpus", "workers", "age", "reason")
TENANT_COLUMNS = ("tenant", "guaranteed", "max", "in_use", "borrowed", "running", "queued")
# Resource names in the order people read them; others follow alphabetically.
_RESOURCE_ORDER = ("CPU", "memory", "GPU")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def plain(data: Any) -> Any:
    """``data`` as the API returns it, with dataclasses turned into dicts for the JSON/YAML renderer."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return {f.name: plain(getattr(data, f.name)) for f in dataclasses.fields(data)}
    if isinstance(data, (list, tuple)):
        return [plain(item) for item in data]
    if isinstance(data, Mapping):
        return {key: plain(value) for key, value in data.items()}
    return data


def span(seconds: float | None) -> str:
    """``45s``, ``5m``, ``2h``, ``3d``; ``-`` when unknown. Rounds down, as kubectl does."""
    if seconds is None:
        return "-"
    seconds = max(0.0, float(seconds))
    for unit, size in _UNITS:
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def number(value: float) -> str:
    """``2`` for whole amounts, ``0.5`` otherwise."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def resources(amounts: Mapping[str, float] | None, *, none: str = "-") -> str:
    """A resource vector as the spec grammar writes it; ``none`` when absent or empty."""
    if not amounts:
        return none
    ordered = sorted(amounts.items(), key=lambda kv: (_rank(kv[0]), kv[0]))
    return format_resources(dict(ordered))


def _rank(name: str) -> int:
    return _RESOURCE_ORDER.index(name) if name in _RESOURCE_ORDER else len(_RESOURCE_ORDER)


def job_row(record: Any, now: float | None = None) -> dict[str, str]:
    """One JobRecord as a table row: AGE since submit, RUNTIME of the current or last run."""
    now = time.time() if now is None else now
    runtime = None
    if record.start_time is not None:
        runtime = (record.end_time or now) - record.start_time
    return {"job": record.id, "tenant": record.tenant, "name": record.name, "kind": record.kind,
            "state": JobState(record.state).value, "gpus": number(record.gpus),
            "age": span(now - record.submit_time), "runtime": span(runtime), "user": record.user}


def job_detail(record: Any, now: float | None = None) -> list[dict[str, str]]:
    """One JobRecord as FIELD/VALUE rows (``cuberay status``): the readable fields, not the whole spec."""
    row = job_row(record, now)
    pairs = [("job", row["job"]), ("name", row["name"]), ("tenant", row["tenant"]), ("kind", row["kind"]),
             ("user", row["user"]), ("state", row["state"]), ("priority", str(record.priority)),
             ("gpus", row["gpus"]), ("age", row["age"]), ("runtime", row["runtime"]),
             ("attempts", str(record.attempts)), ("reason", record.reason or "-"),
             ("message", record.message or "-"), ("ray job", record.submission_id or "-")]
    correction = getattr(record, "correction", None)
    if correction:
        asked, now_ = correction["requested"], correction["corrected"]
        pairs += [("requested", f"cpu {asked['cpu']}, memory {asked['memory']} per worker"),
                  ("corrected", f"cpu {now_['cpu']}, memory {now_['memory']} per worker"),
                  ("corrected why", correction["reason"])]
    if record.allocation:
        nodes = [str(w.get("node_id", w)) for w in record.allocation]
        pairs.append(("nodes", ", ".join(n[:12] for n in nodes)))
    return [{"field": key, "value": value} for key, value in pairs]


def queue_rows(entries: Iterable[Any]) -> list[dict[str, str]]:
    """Queue entries grouped per tenant: running jobs first, then waiting ones by position."""
    ordered = sorted(entries, key=lambda e: (e.tenant, e.position is not None, e.position or 0, e.job_id))
    return [{"tenant": e.tenant, "job": e.job_id, "kind": e.kind, "state": JobState(e.state).value,
             "position": "-" if e.position is None else str(e.position), "gpus": number(e.gpus),
             "workers": str(e.workers), "age": span(e.age_s), "reason": e.reason or "-"} for e in ordered]


def tenant_rows(usages: Iterable[Any]) -> list[dict[str, str]]:
    """Tenants with their quota and use; a tenant without ``max`` may use anything free."""
    return [{"tenant": u.name, "guaranteed": resources(u.guaranteed, none="none"),
             "max": "unlimited" if u.max is None else resources(u.max, none="none"),
             "in_use": resources(u.in_use, none="none"), "borrowed": resources(u.borrowed, none="none"),
             "running": str(u.running), "queued": str(u.queued)} for u in usages]


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], title: str | None = None) -> Table:
    """A rich Table of ``rows`` (for live displays; one-shot output goes through ``output.emit``)."""
    return make_table(rows, columns, title)
