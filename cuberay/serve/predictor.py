"""The generic torch predictor: one model version from a Ray Train checkpoint, JSON in and out.

Requests arriving together are run as one forward pass (``@serve.batch``). It is
called by the router with the parsed JSON body, or over HTTP when it is the
ingress itself (the benchmark's "direct" path). A body of the wrong shape is
refused alone, before it joins a batch, with what was expected (see ``answers``).
"""

from __future__ import annotations

from typing import Any

from ray import serve
from starlette.requests import Request

from cuberay.serve.answers import BadRequest, bad_request, json_body
from cuberay.serve.torch_model import input_width, load_model, predict_many, rows_of

MAX_BATCH_SIZE = 32
BATCH_WAIT_S = 0.002  # short: on a quiet service a request should not wait for company


@serve.deployment(max_ongoing_requests=64)
class TorchPredictor:
    """Serves ``model.pt`` of a checkpoint directory; see ``cuberay.serve.torch_model``."""

    def __init__(self, checkpoint: str, factory: str | None = None, config: dict | None = None,
                 version: str = "", file_name: str = "model.pt") -> None:
        self.version = version
        self.model = load_model(checkpoint, factory, config, file_name)
        self.width = input_width(self.model)

    @serve.batch(max_batch_size=MAX_BATCH_SIZE, batch_wait_timeout_s=BATCH_WAIT_S)
    async def _predict(self, payloads: list[Any]) -> list[dict]:
        return predict_many(self.model, payloads)

    async def __call__(self, request: Any) -> Any:
        try:
            payload = await json_body(request)
            rows_of(payload, self.width)  # a bad body fails alone, not the whole batch it would join
        except BadRequest as err:
            if isinstance(request, Request):  # the ingress itself: answer 400 here
                return bad_request(err, self.version)
            raise  # the router answers it
        return await self._predict(payload)
