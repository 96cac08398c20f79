"""Load a model from a Ray Train checkpoint directory and run JSON rows through it (torch, no Ray).

A checkpoint directory holds ``model.pt`` (the file name is configurable) with
either a whole ``nn.Module`` or a state dict, bare or under the key ``"model"``
(what ``cuberay.examples.digits`` writes). A state dict needs ``factory``: an
import path ``module:function`` called with the training job's ``config`` that
returns the untrained module.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from cuberay.serve.config import MODEL_FILE


def import_object(path: str) -> Any:
    """``pkg.module:name`` -> the object."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"import path {path!r} must look like 'pkg.module:name'")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


def load_model(checkpoint: str, factory: str | None = None, config: dict | None = None,
               file_name: str = MODEL_FILE) -> nn.Module:
    """The module saved in ``checkpoint``/``file_name``, in eval mode on CPU."""
    path = Path(checkpoint) / file_name
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file {path} does not exist; is {checkpoint} a checkpoint "
                                f"directory written with {file_name}?")
    saved = torch.load(path, map_location="cpu", weights_only=False)
    if isinstance(saved, nn.Module):
        model = saved
    else:
        if factory is None:
            raise ValueError(f"{path} holds a state dict; give the model factory ('module:function') "
                             f"that builds the module to load it into")
        build: Callable[[dict], nn.Module] = import_object(factory)
        model = build(dict(config or {}))
        model.load_state_dict(saved["model"] if isinstance(saved, dict) and "model" in saved else saved)
    return model.eval()


def rows_of(payload: Any) -> list[list[float]]:
    """The input rows of one JSON request: ``{"inputs": [[...], ...]}`` or ``{"inputs": [...]}`` (one row)."""
    if not isinstance(payload, dict) or "inputs" not in payload:
        raise ValueError('request body must be JSON {"inputs": [[x, ...], ...]}')
    inputs = payload["inputs"]
    if inputs and not isinstance(inputs[0], (list, tuple)):
        inputs = [inputs]
    return inputs


def predict_many(model: nn.Module, payloads: list[Any]) -> list[dict]:
    """One forward pass over the rows of many requests; one JSON answer per request."""
    rows = [rows_of(p) for p in payloads]
    sizes = [len(r) for r in rows]
    with torch.no_grad():
        logits = model(torch.tensor([x for r in rows for x in r], dtype=torch.float32))
    out, start = [], 0
    for size in sizes:
        part = logits[start:start + size]
        start += size
        out.append({"outputs": part.tolist(), "predictions": part.argmax(dim=1).tolist()})
    return out
