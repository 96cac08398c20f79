"""Versions that are checkpoints of one model class, served by one deployment: the split costs no hop.

Each replica is the ingress itself: it picks the version by weight, loads that
version's checkpoint through ``@serve.multiplexed`` (an LRU of loaded models per
replica) and answers. Requests arriving together are batched per version. A
mirrored copy runs on the same replica after the answer's own work is queued.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ray import serve
from starlette.responses import JSONResponse

from cuberay.serve.answers import VERSION_HEADER, BadRequest, bad_request, internal_error, json_body
from cuberay.serve.metrics import ServeMetrics
from cuberay.serve.predictor import BATCH_WAIT_S, MAX_BATCH_SIZE
from cuberay.serve.router import TrafficMixin, too_many_requests
from cuberay.serve.torch_model import input_width, load_model, predict_many, rows_of

MAX_MODELS = 8  # loaded versions kept per replica (LRU); an app rarely has more live versions


@serve.deployment(name="models", max_ongoing_requests=256)
class MultiplexedModels(TrafficMixin):
    """``sources``: version -> ``{"checkpoint", "factory", "config"}``."""

    def __init__(self, app: str, sources: dict[str, dict]) -> None:
        self.app_name = app
        self.sources = sources
        self.metrics = ServeMetrics(app)
        self._mirrors: set[asyncio.Task] = set()

    @serve.multiplexed(max_num_models_per_replica=MAX_MODELS)
    async def get_model(self, version: str):
        source = self.sources[version]
        return load_model(source["checkpoint"], source.get("factory"), source.get("config"))

    @serve.batch(max_batch_size=MAX_BATCH_SIZE, batch_wait_timeout_s=BATCH_WAIT_S)
    async def _predict(self, items: list[tuple[str, Any]]) -> list[Any]:
        """One forward pass per version present in the batch."""
        by_version: dict[str, list[int]] = {}
        for index, (version, _) in enumerate(items):
            by_version.setdefault(version, []).append(index)
        answers: list[Any] = [None] * len(items)
        for version, indexes in by_version.items():
            model = await self.get_model(version)
            for index, answer in zip(indexes, predict_many(model, [items[i][1] for i in indexes])):
                answers[index] = answer
        return answers

    async def __call__(self, request: Any) -> Any:
        wait = self.policy.admit(time.monotonic())
        if wait:
            return too_many_requests(wait)
        try:
            payload = await json_body(request)
        except BadRequest as err:
            return bad_request(err)
        version, shadow = self.policy.route(self._sticky_key(request))
        started = time.perf_counter()
        try:
            rows_of(payload, input_width(await self.get_model(version)))  # a bad body never joins a batch
            result = await self._predict((version, payload))
        except BadRequest as err:  # the caller's mistake: answered, not counted against the version
            self.metrics.record(version, (time.perf_counter() - started) * 1000, error=False)
            return bad_request(err, version)
        except Exception as err:  # noqa: BLE001 - counted and answered as 500, the traceback to the log
            self.metrics.record(version, (time.perf_counter() - started) * 1000, error=True)
            return internal_error(err, self.app_name, version)
        self.metrics.record(version, (time.perf_counter() - started) * 1000, error=False)
        if shadow is not None:
            task = asyncio.create_task(self._mirror(shadow, payload))
            self._mirrors.add(task)
            task.add_done_callback(self._mirrors.discard)
        return JSONResponse(result, headers={VERSION_HEADER: version})

    async def _mirror(self, shadow: str, payload: Any) -> None:
        started = time.perf_counter()
        try:
            await self._predict((shadow, payload))
            failed = False
        except Exception:  # noqa: BLE001 - the shadow never affects the caller
            failed = True
        self.metrics.record(shadow, (time.perf_counter() - started) * 1000, error=failed, mirrored=True)
