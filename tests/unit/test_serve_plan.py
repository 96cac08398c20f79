"""From a ServeApp spec to the deployed plan: checkpoints found, nodes pinned, input errors before deploying."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cuberay.errors import NotFoundError
from cuberay.examples.digits import build_model
from cuberay.platform.api.records import TrainRun
from cuberay.platform.spec import load_spec
from cuberay.platform.spec.serve import ServeApp
from cuberay.serve import plan
from cuberay.serve.config import AppPlan

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "jobs" / "serve.yaml"


def _run(tmp_path: Path, run_id: str, epochs: int = 2) -> None:
    for epoch in range(epochs):  # Ray Train writes one directory per reported checkpoint
        directory = tmp_path / run_id / f"checkpoint_2026-11-30_10-0{epoch}-00.000000"
        directory.mkdir(parents=True)
        torch.save({"model": build_model({"hidden": 16}).state_dict(), "epoch": epoch}, directory / "model.pt")


def _lookup(tmp_path: Path, runs: list[str]):
    def lookup(tenant: str, ref) -> TrainRun:
        assert tenant == "vision" and ref.job == "digits-ddp"
        if ref.previous >= len(runs):
            raise NotFoundError("no SUCCEEDED run")
        return TrainRun(id=runs[ref.previous], config={"hidden": 16}, storage_path=str(tmp_path),
                        entrypoint="cuberay.examples.digits:train_func")
    return lookup


def test_the_example_resolves_to_the_last_checkpoint_of_two_runs(tmp_path: Path) -> None:
    app = load_spec(EXAMPLE)
    assert isinstance(app, ServeApp)
    _run(tmp_path, "vision-digits-ddp-2")
    _run(tmp_path, "vision-digits-ddp-1")
    found = plan.sources(app, _lookup(tmp_path, ["vision-digits-ddp-2", "vision-digits-ddp-1"]))
    assert found["v2"]["run"] == "vision-digits-ddp-2" and found["v1"]["run"] == "vision-digits-ddp-1"
    assert found["v2"]["checkpoint"].endswith("checkpoint_2026-11-30_10-01-00.000000")  # the last one
    assert found["v1"]["factory"] == "cuberay.examples.digits:build_model"
    assert found["v1"]["config"] == {"hidden": 16}


def test_a_run_without_checkpoints_or_a_job_never_trained_fails_before_deploying(tmp_path: Path) -> None:
    app = load_spec(EXAMPLE)
    (tmp_path / "vision-digits-ddp-1").mkdir()
    with pytest.raises(NotFoundError, match="left no checkpoint"):
        plan.sources(app, _lookup(tmp_path, ["vision-digits-ddp-1", "vision-digits-ddp-0"]))
    with pytest.raises(NotFoundError, match="no SUCCEEDED run"):
        plan.sources(app, _lookup(tmp_path, []))


def test_plan_pins_replicas_to_allocated_nodes_and_autoscales_only_when_granted(tmp_path: Path) -> None:
    app = load_spec(EXAMPLE)
    found = {"v1": {"checkpoint": "/a", "factory": "m:f"}, "v2": {"checkpoint": "/b", "factory": "m:f"}}
    at_min = plan.app_plan(app, found, ["n2", "n1"])
    assert isinstance(at_min, AppPlan) and at_min.name == "vision-digits-serve" and at_min.route_prefix == "/digits"
    v1, v2 = at_min.versions
    assert v1.ray_actor_options == {"num_cpus": 0.25, "memory": 256 * 2**20,
                                    "label_selector": {"ray.io/node-id": "in(n1,n2)"}}
    # Admission held the min only: no growth beyond it, so both versions are alike and share one
    # multiplexed deployment with every replica held.
    assert at_min.multiplex and {v.replicas["num_replicas"] for v in at_min.versions} == {2}
    grown = plan.app_plan(app, found, ["n1", "n2", "n3"])
    assert grown.versions[1].replicas["autoscaling_config"]["max_replicas"] == 2
    assert not grown.multiplex  # v2 autoscales, v1 not: separate deployments behind the router
    assert at_min.router_actor_options["num_cpus"] == 0
    assert grown.traffic == {"weights": {"v1": 90.0, "v2": 10.0}, "mirror": {"version": "v2", "percent": 10.0},
                             "rate_limit": {"requests_per_s": 200.0, "burst": 400}, "sticky_header": None}
    # Two multiplexed ingress replicas each keep a bucket: each gets half the app's limit.
    assert at_min.traffic["rate_limit"] == {"requests_per_s": 100.0, "burst": 200}


def test_checkpoints_of_one_class_with_equal_replicas_share_one_multiplexed_deployment() -> None:
    data = load_spec(EXAMPLE).model_dump(mode="json")
    data["spec"]["versions"][1]["replicas"] = 1
    app = load_spec(data)
    found = {"v1": {"checkpoint": "/a", "factory": "m:f"}, "v2": {"checkpoint": "/b", "factory": "m:f"}}
    shared = plan.app_plan(app, found, ["n1", "n2"])
    assert shared.multiplex and shared.ingress == "models"
    assert {v.replicas["num_replicas"] for v in shared.versions} == {2}  # every replica admission held


def test_replicas_follow_the_slots_admission_grants() -> None:
    data = load_spec(EXAMPLE).model_dump(mode="json")
    data["spec"]["versions"][0]["replicas"] = {"min": 1, "max": 3}  # v1 (90 %) and v2 (10 %) both elastic
    app = load_spec(data)
    assert plan.replica_caps(app, 2) == {"v1": 1, "v2": 1}  # the min: nothing lent
    assert plan.replica_caps(app, 4) == {"v1": 3, "v2": 1}  # extras to the most-weighted version first
    assert plan.replica_caps(app, 5) == {"v1": 3, "v2": 2}
    assert plan.replica_caps(app, 9) == {"v1": 3, "v2": 2}  # never above a version's max
    found = {"v1": {"checkpoint": "/a", "factory": "m:f"}, "v2": {"checkpoint": "/b", "factory": "m:f"}}
    grown = plan.app_plan(app, found, ["n1", "n1", "n2", "n2"])
    v1, v2 = grown.versions
    assert v1.replicas["autoscaling_config"]["max_replicas"] == 3 and v2.replicas == {"num_replicas": 1}
    shrunk = plan.app_plan(app, found, ["n1", "n2"])  # reclaimed down to the min
    assert shrunk.multiplex and shrunk.versions[0].replicas == {"num_replicas": 2}


def test_a_resized_app_keeps_its_models_and_traffic_and_moves_its_replicas() -> None:
    from cuberay.serve.config import app_config, with_traffic
    from cuberay.serve.service import resized_entry

    app = load_spec(EXAMPLE)
    found = {"v1": {"checkpoint": "/runs/1", "factory": "m:f"}, "v2": {"checkpoint": "/runs/2", "factory": "m:f"}}
    deployed = with_traffic(app_config(plan.app_plan(app, found, ["n1", "n2"])), weights={"v1": 50.0, "v2": 50.0})
    entry = resized_entry(app, ["n1", "n2", "n3"], deployed)
    new = AppPlan.from_args(entry["args"]["plan"])
    assert {v.name: v.checkpoint for v in new.versions} == {"v1": "/runs/1", "v2": "/runs/2"}
    assert entry["deployments"][0]["user_config"]["weights"] == {"v1": 50.0, "v2": 50.0}  # a rollout's weights
    assert new.versions[1].replicas["autoscaling_config"]["max_replicas"] == 2
    assert new.versions[0].ray_actor_options["label_selector"] == {"ray.io/node-id": "in(n1,n2,n3)"}
