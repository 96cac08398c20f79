"""A small real training job: an MLP on scikit-learn's bundled digits, under Ray Train.

``train_func(config)`` is a Ray Train ``train_loop_per_worker``: DDP through
``ray.train.torch.prepare_model``/``prepare_data_loader``, or DeepSpeed ZeRO when
``config["deepspeed_config"]`` is given. The data ships with scikit-learn, so it
runs offline; 2 workers on 2 CPUs finish in seconds. Each epoch it reports
``epoch, loss, accuracy, world_size, node_ids`` (the Ray node id of every rank,
gathered from the workers themselves) and ``engine`` (``ddp`` or ``deepspeed-zeroN``) and a
checkpoint; a restarted run (preemption, ``max_failures``) resumes after the last
checkpointed epoch. Under DDP rank 0 saves the weights (``model.pt``). Under DeepSpeed
every rank saves its shard with DeepSpeed's own ``save_checkpoint`` and a restart loads
them with ``load_checkpoint`` (:mod:`cuberay.train.ds_checkpoint`); rank 0 adds the
gathered weights as ``model.pt``, which serving loads.

Config keys: ``epochs`` (8), ``lr`` (0.05), ``batch_size`` (32), ``hidden`` (64),
``seed`` (0), ``deepspeed_config`` (optional dict), ``epoch_sleep_s`` (0: a pause after each
epoch, to stretch a run for recovery demonstrations).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from typing import Any

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cuberay.train import ds_checkpoint

MODEL_FILE = "model.pt"


def _datasets(seed: int) -> tuple[TensorDataset, TensorDataset]:
    # Here, not at the top: the driver and the served model import this module for train_func and build_model
    # and never load the data, and sklearn's import is most of a second.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed,
                                              stratify=y)
    return TensorDataset(x_tr, y_tr), TensorDataset(x_te, y_te)


def _model(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def build_model(config: dict[str, Any]) -> nn.Module:
    """The untrained MLP for a training ``config``: the factory that serving loads checkpoints into."""
    return _model(int(config.get("hidden", 64)))


def _node_ids() -> list[str]:
    """Every rank's Ray node id, in rank order, as the workers themselves see it."""
    mine = ray.get_runtime_context().get_node_id()
    if not dist.is_initialized():
        return [mine]
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return [str(node) for node in everyone]


def _accuracy(model: nn.Module, data: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        device = next(model.parameters()).device  # on a GPU worker the model lives on the card
        x, y = (t.to(device) for t in data.tensors)
        correct = (model(x).argmax(dim=1) == y).sum().item()
    model.train()
    return correct / len(y)


def _full_weights(model: nn.Module):
    """A context in which ``model`` holds its whole weights: ZeRO-3 partitions them across ranks (collective)."""
    partitioned = [p for p in model.parameters() if hasattr(p, "ds_id")]
    if not partitioned:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(partitioned)


def _restore(model: nn.Module) -> int:
    """Load the last checkpoint if the run is a restart; return the first epoch to run."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as directory:
        saved = torch.load(os.path.join(directory, MODEL_FILE), weights_only=True)
    model.load_state_dict(saved["model"])
    print(f"resumed from checkpoint: epoch {int(saved['epoch']) + 1}", flush=True)
    return int(saved["epoch"]) + 1


def _restore_deepspeed(engine: Any) -> int:
    """Load the DeepSpeed shards of the last checkpoint if the run is a restart; return the first epoch to run."""
    meta = ds_checkpoint.restore(engine)
    if meta is None:
        return 0
    print(f"resumed from checkpoint: epoch {int(meta['epoch']) + 1} (DeepSpeed shards of "
          f"{meta['world_size']} ranks)", flush=True)
    return int(meta["epoch"]) + 1


def _weights(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """Rank 0's copy of the whole weights for ``model.pt`` (inside :func:`_full_weights` under ZeRO-3)."""
    if ray.train.get_context().get_world_rank() != 0:
        return None
    return {name: tensor.detach().cpu().clone() for name, tensor in model.state_dict().items()}


def _report(metrics: dict[str, Any], weights: dict[str, torch.Tensor] | None, epoch: int,
            engine: Any = None) -> None:
    """Every rank reports. DDP: rank 0 attaches ``model.pt`` (the weights are replicated). DeepSpeed: every
    rank attaches its DeepSpeed shard, rank 0 also ``model.pt``."""

    def save_weights(directory: str) -> None:
        if weights is not None:
            torch.save({"model": weights, "epoch": epoch}, os.path.join(directory, MODEL_FILE))

    if engine is not None:
        ds_checkpoint.report(engine, metrics, meta={"epoch": epoch}, also=save_weights)
        return
    if weights is None:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as directory:
        save_weights(directory)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))


def _ddp_step(model: nn.Module, optimizer: torch.optim.Optimizer):
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return float(loss.item())

    return step


def _deepspeed_step(model: nn.Module, lr: float, batch_size: int, ds_config: dict):
    """A ZeRO engine over ``model``; returns (engine, step). Imported lazily: it is slow."""
    import deepspeed

    if not {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"} & set(ds_config):
        ds_config["train_micro_batch_size_per_gpu"] = batch_size  # the loader's batch is one micro-batch
    optimizer = None
    if "optimizer" not in ds_config:
        # DeepSpeed's own optimizers are CUDA kernels; plain torch SGD runs anywhere, and
        # ZeRO 1/2 shard it fine, but DeepSpeed wants that said explicitly.
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        ds_config.setdefault("zero_allow_untested_optimizer", True)
    if not torch.cuda.is_available():
        # On CPUs DeepSpeed compiles a shared-memory all-reduce kernel on first use (40 s of a 2-core machine)
        # that only its inference path calls; training all-reduces through torch.distributed.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config,
                                      model_parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        loss = loss_fn(engine(x), y)
        engine.backward(loss)
        engine.step()
        return float(loss.item())

    return engine, step


def _stepper(base: nn.Module, config: dict[str, Any], lr: float, batch_size: int):
    """(one optimisation step, its name, the DeepSpeed engine or None, the first epoch to run).

    DeepSpeed ZeRO when configured, else DDP; either resumes from the run's last checkpoint.
    """
    if config.get("deepspeed_config"):
        engine, step = _deepspeed_step(base, lr, batch_size, dict(config["deepspeed_config"]))
        return step, f"deepspeed-zero{engine.zero_optimization_stage()}", engine, _restore_deepspeed(engine)
    first_epoch = _restore(base)
    model = ray.train.torch.prepare_model(base)
    return _ddp_step(model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)), "ddp", None, first_epoch


def train_func(config: dict[str, Any]) -> None:
    """Ray Train loop: train the MLP, report metrics and a checkpoint every epoch."""
    seed, lr = int(config.get("seed", 0)), float(config.get("lr", 0.05))
    batch_size, epochs = int(config.get("batch_size", 32)), int(config.get("epochs", 8))
    torch.manual_seed(seed)
    train_set, test_set = _datasets(seed)
    base = _model(int(config.get("hidden", 64)))
    loader = ray.train.torch.prepare_data_loader(
        DataLoader(train_set, batch_size=batch_size, shuffle=True))
    step, how, engine, first_epoch = _stepper(base, config, lr, batch_size)
    node_ids = _node_ids()
    for epoch in range(first_epoch, epochs):
        if hasattr(loader.sampler, "set_epoch"):  # DistributedSampler: reshuffle each epoch
            loader.sampler.set_epoch(epoch)
        losses = [step(x, y) for x, y in loader]
        with _full_weights(base):  # every rank enters: gathering ZeRO-3's shards is a collective
            metrics = {"epoch": epoch, "loss": sum(losses) / len(losses),
                       "accuracy": _accuracy(base, test_set), "world_size": len(node_ids),
                       "node_ids": node_ids, "engine": how}
            weights = _weights(base)
        _report(metrics, weights, epoch, engine)  # outside the gather: DeepSpeed saves ZeRO-3's own partitions
        time.sleep(float(config.get("epoch_sleep_s", 0)))
