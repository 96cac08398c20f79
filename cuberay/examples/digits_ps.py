"""TensorFlow 2's parameter-server training, as a TFJob script runs it: ``python -m cuberay.examples.digits_ps``.

It reads only ``TF_CONFIG``, which cuberay sets on every member of a TrainJob with ``roles`` (a chief, parameter
servers, workers, an evaluator). The ``ps`` and ``worker`` tasks start a TensorFlow server and wait; the chief
is the coordinator: it places the variables on the parameter servers (``ParameterServerStrategy``), sends
training steps to the workers (``ClusterCoordinator``) and exits when training is done, which ends the gang. An
``evaluator`` only reports that it started.

The model is a softmax regression on scikit-learn's bundled digits. The chief prints each epoch's loss and the
test accuracy, the device each variable lives on, and ``ps training done accuracy=A``; it exits 1 if the
accuracy is below ``PS_MIN_ACCURACY`` (0.85). Settings from the environment: ``PS_EPOCHS`` (4), ``PS_LR`` (0.5).
"""

from __future__ import annotations

import json
import os
import socket


def _task() -> tuple[str, int]:
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    return task["type"], int(task["index"])


def _serve(resolver: object, kind: str, index: int) -> None:
    import tensorflow as tf

    print(f"{kind} {index} serving on {socket.gethostname()} node={os.environ.get('CUBERAY_NODE_ID', '')}",
          flush=True)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=kind, task_index=index,  # type: ignore[attr-defined]
                                  protocol="grpc", start=True)
    server.join()  # the chief's exit ends the gang, which stops this server


def _coordinate(resolver: object) -> float:
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split((digits.data / 16.0).astype("float32"), digits.target.astype("int64"),
                                              test_size=0.2, random_state=0, stratify=digits.target)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    lr = float(os.environ.get("PS_LR", "0.5"))
    with strategy.scope():
        weights = tf.Variable(tf.zeros((64, 10)), name="weights")
        bias = tf.Variable(tf.zeros((10,)), name="bias")
    print(f"chief: variables on {weights.device} and {bias.device}", flush=True)

    def dataset_fn() -> object:
        return tf.data.Dataset.from_tensor_slices((x_tr, y_tr)).shuffle(len(x_tr), seed=0).repeat().batch(32)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step(it: object) -> object:
        def replica(x: object, y: object) -> object:
            with tf.GradientTape() as tape:
                logits = tf.matmul(x, weights) + bias
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            for variable, grad in zip((weights, bias), tape.gradient(loss, (weights, bias))):
                variable.assign_sub(lr * grad)
            return loss
        x, y = next(it)  # type: ignore[call-overload]
        return strategy.run(replica, args=(x, y))

    steps = len(x_tr) // 32
    accuracy = 0.0
    for epoch in range(int(os.environ.get("PS_EPOCHS", "4"))):
        losses = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
        coordinator.join()
        loss = float(np.mean([r.fetch() for r in losses]))
        logits = x_te @ weights.numpy() + bias.numpy()
        accuracy = float((logits.argmax(axis=1) == y_te).mean())
        print(f"chief: epoch {epoch} loss={loss:.4f} accuracy={accuracy:.3f}", flush=True)
    return accuracy


def main() -> None:
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    kind, index = _task()
    if kind in ("ps", "worker"):
        _serve(resolver, kind, index)
        return
    if kind == "evaluator":
        print(f"evaluator {index} started; nothing to evaluate in this example", flush=True)
        return
    accuracy = _coordinate(resolver)
    print(f"ps training done accuracy={accuracy:.3f}", flush=True)
    if accuracy < float(os.environ.get("PS_MIN_ACCURACY", "0.85")):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
