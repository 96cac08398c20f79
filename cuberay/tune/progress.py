"""A search as it goes: counts (done, running, failed, best so far) and each trial's row, kept by a Tune callback.

The rows are what the driver reports to the platform (``trials_report``) for the console's Tune page: only
those that changed since the last report are handed out (:meth:`Progress.take_changed`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ray.tune import Callback


@dataclass
class Progress:
    metric: str
    mode: str
    total: int
    running: set[str] = field(default_factory=set)
    done: int = 0
    failed: int = 0
    best_value: float | None = None
    best_config: dict | None = None
    rows: dict[str, dict] = field(default_factory=dict)    # trial id -> TrialInfo's fields
    changed: set[str] = field(default_factory=set)         # trial ids whose row changed since take_changed

    def row(self, trial: Any) -> dict:
        """The row of ``trial`` (a Ray Tune Trial), made on first sight and marked changed."""
        from cuberay.tune.searchers import SLOT_KEY

        found = self.rows.get(trial.trial_id)
        if found is None:
            found = self.rows[trial.trial_id] = {
                "trial_id": trial.trial_id, "index": _number(trial, len(self.rows)), "state": "RUNNING",
                "config": _plain({k: v for k, v in (trial.config or {}).items() if k != SLOT_KEY}),
                "value": None, "iterations": 0, "history": [], "error": None}
        self.changed.add(trial.trial_id)
        return found

    def take_changed(self) -> list[dict]:
        """The rows changed since the last call (copies), by index; none are marked changed after."""
        out = [dict(self.rows[t], history=list(self.rows[t]["history"])) for t in self.changed]
        self.changed.clear()
        return sorted(out, key=lambda r: r["index"])

    def offer(self, value: Any, config: dict) -> None:
        if not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            return
        better = self.best_value is None or (value > self.best_value if self.mode == "max" else
                                             value < self.best_value)
        if better:
            self.best_value, self.best_config = float(value), dict(config)

    def summary(self) -> str:
        best = "none yet" if self.best_value is None else f"{self.best_value:.4g}"
        return (f"trials {self.done} done, {len(self.running)} running, {self.failed} failed of "
                f"{self.total}; best {self.metric} {best}")


class ProgressCallback(Callback):
    """Updates a Progress from Tune's trial events and calls ``on_change`` after each."""

    def __init__(self, progress: Progress, on_change: Callable[[Progress], None] | None = None):
        self.progress, self.on_change = progress, on_change

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.progress)

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.running.add(trial.trial_id)
        self.progress.row(trial)["state"] = "RUNNING"
        self._changed()

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        row = self.progress.row(trial)
        value = result.get(self.progress.metric)
        self.progress.offer(value, row["config"])
        if isinstance(value, (int, float)) and math.isfinite(float(value)):
            row["value"] = float(value)
            row["history"].append(float(value))
        row["iterations"] += 1
        self._changed()

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.running.discard(trial.trial_id)
        self.progress.done += 1
        self.progress.row(trial)["state"] = "TERMINATED"
        self._changed()

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.running.discard(trial.trial_id)
        self.progress.failed += 1
        row = self.progress.row(trial)
        row["state"], row["error"] = "ERROR", _error_line(trial)
        self._changed()


def _plain(config: dict) -> dict:
    """The config as JSON holds it (the row is stored as JSON): numpy numbers become numbers, anything else its
    text."""
    return json.loads(json.dumps(config, default=lambda v: v.item() if hasattr(v, "item") else str(v)))


def _number(trial: Any, fallback: int) -> int:
    """Tune's trial number: its experiment tag starts with it ("3" or "3_lr=0.01")."""
    head = str(getattr(trial, "experiment_tag", "") or "").split("_", 1)[0]
    return int(head) if head.isdigit() else fallback


def _error_line(trial: Any) -> str:
    """A failed trial's error in one line: the last line of the traceback Tune wrote (or where to look)."""
    try:
        path = trial.error_file
        if path:
            with open(path) as f:
                lines = [ln.strip() for ln in f if ln.strip()]
            return (lines[-1] if lines else "")[:500] or "the trial failed; see the job's log"
    except OSError:
        pass
    return "the trial failed; see the job's log"
