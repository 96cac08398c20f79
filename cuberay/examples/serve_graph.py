"""A Ray Serve application written the way Serve's docs write one: two deployments, bound with arguments.

``Ingress`` calls ``Scaler`` through the handle it is bound to; the constructor arguments (the factor, the
label) are the application's own, kept as written when cuberay deploys it. ``app`` and ``app_v2`` are two
bound graphs of the same code: as two versions of one ServeApp (configs/jobs/serve-graph.yaml) each keeps
its own deployments. ``serve run cuberay.examples.serve_graph:app`` runs it on plain Ray Serve too, and
configs/serve/serve-config.yaml is its Serve config file (``cuberay serve import``).

A request is JSON ``{"values": [numbers]}``; the answer says which graph answered and its scaled values.
Behind cuberay's router the ingress gets the parsed JSON body; called over HTTP directly, the request.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle


@serve.deployment
class Scaler:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def scale(self, values: list[float]) -> list[float]:
        return [v * self.factor for v in values]


@serve.deployment
class Ingress:
    def __init__(self, scaler: DeploymentHandle, label: str) -> None:
        self.scaler = scaler
        self.label = label

    async def __call__(self, request: Any) -> dict[str, Any]:
        payload = await request.json() if hasattr(request, "json") else request
        values = payload.get("values", []) if isinstance(payload, dict) else []
        scaled = await self.scaler.scale.remote(values)
        return {"label": self.label, "scaled": scaled}


app = Ingress.bind(Scaler.bind(factor=2.0), label="v1")
app_v2 = Ingress.bind(Scaler.bind(factor=10.0), label="v2")
