"""The declarative Serve config of an app: valid ServeDeploySchema, weights change only user_config."""

from __future__ import annotations

import pytest

from cuberay.errors import SpecError
from cuberay.serve import config as C
from cuberay.serve import llm


def _plan(multiplex: bool = False) -> C.AppPlan:
    versions = tuple(C.VersionPlan(name, checkpoint=f"/ck/{name}", factory="cuberay.examples.digits:build_model",
                                   ray_actor_options={"num_cpus": 0.5,
                                                      "label_selector": C.node_selector(["n2", "n1", "n2"])})
                     for name in ("v1", "v2"))
    return C.AppPlan("digits", "/digits", versions, {"weights": {"v1": 90, "v2": 10}}, multiplex=multiplex)


def test_app_config_is_a_valid_serve_deploy_schema() -> None:
    from ray.serve.schema import ServeDeploySchema

    for multiplex in (False, True):
        entry = C.app_config(_plan(multiplex))
        schema = ServeDeploySchema(**C.merged([], entry, "digits"))
        app = schema.applications[0]
        assert app.import_path == C.BUILDER and app.route_prefix == "/digits"
        assert app.deployments[0].name == ("models" if multiplex else "router")
        assert C.AppPlan.from_args(app.args["plan"]) == _plan(multiplex)


def test_node_selector_uses_rays_in_syntax_once_per_node() -> None:
    from ray._private.label_utils import validate_label_selector

    selector = C.node_selector(["n2", "n1", "n2"])
    assert selector == {"ray.io/node-id": "in(n1,n2)"}
    assert validate_label_selector(selector) is None


def test_new_weights_change_only_the_ingress_user_config() -> None:
    before = C.app_config(_plan())
    after = C.with_traffic(before, weights={"v1": 50, "v2": 50})
    assert C.traffic_of(after) == {"weights": {"v1": 50, "v2": 50}}
    assert after["args"] == before["args"] and C.traffic_of(before)["weights"] == {"v1": 90, "v2": 10}
    assert {k: v for k, v in after.items() if k != "deployments"} == {k: v for k, v in before.items()
                                                                      if k != "deployments"}


def test_merged_replaces_one_app_and_keeps_the_others() -> None:
    other = {"name": "other", "import_path": "x:y"}
    entry = C.app_config(_plan())
    assert C.merged([other, entry], None, "digits") == {"applications": [other]}
    assert C.merged([other], entry, "digits") == {"applications": [other, entry]}


def test_can_multiplex_only_checkpoints_of_one_class_with_equal_replicas() -> None:
    plan = _plan()
    assert C.can_multiplex(plan.versions)
    custom = C.VersionPlan("v3", engine="custom", import_path="m:Cls")
    assert not C.can_multiplex(plan.versions + (custom,))
    bigger = C.VersionPlan("v4", checkpoint="/ck/v4", factory=plan.versions[0].factory,
                           replicas={"num_replicas": 3})
    assert not C.can_multiplex(plan.versions + (bigger,))


def test_llm_config_mapping_without_vllm() -> None:
    kwargs = llm.llm_config_kwargs("tiny", "/models/tiny", tensor_parallel=2, max_model_len=512, accelerator="cpu",
                                   replicas={"autoscaling_config": {"min_replicas": 1, "max_replicas": 3}})
    assert kwargs["model_loading_config"] == {"model_id": "tiny", "model_source": "/models/tiny"}
    assert kwargs["engine_kwargs"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "max_model_len": 512}
    assert kwargs["deployment_config"] == {"autoscaling_config": {"min_replicas": 1, "max_replicas": 3}}
    assert kwargs["accelerator_config"] == {"kind": "cpu"}
    entry = llm.app_config("chat", "/llm", [kwargs])
    assert entry["import_path"] == "cuberay.serve.llm:build"


@pytest.mark.skipif(llm.vllm_available(), reason="vLLM is installed here")
def test_vllm_missing_is_a_spec_error_with_the_install_hint() -> None:
    with pytest.raises(SpecError, match=r"cuberay\[llm\]"):
        llm.require_vllm()
