"""A small MLP on scikit-learn's bundled digits under Ray Train's TensorflowTrainer (backend: tensorflow).

Ray Train sets ``TF_CONFIG`` on every worker; ``tf.distribute.MultiWorkerMirroredStrategy`` reads it and
keeps the variables in step across workers: each step every worker takes the gradient of its own
shard's batch, the strategy all-reduces them (collective ops over gRPC on CPU, NCCL on GPUs) and every
copy applies the mean. The loop is written with TensorFlow's own ops (``GradientTape``, ``strategy.run``)
because Keras 3's ``fit`` does not take multi-worker strategies.

Each epoch rank 0 saves the weights as the Ray Train checkpoint; a restarted run loads them and prints
``resumed from checkpoint: epoch N``. Every epoch reports ``epoch``, ``loss``, ``accuracy`` (on the test
split) and ``world_size``.

Config keys: ``epochs`` (8), ``lr`` (0.5), ``batch_size`` (32 per worker), ``hidden`` (64), ``seed`` (0),
``epoch_sleep_s`` (0: a pause after each epoch, to stretch a run for recovery demonstrations).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import numpy as np
import ray.train
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

WEIGHTS = "weights.npz"


def train_func(config: dict[str, Any]) -> None:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    digits = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split((digits.data / 16.0).astype("float32"), digits.target, test_size=0.2,
                                              random_state=0, stratify=digits.target)
    x_mine, y_mine = x_tr[rank::world], y_tr[rank::world]
    batch, lr = int(config.get("batch_size", 32)), float(config.get("lr", 0.5))
    steps = len(x_tr) // world // batch  # the same on every worker: each step is a collective
    rng = np.random.default_rng(int(config.get("seed", 0)))
    hidden = int(config.get("hidden", 64))
    initial = [rng.normal(0, (2 / 64) ** 0.5, (64, hidden)), np.zeros(hidden),
               rng.normal(0, (2 / hidden) ** 0.5, (hidden, 10)), np.zeros(10)]
    with strategy.scope():
        # The gradients are all-reduced by hand, so every copy applies the same update itself.
        variables = [tf.Variable(v.astype("float32"), aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                     for v in initial]

    def forward(x: Any) -> Any:
        return tf.matmul(tf.nn.relu(tf.matmul(x, variables[0]) + variables[1]), variables[2]) + variables[3]

    def replica_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=forward(x)))
        grads = tf.distribute.get_replica_context().all_reduce("MEAN", tape.gradient(loss, variables))
        for variable, grad in zip(variables, grads):
            variable.assign_sub(lr * grad)
        return loss

    @tf.function
    def step(x: Any, y: Any) -> Any:
        return strategy.reduce("MEAN", strategy.run(replica_step, args=(x, y)), axis=None)

    start = _resume(variables)
    for epoch in range(start, int(config.get("epochs", 8))):
        order = rng.permutation(len(x_mine))
        losses = [float(step(tf.constant(x_mine[idx]), tf.constant(y_mine[idx].astype("int64"))))
                  for idx in (order[i * batch:(i + 1) * batch] for i in range(steps))]
        accuracy = float((forward(tf.constant(x_te)).numpy().argmax(axis=1) == y_te).mean())
        metrics = {"epoch": epoch, "loss": float(np.mean(losses)), "accuracy": accuracy, "world_size": world}
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = None
            if rank == 0:
                np.savez(os.path.join(directory, WEIGHTS), epoch=epoch, *[v.numpy() for v in variables])
                checkpoint = ray.train.Checkpoint.from_directory(directory)
            ray.train.report(metrics, checkpoint=checkpoint)
        time.sleep(float(config.get("epoch_sleep_s", 0)))


def _resume(variables: list[Any]) -> int:
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as directory:
        saved = np.load(os.path.join(directory, WEIGHTS))
        for i, variable in enumerate(variables):
            variable.assign(saved[f"arr_{i}"])
        epoch = int(saved["epoch"]) + 1
    print(f"resumed from checkpoint: epoch {epoch}", flush=True)
    return epoch
