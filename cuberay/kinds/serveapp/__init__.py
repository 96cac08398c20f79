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

    def code_found(self, job: ServeApp) -> list[str]:  # type: ignore[override]
        """Each custom version's model: a deployment, a class or a bound application (with its graph)."""
        from cuberay.serve import graph, plan

        plan.check_graphs(job)  # the listed deployments are the graph's, or SpecError saying what to write
        return [f"{v.name}: {graph.inspect(v.model).describe()}" for v in job.spec.versions
                if v.resolved_engine == "custom" and isinstance(v.model, str)]

    def resizes(self, job: ServeApp) -> bool:  # type: ignore[override]
        return True  # its replicas are re-pinned to the new allocation


KIND = ServeAppKind()


def is_serve_app(kind: str) -> bool:
    """Whether jobs of ``kind`` are serving apps: what `cuberay serve` and the serving component manage."""
    return kind == KIND.name
