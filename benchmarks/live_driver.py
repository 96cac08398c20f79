"""The plain-Ray side of ``bench_live.py``: the same Ray Train trainer, submitted with ``ray job submit``.

    python benchmarks/live_driver.py '<train_loop_config JSON>' STORAGE_DIR NAME [BACKEND]

BACKEND (torch, tensorflow or xgboost; default torch) picks the trainer, as the spec's ``backend`` does.
"""

from __future__ import annotations

import json
import sys

from ray.train import RunConfig, ScalingConfig

from benchmarks import live_train

if __name__ == "__main__":
    config, storage, name = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    backend = sys.argv[4] if len(sys.argv) > 4 else "torch"
    train = getattr(live_train, live_train.ENTRYPOINTS[backend])
    extra: dict = {}
    if backend == "torch":
        from ray.train.torch import TorchConfig
        from ray.train.torch import TorchTrainer as Trainer

        extra["torch_config"] = TorchConfig(backend="gloo")
    elif backend == "tensorflow":
        from ray.train.tensorflow import TensorflowTrainer as Trainer
    else:
        from ray.train.xgboost import XGBoostTrainer as Trainer
    Trainer(train_loop_per_worker=train, train_loop_config=config,
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(name=name, storage_path=storage), **extra).fit()
