"""Live counts of a search (done, running, failed, best so far), kept by a Tune callback."""

from __future__ import annotations

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
        self._changed()

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        from cuberay.tune.searchers import SLOT_KEY

        config = {k: v for k, v in (trial.config or {}).items() if k != SLOT_KEY}
        self.progress.offer(result.get(self.progress.metric), config)
        self._changed()

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.running.discard(trial.trial_id)
        self.progress.done += 1
        self._changed()

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.running.discard(trial.trial_id)
        self.progress.failed += 1
        self._changed()
