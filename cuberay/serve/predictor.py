"""The generic torch predictor: one model version from a Ray Train checkpoint, JSON in and out.

Requests arriving together are run as one forward pass (``@serve.batch``). It is
called by the router with the parsed JSON body, or over HTTP when it is the
ingress itself (the benchmark's "direct" path).
"""

from __future__ import annotations

from typing import Any

from ray import serve
from starlette.requests import Request

from cuberay.serve.torch_model import load_model, predict_many, rows_of

MAX_BATCH_SIZE = 32
BATCH_WAIT_S = 0.002  # short: on a quiet service a request should not wait for company


async def json_body(request: Any) -> Any:
    """The JSON body of an HTTP request, or the payload itself from a handle call."""
    return await request.json() if isinstance(request, Request) else request


@serve.deployment(max_ongoing_requests=64)
class TorchPredictor:
    """Serves ``model.pt`` of a checkpoint directory; see ``cuberay.serve.torch_model``."""

    def __init__(self, checkpoint: str, factory: str | None = None, config: dict | None = None,
                 version: str = "", file_name: str = "model.pt") -> None:
        self.version = version
        self.model = load_model(checkpoint, factory, config, file_name)

    @serve.batch(max_batch_size=MAX_BATCH_SIZE, batch_wait_timeout_s=BATCH_WAIT_S)
    async def _predict(self, payloads: list[Any]) -> list[dict]:
        return predict_many(self.model, payloads)

    async def __call__(self, request: Any) -> dict:
        payload = await json_body(request)
        rows_of(payload)  # a bad body fails alone, not the whole batch it would join
        return await self._predict(payload)
