"""Bound Serve applications as ServeApp versions, and `cuberay serve import` of Serve config files (no Ray).

A version whose model is a bound application (``module:app``) is its own Serve app beside the ServeApp's,
named per version, each deployment of its graph configured by name (replicas within the slots admission
granted, the spec's resources, the pin to the allocated nodes); `cuberay spec validate` says what an import
path names; a Serve config file becomes ServeApps, and what cuberay cannot honour is refused by name.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from cuberay.cli import main
from cuberay.platform.policy import serving as pol
from cuberay.platform.spec import load_spec
from cuberay.serve import plan
from cuberay.serve.config import app_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GRAPH = CONFIGS / "jobs" / "serve-graph.yaml"
SERVE_CONFIG = CONFIGS / "serve" / "serve-config.yaml"
NODES = ["n2", "n1", "n1", "n2"]


def _graph_app(**changes):
    data = yaml.safe_load(GRAPH.read_text())
    data["spec"].update(changes)
    return load_spec(data)


# ---------------------------------------------------------------- the spec and the plan

def test_a_graph_version_holds_the_sum_of_its_deployments_replicas() -> None:
    versions = [{"name": "v1", "model": "m:app", "weight": 80,
                 "deployments": [{"name": "Ingress"}, {"name": "Model", "replicas": {"min": 1, "max": 3}}]},
                {"name": "v2", "model": "m:app2", "weight": 20, "deployments": [{"name": "Ingress"}]}]
    app = _graph_app(versions=versions)
    assert (app.spec.min_workers, app.spec.max_workers) == (3, 5)


@pytest.mark.parametrize(("version", "words"), [
    ({"model": "m:app", "replicas": 2, "deployments": [{"name": "A"}]}, "replicas are set per deployment"),
    ({"model": {"checkpoint": "/x"}, "deployments": [{"name": "A"}]}, "this version is engine torch"),
    ({"model": "m:app", "deployments": [{"name": "A"}, {"name": "A"}]}, "'A' is listed at [0] and [1]"),
    ({"model": "m:app", "deployments": [{"name": "A", "options": {"num_replicas": 3}}]}, "set by cuberay"),
])
def test_graph_spec_mistakes_say_the_rule_and_the_fix(version, words) -> None:
    with pytest.raises(Exception) as err:
        _graph_app(versions=[{"name": "v1", "weight": 100, **version}])
    assert words in str(err.value)


def test_each_graph_version_is_its_own_serve_app_pinned_within_the_slots_granted() -> None:
    from ray.serve.schema import ServeDeploySchema

    versions = [{"name": "v1", "model": "cuberay.examples.serve_graph:app", "weight": 80,
                 "deployments": [{"name": "Ingress", "replicas": {"min": 1, "max": 3}, "user_config": {"k": 1}},
                                 {"name": "Scaler"}]},
                {"name": "v2", "model": "cuberay.examples.serve_graph:app_v2", "weight": 20,
                 "deployments": [{"name": "Ingress"}, {"name": "Scaler"}]}]
    app = _graph_app(versions=versions, runtime_env={"env_vars": {"A": "1"}})
    entry = app_config(plan.app_plan(app, {}, NODES + ["n3"]))  # one slot above the min of 4: v1's Ingress
    apps = pol.group(entry)
    assert [a["name"] for a in apps] == ["nlp-graph-serve", "nlp-graph-serve.v1", "nlp-graph-serve.v2"]
    v1, v2 = apps[1], apps[2]
    assert v1["import_path"] == "cuberay.examples.serve_graph:app" and v1["route_prefix"] is None
    assert v1["runtime_env"] == {"env_vars": {"A": "1"}}
    ingress, scaler = v1["deployments"]
    assert ingress["autoscaling_config"]["min_replicas"] == 1 and ingress["autoscaling_config"]["max_replicas"] == 2
    assert ingress["user_config"] == {"k": 1} and scaler["num_replicas"] == 1
    for deployment in v1["deployments"] + v2["deployments"]:
        options = deployment["ray_actor_options"]
        assert options["label_selector"] == {"ray.io/node-id": "in(n1,n2,n3)"}
        assert options["num_cpus"] == 0.25 and options["memory"] == 256 * 2**20
    assert pol.traffic_of(entry)["weights"] == {"v1": 80, "v2": 20}
    ServeDeploySchema(**pol.normalized(pol.merged([], entry, entry["name"])))  # Serve's own schema takes it


def test_the_writer_replaces_and_removes_an_app_with_its_graph_apps() -> None:
    entry = pol.normalized(app_config(plan.app_plan(_graph_app(), {}, NODES)))
    other = {"name": "other", "route_prefix": "/o", "import_path": "x:y"}
    written = pol.merged([other], entry, entry["name"])["applications"]
    assert [a["name"] for a in written] == ["other", "nlp-graph-serve", "nlp-graph-serve.v1", "nlp-graph-serve.v2"]
    fewer = copy.deepcopy(entry)
    fewer["args"]["plan"]["versions"][1]["app"] = None  # v2 is no graph any more: its app goes
    again = pol.merged(written, fewer, entry["name"])["applications"]
    assert [a["name"] for a in again] == ["other", "nlp-graph-serve", "nlp-graph-serve.v1"]
    assert pol.merged(written, None, entry["name"]) == {"applications": [other]}
    assert pol.lost(written, [other], ["nlp-graph-serve", "nlp-graph-serve.v1"]) == "app 'nlp-graph-serve' is missing"
    assert pol.lost([other], written, ["nlp-graph-serve.v2"]) == "app 'nlp-graph-serve.v2' is still deployed"
    # a traffic change touches the router's user_config only; the graph apps are written as they were
    moved = pol.with_traffic(entry, weights={"v1": 0, "v2": 100})
    assert pol.group(moved)[1:] == pol.group(entry)[1:]


# ---------------------------------------------------------------- `cuberay spec validate`

def _validate(tmp_path: Path, capsys, versions) -> tuple[int, str]:
    data = yaml.safe_load(GRAPH.read_text())
    data["spec"]["versions"] = versions
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["spec", "validate", str(path)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_validate_says_what_each_import_path_is(tmp_path: Path, capsys) -> None:
    code, text = _validate(tmp_path, capsys, [
        {"name": "v1", "model": "cuberay.examples.serve_graph:app", "weight": 50,
         "deployments": [{"name": "Ingress"}, {"name": "Scaler"}]},
        {"name": "v2", "model": "cuberay.examples.echo_serve:Echo", "weight": 25},
        {"name": "v3", "model": "cuberay.examples.serve_graph:Scaler", "weight": 25}])
    assert code == 0, text
    assert "v1: cuberay.examples.serve_graph:app: bound application, 2 deployment(s): Scaler (1 replica), " \
           "Ingress (1 replica)" in text
    assert "v2: cuberay.examples.echo_serve:Echo: class" in text
    assert "v3: cuberay.examples.serve_graph:Scaler: deployment" in text


@pytest.mark.parametrize(("version", "words"), [
    ({"model": "cuberay.examples.serve_graph:app"},  # the code as written, no deployments listed
     ["bound application, 2 deployment(s)", "does not list Scaler, Ingress",
      "write deployments: [{name: Scaler, replicas: 1}, {name: Ingress, replicas: 1}]"]),
    ({"model": "cuberay.examples.serve_graph:app", "deployments": [{"name": "Ingress"}, {"name": "Model"}]},
     ["does not list Scaler", "lists Model, which the graph does not have"]),
    ({"model": "cuberay.examples.echo_serve:Echo", "deployments": [{"name": "Echo"}]},
     ["is a class, not a bound application; remove spec.versions[0].deployments"]),
    ({"model": "cuberay.examples.serve_graph:annotations"}, ["is '_Feature', not a Serve object"]),
])
def test_validate_refuses_what_the_code_is_not(tmp_path: Path, capsys, version, words) -> None:
    code, text = _validate(tmp_path, capsys, [{"name": "v1", "weight": 100, **version}])
    assert code == 2, text
    flat = " ".join(text.split())
    for word in words:
        assert word in flat, flat


# ---------------------------------------------------------------- `cuberay serve import`

def test_the_example_serve_config_imports_as_a_serve_app(capsys) -> None:
    assert main(["serve", "import", str(SERVE_CONFIG), "--tenant", "nlp", "--dry-run"]) == 0
    out = capsys.readouterr()
    assert "proxy_location, http_options have no effect here" in " ".join(out.err.split())
    [spec] = list(yaml.safe_load_all(out.out))
    app = load_spec(spec)
    assert (app.kind, app.name, app.tenant, app.spec.route_prefix) == ("ServeApp", "scale", "nlp", "/scale")
    [version] = app.spec.versions
    assert version.model == "cuberay.examples.serve_graph:app" and version.weight == 100
    assert [(d.name, d.min_replicas, d.max_replicas) for d in version.deployments] == [("Scaler", 1, 1),
                                                                                       ("Ingress", 1, 2)]
    assert str(app.spec.resources.cpu) == "0.25"


def test_a_deployment_the_file_leaves_out_gets_its_codes_settings(tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"applications": [{"name": "Two Apps", "import_path":
                                                      "cuberay.examples.serve_graph:app",
                                                      "deployments": [{"name": "Ingress", "num_replicas": 2}]},
                                                     {"name": "b", "route_prefix": "/b",
                                                      "import_path": "cuberay.examples.serve_graph:app_v2"}]}))
    assert main(["serve", "import", str(path), "--dry-run"]) == 0
    specs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [s["metadata"]["name"] for s in specs] == ["two-apps", "b"]
    assert specs[0]["spec"]["versions"][0]["deployments"] == [{"name": "Ingress", "replicas": 2},
                                                              {"name": "Scaler", "replicas": 1}]
    assert [d["name"] for d in specs[1]["spec"]["versions"][0]["deployments"]] == ["Scaler", "Ingress"]


@pytest.mark.parametrize(("change", "words"), [
    ({"target_capacity": 50}, "target_capacity (it scales every app of the cluster"),
    ({"app": {"args": {"x": 1}}}, "applications[0].args (cuberay deploys a bound application"),
    ({"app": {"route_prefix": None}}, "applications[0].route_prefix (null: not served over HTTP"),
    ({"app": {"runtime_env": {"working_dir": "./code"}}}, "applications[0].runtime_env.working_dir (a local "
                                                         "path; Serve's declarative config takes remote URIs"),
    ({"deployment": {"num_replicas": "auto"}}, 'applications[0].deployments[0].num_replicas ("auto"'),
    ({"deployment": {"placement_group_bundles": [{"CPU": 1}]}},
     "deployments[0].placement_group_bundles (cuberay places every replica"),
    ({"deployment": {"ray_actor_options": {"resources": {"x": 1}}}},
     "deployments[0].ray_actor_options.resources (cuberay pins replicas"),
    ({"deployment": {"ray_actor_options": {"num_cpus": 1}}},
     "deployments[1].ray_actor_options.num_cpus (0.25; another deployment asks for '1': a ServeApp's replicas "
     "all have the same resources)"),
    ({"deployment": {"autoscaling_config": {"min_replicas": 1, "max_replicas": 2, "upscale_delay_s": 3}}},
     "deployments[0].autoscaling_config.upscale_delay_s"),
])
def test_import_refuses_what_cuberay_cannot_honour_by_name(tmp_path: Path, capsys, change, words) -> None:
    config = yaml.safe_load(SERVE_CONFIG.read_text())
    config.update({k: v for k, v in change.items() if k not in ("app", "deployment")})
    config["applications"][0].update(change.get("app", {}))
    config["applications"][0]["deployments"][0].update(change.get("deployment", {}))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["serve", "import", str(path), "--dry-run"]) == 2
    out = capsys.readouterr()
    assert "cuberay cannot honour" in out.err and words in " ".join(out.err.split()), out.err
    assert out.out == ""  # nothing printed as if it were fine
