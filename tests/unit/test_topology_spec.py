"""Topology in the platform file and in jobs: fields, errors, the JSON Schema, and the shipped examples run."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from cuberay.errors import AdmissionError, SpecError
from cuberay.platform.control.convert import job_request
from cuberay.platform.policy.admission import ClusterState, schedule
from cuberay.platform.policy.fit import check_job, platform_ledger, platform_policy, platform_topology, tenant_quotas
from cuberay.platform.policy.topology import DEFAULT_TOPOLOGY, Locality
from cuberay.platform.spec import job_schema, load_platform, load_spec, platform_schema

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "topology"


def _platform(topology: object) -> dict:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform",
            "spec": {"topology": topology, "tenants": [{"name": "a", "members": ["*"]}]}}


def _job(topology: object, workers: int = 2) -> dict:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "t", "tenant": "research"},
            "spec": {"workers": workers, "resources": {"gpu": "8"}, "command": "true", "topology": topology}}


def test_levels_default_their_label_and_a_platform_without_them_has_the_rdma_domain():
    platform = load_platform(_platform({"levels": [{"name": "block"}, {"name": "nvl", "label": "nvidia.com/clique"}]}))
    topo = platform_topology(platform)
    assert topo.levels == (("block", "cuberay.io/block"), ("nvl", "nvidia.com/clique")) and not topo.fill
    # fill is asked for: jobs without a request keep today's placement unless the platform says otherwise
    assert platform_topology(load_platform(_platform({"levels": [{"name": "rack"}], "fill": True}))).fill
    assert topo.names == ("block", "nvl", "host")
    assert platform_topology(load_platform(_platform(None))) == DEFAULT_TOPOLOGY


@pytest.mark.parametrize("levels, fragment", [
    ([{"name": "host"}], "'host' is the built-in narrowest level"),
    ([{"name": "rack"}, {"name": "rack", "label": "x.io/r"}], "level name 'rack' is used twice"),
    ([{"name": "a", "label": "x.io/r"}, {"name": "b", "label": "x.io/r"}], "level label 'x.io/r' is used twice"),
    ([{"name": "rack", "label": "not a label"}], "is not a Kubernetes label key"),
    ([], "at least 1"),
])
def test_bad_levels_are_refused_with_the_field_and_the_fix(levels, fragment):
    with pytest.raises(SpecError) as err:
        load_platform(_platform({"levels": levels}))
    assert fragment in str(err.value) and "spec.topology.levels" in str(err.value)


@pytest.mark.parametrize("topology", [{}, {"required": "rack", "preferred": "rack"}])
def test_a_job_names_exactly_one_of_required_and_preferred(topology):
    with pytest.raises(SpecError) as err:
        load_spec(_job(topology))
    assert "set exactly one of required and preferred" in str(err.value)


def test_check_job_refuses_an_unknown_level_as_a_spec_error_and_an_impossible_rack_as_admission():
    platform = load_platform(EXAMPLES / "platform.yaml")
    with pytest.raises(SpecError) as bad:
        check_job(platform, load_spec(_job({"required": "rak"})))
    assert bad.value.exit_code == 2 and "block, rack, host" in str(bad.value)
    with pytest.raises(AdmissionError) as big:
        check_job(platform, load_spec(_job({"required": "rack"}, workers=3)))  # 24 GPUs; a rack has 16
    assert big.value.exit_code == 3 and "holds at most 2 such workers" in str(big.value)
    assert check_job(platform, load_spec(_job({"preferred": "rack"}, workers=3))).name == "research"


def test_the_example_files_validate_against_the_json_schema():
    platform_validator = jsonschema.Draft202012Validator(platform_schema())
    job_validator = jsonschema.Draft202012Validator(job_schema())
    for path in sorted(EXAMPLES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        validator = platform_validator if data["kind"] == "Platform" else job_validator
        assert not list(validator.iter_errors(data)), path
    props = platform_schema()["$defs"]["TopologySpec"]["properties"]
    assert set(props) == {"levels", "fill"} and all(p.get("description") for p in props.values())


def test_the_examples_run_a_required_gang_inside_one_rack():
    platform = load_platform(EXAMPLES / "platform.yaml")
    ledger = platform_ledger(platform)
    state = ClusterState(ledger, tenant_quotas(platform), platform_policy(platform))
    tenant = platform.tenant("research")
    rack = load_spec(EXAMPLES / "train-rack.yaml")
    near = load_spec(EXAMPLES / "sweep-preferred.yaml")
    req = job_request("rack-1", rack, tenant, 0.0, "alice")
    assert req.topology == Locality("required", "rack")
    for job_id, job in (("rack-1", rack), ("near-1", near)):
        assert state.submit(job_request(job_id, job, tenant, 0.0, "alice")) is None
    cycle = schedule(state, 0.0)
    placed = {d.job_id: d.node_ids for d in cycle.admitted}
    assert set(placed) == {"rack-1", "near-1"}
    racks = {(ledger.nodes[n].labels["cuberay.io/block"], ledger.nodes[n].labels["cuberay.io/rack"])
             for n in placed["rack-1"]}
    assert len(racks) == 1
