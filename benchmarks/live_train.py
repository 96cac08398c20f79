"""The training function both sides of ``bench_live.py`` run: tiny DDP steps, first step marked.

Rank 0 writes two wall-clock times to ``config["marker"]`` (a file; every
process is on this machine): when the train function was entered (the worker
group is up) and the end of its first optimisation step, and prints the latter,
so the benchmark reads "submit -> first step" the same way for a cuberay job
and for a plain ``ray job submit`` of the same TorchTrainer.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

MARKER = "CUBERAY_BENCH_FIRST_STEP"


def train_func(config: dict[str, Any]) -> None:
    entered = time.time()
    import ray.train
    import ray.train.torch
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    for step in range(int(config.get("steps", 5))):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step == 0 and ray.train.get_context().get_world_rank() == 0:
            now = time.time()
            Path(config["marker"]).write_text(f"{entered!r} {now!r}")
            print(f"{MARKER} {now!r}", flush=True)


def _mark(entered: float, config: dict[str, Any]) -> None:
    import ray.train

    if ray.train.get_context().get_world_rank() == 0:
        now = time.time()
        Path(config["marker"]).write_text(f"{entered!r} {now!r}")
        print(f"{MARKER} {now!r}", flush=True)


def train_tensorflow(config: dict[str, Any]) -> None:
    """The TensorFlow side: MultiWorkerMirroredStrategy, one all-reduced gradient step per step."""
    entered = time.time()
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        w = tf.Variable(np.zeros((64, 10), "float32"), aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    x, y = tf.constant(np.random.default_rng(0).normal(size=(64, 64)).astype("float32")), tf.constant([1] * 64)

    def replica_step() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x @ w))
        (grad,) = tf.distribute.get_replica_context().all_reduce("MEAN", tape.gradient(loss, [w]))
        w.assign_sub(0.05 * grad)
        return loss

    step = tf.function(lambda: strategy.run(replica_step))
    for i in range(int(config.get("steps", 5))):
        step()
        if i == 0:
            _mark(entered, config)


def train_xgboost(config: dict[str, Any]) -> None:
    """The XGBoost side: boosting rounds over XGBoost's collective; the first round is the first step."""
    entered = time.time()
    import numpy as np
    import xgboost

    class Marker(xgboost.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            if epoch == 0:
                _mark(entered, config)
            return False

    rng = np.random.default_rng(0)
    data = xgboost.DMatrix(rng.normal(size=(256, 16)), label=rng.integers(0, 2, 256))
    xgboost.train({"objective": "binary:logistic", "tree_method": "hist"}, data,
                  num_boost_round=int(config.get("steps", 5)), callbacks=[Marker()])


ENTRYPOINTS = {"torch": "train_func", "tensorflow": "train_tensorflow", "xgboost": "train_xgboost"}
