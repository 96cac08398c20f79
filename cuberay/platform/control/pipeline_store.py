"""Pipelines, their runs and the runs' steps in the platform database.

Three tables registered on the store's metadata, so ``Store`` creates them with
the others (a new table needs no migration step). The unique (tenant, pipeline,
tick) index is what makes a cron tick run at most once, across restarts. Like
:class:`~cuberay.platform.control.store.Store`, every call is one short
transaction and returns plain pydantic records.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from pydantic import BaseModel
from sqlalchemy import JSON, Double, Index, Integer, String, Text, UniqueConstraint, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from cuberay.errors import NotFoundError
from cuberay.platform.api.records import PipelineRecord, RunRecord, StepRecord
from cuberay.platform.control.store import Store
from cuberay.platform.control.tables import ID_LEN, NAME_LEN, Base
from cuberay.platform.policy.run_states import RunState, StepState


class _PipelineRow(Base):
    __tablename__ = "pipelines"

    tenant: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    user: Mapped[str] = mapped_column(String(NAME_LEN))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    version: Mapped[int] = mapped_column(Integer)
    submit_time: Mapped[float] = mapped_column(Double)
    last_tick: Mapped[float | None] = mapped_column(Double)


class _RunRow(Base):
    __tablename__ = "pipeline_runs"
    __table_args__ = (UniqueConstraint("tenant", "pipeline", "tick", name="uq_pipeline_runs_tick"),
                      Index("ix_pipeline_runs_pipeline", "tenant", "pipeline"))

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN))
    pipeline: Mapped[str] = mapped_column(String(NAME_LEN))
    seq: Mapped[int] = mapped_column(Integer)
    trigger: Mapped[str] = mapped_column(String(16))
    tick: Mapped[float | None] = mapped_column(Double)
    execution_time: Mapped[float] = mapped_column(Double)
    user: Mapped[str] = mapped_column(String(NAME_LEN))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), index=True)
    workdir: Mapped[str] = mapped_column(Text)
    create_time: Mapped[float] = mapped_column(Double)
    start_time: Mapped[float | None] = mapped_column(Double)
    end_time: Mapped[float | None] = mapped_column(Double)
    message: Mapped[str] = mapped_column(Text)


class _StepRow(Base):
    __tablename__ = "pipeline_steps"

    run_id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    job_ids: Mapped[list[str]] = mapped_column(JSON)
    start_time: Mapped[float | None] = mapped_column(Double)
    end_time: Mapped[float | None] = mapped_column(Double)
    message: Mapped[str] = mapped_column(Text)
    outputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    nodes: Mapped[list[str]] = mapped_column(JSON)


class DuplicateTickError(Exception):
    """The tick already has a run (the unique index refused a second one)."""


def _values(record: BaseModel) -> dict[str, Any]:
    values = record.model_dump()
    if "state" in values:
        values["state"] = values["state"].value if hasattr(values["state"], "value") else values["state"]
    return values


class PipelineStore:
    """Pipeline tables of one :class:`Store` (same database, same sessions)."""

    def __init__(self, store: Store) -> None:
        self._sessions = store._sessions  # one engine per database; the tables live on the store's metadata
        Base.metadata.create_all(store._engine, tables=[_PipelineRow.__table__, _RunRow.__table__,
                                                         _StepRow.__table__])

    # ------------------------------------------------------------ pipelines

    def put_pipeline(self, tenant: str, name: str, user: str, spec: dict[str, Any], now: float) -> PipelineRecord:
        """Store a definition (a new one, or a replacement that keeps the schedule's last tick)."""
        with self._sessions.begin() as session:
            row = session.get(_PipelineRow, (tenant, name))
            if row is None:
                row = _PipelineRow(tenant=tenant, name=name, user=user, spec=spec, version=1, submit_time=now,
                                   last_tick=None)
                session.add(row)
            else:
                row.user, row.spec, row.version, row.submit_time = user, spec, row.version + 1, now
            session.flush()
            return PipelineRecord.model_validate(row)

    def get_pipeline(self, tenant: str, name: str) -> PipelineRecord:
        with self._sessions() as session:
            row = session.get(_PipelineRow, (tenant, name))
            if row is None:
                raise NotFoundError(f"tenant {tenant!r} has no pipeline {name!r}; submit it with "
                                    f"`cuberay pipeline submit FILE` (`cuberay pipeline runs` lists runs)")
            return PipelineRecord.model_validate(row)

    def pipelines(self) -> list[PipelineRecord]:
        with self._sessions() as session:
            return [PipelineRecord.model_validate(r) for r in session.scalars(
                select(_PipelineRow).order_by(_PipelineRow.tenant, _PipelineRow.name))]

    def set_last_tick(self, tenant: str, name: str, tick: float) -> None:
        with self._sessions.begin() as session:
            row = session.get(_PipelineRow, (tenant, name))
            if row is not None and (row.last_tick is None or tick > row.last_tick):
                row.last_tick = tick

    # ------------------------------------------------------------ runs

    def next_run_seq(self, tenant: str, pipeline: str) -> int:
        with self._sessions() as session:
            top = session.scalar(select(func.max(_RunRow.seq)).where(_RunRow.tenant == tenant,
                                                                     _RunRow.pipeline == pipeline))
        return (top or 0) + 1

    def add_run(self, run: RunRecord, step_names: Iterable[str]) -> RunRecord:
        """Record a run and its PENDING steps in one transaction; DuplicateTickError if its tick has a run."""
        try:
            with self._sessions.begin() as session:
                session.add(_RunRow(**_values(run)))
                for name in step_names:
                    session.add(_StepRow(**_values(StepRecord(run_id=run.id, name=name, state=StepState.PENDING))))
        except IntegrityError:
            raise DuplicateTickError(f"tick {run.tick} of {run.tenant}/{run.pipeline} already has a run") from None
        return run

    def update_run(self, run_id: str, **fields: Any) -> RunRecord:
        with self._sessions.begin() as session:
            row = session.get(_RunRow, run_id)
            if row is None:
                raise self._no_run(run_id)
            updated = RunRecord.model_validate({**RunRecord.model_validate(row).model_dump(), **fields})
            values = _values(updated)
            for key in fields:
                setattr(row, key, values[key])
            return updated

    def get_run(self, run_id: str) -> RunRecord:
        with self._sessions() as session:
            row = session.get(_RunRow, run_id)
            if row is None:
                raise self._no_run(run_id)
            return RunRecord.model_validate(row)

    def runs(self, tenant: str | None = None, pipeline: str | None = None,
             states: Iterable[RunState] | None = None) -> list[RunRecord]:
        query = select(_RunRow)
        if tenant is not None:
            query = query.where(_RunRow.tenant == tenant)
        if pipeline is not None:
            query = query.where(_RunRow.pipeline == pipeline)
        if states is not None:
            query = query.where(_RunRow.state.in_([RunState(s).value for s in states]))
        with self._sessions() as session:
            return [RunRecord.model_validate(r) for r in session.scalars(
                query.order_by(_RunRow.execution_time, _RunRow.id))]

    # ------------------------------------------------------------ steps

    def steps(self, run_id: str) -> list[StepRecord]:
        with self._sessions() as session:
            return [StepRecord.model_validate(r) for r in session.scalars(
                select(_StepRow).where(_StepRow.run_id == run_id))]

    def update_step(self, run_id: str, name: str, **fields: Any) -> StepRecord:
        with self._sessions.begin() as session:
            row = session.get(_StepRow, (run_id, name))
            if row is None:
                raise NotFoundError(f"run {run_id!r} has no step {name!r}")
            updated = StepRecord.model_validate({**StepRecord.model_validate(row).model_dump(), **fields})
            values = _values(updated)
            for key in fields:
                setattr(row, key, values[key])
            return updated

    def _no_run(self, run_id: str) -> NotFoundError:
        return NotFoundError(f"no pipeline run has the id {run_id!r}; list runs with `cuberay pipeline runs`")


def now() -> float:
    return time.time()
