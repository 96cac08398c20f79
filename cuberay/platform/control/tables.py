"""The control plane's tables (SQLAlchemy declarative rows): tenants, jobs, usage, events, Serve changes, trials.

Only :mod:`.store` (and :mod:`.pipeline_store`, whose tables share this metadata) reads
and writes them; callers get pydantic records, never rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Double, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Lengths keep every column indexable on MySQL too; 253 is the longest DNS name Kubernetes allows.
NAME_LEN = 253
ID_LEN = 255


class Base(DeclarativeBase):
    pass


class SchemaVersionRow(Base):
    __tablename__ = "schema_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class TenantRow(Base):
    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Double)


class JobRow(Base):
    __tablename__ = "jobs"
    # (tenant, name) serves tenant filters and next_seq alike; (user, request_id) makes submit idempotent; the
    # rest serve the console's pages at any backlog (migration 0006).
    __table_args__ = (Index("ix_jobs_tenant_name", "tenant", "name"),
                      Index("ux_jobs_user_request", "user", "request_id", unique=True),
                      Index("ix_jobs_submit_time", "submit_time", "id"),
                      Index("ix_jobs_kind_submit_time", "kind", "submit_time"),
                      Index("ix_jobs_user_state", "user", "state"))

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN))  # indexed by ix_jobs_tenant_name
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    kind: Mapped[str] = mapped_column(String(32))
    user: Mapped[str] = mapped_column(String(NAME_LEN))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Plain strings, not a database ENUM: a new state then needs no migration.
    state: Mapped[str] = mapped_column(String(16), index=True)
    priority: Mapped[int] = mapped_column(Integer)
    submit_time: Mapped[float] = mapped_column(Double)
    seq: Mapped[int] = mapped_column(Integer)
    start_time: Mapped[float | None] = mapped_column(Double)
    end_time: Mapped[float | None] = mapped_column(Double)
    attempts: Mapped[int] = mapped_column(Integer)
    allocation: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    reason: Mapped[str] = mapped_column(Text)
    submission_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    driver: Mapped[str | None] = mapped_column(String(16))
    attained_gpu_s: Mapped[float] = mapped_column(Double)
    gpus: Mapped[float] = mapped_column(Double)
    message: Mapped[str | None] = mapped_column(Text)
    checkpoint_time: Mapped[float | None] = mapped_column(Double)
    correction: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    request_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    # SHA-256 of the current attempt's driver secret (control/guard.py); not part of the JobRecord callers get.
    driver_token: Mapped[str | None] = mapped_column(String(64), index=True)


class UsageRow(Base):
    """The peak use of one worker of one attempt (automatic resource correction reads these)."""

    __tablename__ = "usage_samples"
    __table_args__ = (Index("ix_usage_tenant_name", "tenant", "name"),)

    job_id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN))
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    time: Mapped[float] = mapped_column(Double)
    cpu: Mapped[float] = mapped_column(Double)
    memory_gib: Mapped[float] = mapped_column(Double)


class EventRow(Base):
    __tablename__ = "events"
    # The events since a time (the console's last hour), counted by kind from the index alone (migration 0008).
    __table_args__ = (Index("ix_events_time_kind_job", "time", "kind", "job_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Double)
    job_id: Mapped[str | None] = mapped_column(String(ID_LEN), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)


class ServeChangeRow(Base):
    __tablename__ = "serve_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Double)
    app: Mapped[str] = mapped_column(String(ID_LEN), index=True)
    user: Mapped[str] = mapped_column(String(NAME_LEN))
    action: Mapped[str] = mapped_column(String(32))
    weights: Mapped[dict[str, float]] = mapped_column(JSON)
    note: Mapped[str] = mapped_column(Text)


class TrialRow(Base):
    """One trial of a search as its driver last reported it (the console's Tune page, `cuberay tune trials`)."""

    __tablename__ = "trials"

    job_id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    value: Mapped[float | None] = mapped_column(Double)
    iterations: Mapped[int] = mapped_column(Integer)
    history: Mapped[list[float]] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    time: Mapped[float] = mapped_column(Double)
