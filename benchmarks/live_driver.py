"""The plain-Ray side of ``bench_live.py``: the same TorchTrainer, submitted with ``ray job submit``.

    python benchmarks/live_driver.py '<train_loop_config JSON>' STORAGE_DIR NAME
"""

from __future__ import annotations

import json
import sys

from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from benchmarks.live_train import train_func

if __name__ == "__main__":
    config, storage, name = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    TorchTrainer(train_loop_per_worker=train_func, train_loop_config=config,
                 torch_config=TorchConfig(backend="gloo"),
                 scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
                 run_config=RunConfig(name=name, storage_path=storage)).fit()
