"""`cuberay serve status|rollout|delete|history NAME` find the app by a filtered read of the jobs table (kind,
state and name in the store), through the real controller's access rules: an exact name or id, never a part."""

from __future__ import annotations

from typing import Any

import pytest

from cuberay.errors import NotFoundError, SpecError
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from cuberay.platform.transport.in_process import InProcess
from cuberay.serve import ops
from tests.unit.local_cluster import controller  # noqa: F401 (a fixture)
from tests.unit.test_cli_controller import task


def serve_app(name: str, tenant: str = "vision") -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp", "metadata": {"name": name, "tenant": tenant},
            "spec": {"route_prefix": f"/{tenant}-{name}", "versions": [{"name": "v1", "model": "m.mod:Echo"}],
                     "resources": {"cpu": "1"}}}


def test_an_app_is_found_by_its_exact_name_or_id_among_other_kinds_and_tenants(controller: InProcess) -> None:  # noqa: F811
    with client.acting_as("alice"):
        app = client.submit(serve_app("web"))
        for name in ("web", "web-batch", "webx"):  # other kinds whose names hold the app's
            client.submit(task(name, gpu="0", workers=1))
        client.submit(serve_app("web-canary"))
        assert ops.find("web").id == app.id and ops.find(app.id).id == app.id
        with pytest.raises(NotFoundError, match="no running serving app 'we'"):
            ops.find("we")  # a part of a name is no name
    with client.acting_as("nina"):
        other = client.submit(serve_app("web", tenant="nlp"))
    with client.acting_as("ops"):  # the admin reads both tenants: the name is ambiguous without one
        with pytest.raises(SpecError, match="names apps of several tenants"):
            ops.find("web")
        assert ops.find("web", "nlp").id == other.id
        client.cancel(app.id)
        assert ops.find("web").id == other.id  # an ended app is no longer running
        assert [r.id for r in ops._apps("web", "vision")] == [app.id]  # but its history is still found
    with client.acting_as("nina"):
        assert ops.find("web").id == other.id  # alice's app is not nina's to read
        assert client.status(other.id).state in (JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING)
