"""Gradient-boosted trees on scikit-learn's bundled digits, data-parallel under Ray Train: XGBoost and LightGBM.

``train_xgboost(config)`` runs under Ray Train's ``XGBoostTrainer`` (backend: xgboost) and
``train_lightgbm(config)`` under ``LightGBMTrainer`` (backend: lightgbm). Each worker trains on its
own shard of the training split (every ``world_size``-th row from its rank); the trainers' collective
set-up makes the workers build one model together (XGBoost's allreduce of histograms, LightGBM's
data-parallel tree learner). The data ships with scikit-learn, so it runs offline.

Checkpoints: Ray Train's own ``RayTrainReportCallback`` saves the booster every ``checkpoint_every``
rounds; a restarted run (a lost worker, ``max_failures``) loads it and boosts only the rounds left,
printing ``resumed from checkpoint: round N``. At the end every rank reports ``accuracy`` on the test
split, ``rounds`` (in the model), ``resumed_from`` and ``world_size``.

Config keys: ``rounds`` (20), ``max_depth`` (4), ``eta`` (0.3), ``checkpoint_every`` (5),
``round_sleep_s`` (0: a pause after each round, to stretch a run for recovery demonstrations).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable

import numpy as np
import ray.train
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """This worker's shard of the training split, and the whole test split."""
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    digits = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(digits.data, digits.target, test_size=0.2, random_state=0,
                                              stratify=digits.target)
    return x_tr[rank::world], y_tr[rank::world], x_te, y_te


def _resume(load: Callable[[Any], Any], rounds_of: Callable[[Any], int]) -> tuple[Any, int]:
    """(the checkpointed booster or None, the rounds it holds)."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None, 0
    booster = load(checkpoint)
    print(f"resumed from checkpoint: round {rounds_of(booster)}", flush=True)
    return booster, rounds_of(booster)


def _finish(save: Callable[[str], None], filename: str, accuracy: float, rounds: int, resumed_from: int) -> None:
    """The last report, with rank 0's model as its checkpoint (so the result's metrics are these)."""
    context = ray.train.get_context()
    print(f"rank {context.get_world_rank()}: accuracy {accuracy:.3f} after {rounds} rounds", flush=True)
    metrics = {"accuracy": accuracy, "rounds": rounds, "resumed_from": resumed_from,
               "world_size": context.get_world_size()}
    with tempfile.TemporaryDirectory() as directory:
        checkpoint = None
        if context.get_world_rank() == 0:
            save(os.path.join(directory, filename))
            checkpoint = ray.train.Checkpoint.from_directory(directory)
        ray.train.report(metrics, checkpoint=checkpoint)


def train_xgboost(config: dict[str, Any]) -> None:
    import xgboost
    from ray.train.xgboost import RayTrainReportCallback

    x_tr, y_tr, x_te, y_te = _split()
    start, done = _resume(RayTrainReportCallback.get_model, lambda booster: booster.num_boosted_rounds())
    rounds = int(config.get("rounds", 20))
    params = {"objective": "multi:softprob", "num_class": 10, "tree_method": "hist",
              "max_depth": int(config.get("max_depth", 4)), "eta": float(config.get("eta", 0.3))}
    booster = xgboost.train(
        params, xgboost.DMatrix(x_tr, label=y_tr), num_boost_round=max(rounds - done, 0), xgb_model=start,
        callbacks=[_Pause(float(config.get("round_sleep_s", 0))),
                   RayTrainReportCallback(frequency=int(config.get("checkpoint_every", 5)),
                                          checkpoint_at_end=False)])
    predicted = booster.predict(xgboost.DMatrix(x_te)).argmax(axis=1)
    _finish(booster.save_model, RayTrainReportCallback.CHECKPOINT_NAME, float((predicted == y_te).mean()),
            booster.num_boosted_rounds(), done)


class _Pause:
    """An XGBoost callback that sleeps after each round (TrainingCallback's interface, duck-typed)."""

    def __new__(cls, seconds: float) -> Any:
        import xgboost

        class Pause(xgboost.callback.TrainingCallback):
            def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
                time.sleep(seconds)
                return False

        return Pause()


def train_lightgbm(config: dict[str, Any]) -> None:
    import lightgbm
    from ray.train.lightgbm import RayTrainReportCallback, get_network_params

    x_tr, y_tr, x_te, y_te = _split()
    start, done = _resume(RayTrainReportCallback.get_model, lambda booster: booster.current_iteration())
    rounds = int(config.get("rounds", 20))
    seconds = float(config.get("round_sleep_s", 0))
    params = {"objective": "multiclass", "num_class": 10, "max_depth": int(config.get("max_depth", 4)),
              "learning_rate": float(config.get("eta", 0.3)), "num_leaves": 15, "min_data_in_leaf": 5,
              "verbose": -1, "tree_learner": "data_parallel", "pre_partition": True, **get_network_params()}
    booster = lightgbm.train(
        params, lightgbm.Dataset(x_tr, label=y_tr), num_boost_round=max(rounds - done, 0), init_model=start,
        callbacks=[lambda env: time.sleep(seconds),
                   RayTrainReportCallback(frequency=int(config.get("checkpoint_every", 5)),
                                          checkpoint_at_end=False)])
    predicted = booster.predict(x_te).argmax(axis=1)
    _finish(booster.save_model, RayTrainReportCallback.CHECKPOINT_NAME, float((predicted == y_te).mean()),
            booster.current_iteration(), done)
