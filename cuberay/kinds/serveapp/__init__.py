"""ServeApp: model versions behind one route on Ray Serve, running until deleted."""

from __future__ import annotations

from cuberay.kinds.registry import JobKind
from cuberay.platform.spec.serve import ServeApp


class ServeAppKind(JobKind):
    model = ServeApp
    driver = "cuberay.kinds.serveapp.driver:run"
    render = "cuberay.kuberay.render_job:rayservice"
    service = True
    import_fields = ("import_path", "model", "factory")  # model: a version's custom code
    code_found = "cuberay.serve.graph:found_in_app"

    def resizes(self, job: ServeApp) -> bool:  # type: ignore[override]
        return True  # its replicas are re-pinned to the new allocation


KIND = ServeAppKind()


def is_serve_app(kind: str) -> bool:
    """Whether jobs of ``kind`` are serving apps: what `cuberay serve` and the serving component manage."""
    return kind in serve_kinds()


def serve_kinds() -> list[str]:
    """The kinds :func:`is_serve_app` accepts, for a filtered read of the jobs table."""
    return [KIND.name]
