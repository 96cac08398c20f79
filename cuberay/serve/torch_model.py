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

from cuberay.serve.answers import BadRequest
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


def input_width(model: nn.Module) -> int | None:
    """How many numbers one input row has: the first layer's ``in_features`` (None when the model has none)."""
    return next((m.in_features for m in model.modules() if isinstance(getattr(m, "in_features", None), int)), None)


def rows_of(payload: Any, width: int | None = None) -> list[list[float]]:
    """The input rows of one JSON request: ``{"inputs": [[...], ...]}`` or ``{"inputs": [...]}`` (one row).

    BadRequest, saying what was expected, for anything else: no ``inputs``, rows that are not lists of
    numbers, rows of another width than the model's (``width``) or of different widths.
    """
    expected = f'expected JSON {{"inputs": [[{width or "N"} numbers], ...]}}'
    if not isinstance(payload, dict) or "inputs" not in payload:
        raise BadRequest(f"the request is a JSON {_json_type(payload)} without \"inputs\"; {expected}")
    inputs = payload["inputs"]
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest(f"\"inputs\" is {'empty' if inputs == [] else 'a JSON ' + _json_type(inputs)}; {expected}")
    rows = inputs if isinstance(inputs[0], list) else [inputs]
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise BadRequest(f"row {i} is a JSON {_json_type(row)}, not a list of numbers; {expected}")
        wrong = [x for x in row if isinstance(x, bool) or not isinstance(x, (int, float))]
        if wrong:
            raise BadRequest(f"row {i} holds a JSON {_json_type(wrong[0])} where numbers belong; {expected}")
        if len(row) != (width or len(rows[0])):
            raise BadRequest(f"row {i} has {len(row)} numbers; {expected}")
    return rows


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


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
