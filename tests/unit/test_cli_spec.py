"""`cuberay spec validate|schema`: offline checks of every shipped config, import paths, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cuberay.cli import main
from cuberay.cli.importable import import_paths, import_problem
from tests.unit.helpers import PLATFORM

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGS = REPO_ROOT / "configs"
# What is not a spec in configs/: checked elsewhere (test_grafana.py, test_sim.py) or just below.
NOT_SPECS = {"grafana/cuberay.json", "sim/trace-example.csv",
             # an NNI experiment (tests/unit/test_tune_spec.py imports it) with its space and trial script
             "tune/experiment.yml", "tune/search_space.json", "tune/trial.py",
             # a Ray Serve config file (`cuberay serve import`; tests/unit/test_serve_graph.py imports it)
             "serve/serve-config.yaml",
             # a request body for the served digits model (test_the_digits_request_is_one_the_model_takes) and
             # where it comes from
             "serve/digits-request.json", "serve/SOURCE.md"}



def _write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _job(spec: dict[str, Any], kind: str = "TrainJob", **meta: Any) -> dict[str, Any]:
    body = {"entrypoint": "cuberay.examples.digits:train_func"} if kind == "TrainJob" and "command" not in spec \
        else {}
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": kind, "metadata": {"name": "job", **meta},
            "spec": {**body, **spec}}


def _good_job(tmp_path: Path, name: str = "good.yaml", **meta: Any) -> Path:
    return _write(tmp_path, yaml.safe_dump(_job({"workers": 2}, **meta)), name)


# ---------------------------------------------------------------- every shipped config

def _config_specs() -> list[Path]:
    return sorted(p for p in CONFIGS.rglob("*.yaml") if str(p.relative_to(CONFIGS)) not in NOT_SPECS)


def test_every_file_in_configs_is_checked_here() -> None:
    every = {str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*") if p.is_file()}
    specs = {str(p.relative_to(CONFIGS)) for p in _config_specs()}
    assert every - specs == NOT_SPECS, "a new kind of file in configs/: validate it here"
    assert {"platform.yaml", "jobs/serve.yaml", "jobs/tune.yaml", "sim/cluster-example.yaml"} <= specs


def _platform_for(path: Path) -> Path:
    """A folder with its own platform file (configs/topology/) holds jobs written for that platform."""
    own = path.parent / "platform.yaml"
    return own if own.exists() else CONFIGS / "platform.yaml"


def test_every_config_validates_with_its_import_paths(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(p) for p in _config_specs()]
    records = []
    for platform in sorted({_platform_for(Path(f)) for f in files}):
        mine = [f for f in files if _platform_for(Path(f)) == platform]
        assert main(["spec", "validate", "--platform", str(platform), *mine, "-o", "json"]) == 0
        records += json.loads(capsys.readouterr().out)
    assert sorted(r["file"] for r in records) == files
    assert {r["kind"] for r in records} == {"Platform", "TrainJob", "TuneJob", "ServeApp", "Task", "Cluster",
                                            "Pipeline"}
    # Each job's code is really there: the import check above ran on these paths.
    paths = {target for f in files for _field, target in import_paths(yaml.safe_load(Path(f).read_text()))}
    assert paths == {"cuberay.examples.digits:train_func", "cuberay.examples.elastic:train_func",
                     "cuberay.examples.echo_serve:Echo", "cuberay.examples.serve_graph:app",
                     "cuberay.examples.serve_graph:app_v2",
                     "cuberay.examples.branin:trial", "../tune/trial.py:main",  # the raw file's code_dir
                     "cuberay.examples.digits_tf:train_func", "cuberay.examples.digits_gbdt:train_xgboost",
                     "cuberay.examples.digits_gbdt:train_lightgbm"}


def test_the_example_trace_loads() -> None:
    from cuberay.platform.sim.inputs import load_trace

    assert len(load_trace(CONFIGS / "sim" / "trace-example.csv")) == 20


# ---------------------------------------------------------------- import paths

def test_import_paths_are_found_in_every_kind() -> None:
    serve = {"kind": "ServeApp", "spec": {"versions": [{"name": "v1", "import_path": "a.b:app"},
                                                       {"name": "v2", "import_path": "c:d"}]}}
    assert list(import_paths(serve)) == [("spec.versions[0].import_path", "a.b:app"),
                                         ("spec.versions[1].import_path", "c:d")]
    assert list(import_paths({"spec": {"entrypoint": "m:f", "command": None}})) == [("spec.entrypoint", "m:f")]


@pytest.mark.parametrize(("target", "words"), [
    ("cuberay.examples.digits_serve:app", ["'cuberay.examples.digits_serve' cannot be found"]),
    ("no_such_package.mod:f", ["'no_such_package.mod' cannot be found"]),
    ("cuberay.examples.digits:no_such_function", ["defines no 'no_such_function'"]),
])
def test_import_problems_name_the_module_or_the_name(target: str, words: list[str]) -> None:
    problem = import_problem(target)
    assert problem is not None and all(w in problem for w in words), problem


def test_import_check_does_not_run_the_module() -> None:
    import sys

    sys.modules.pop("cuberay.examples.digits", None)
    assert import_problem("cuberay.examples.digits:train_func") is None
    assert import_problem("cuberay.examples.echo_serve:Echo") is None
    assert "cuberay.examples.digits" not in sys.modules  # torch, Ray Train: not imported to look


def test_import_check_finds_modules_in_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mytrain.py").write_text("def train(config):\n    pass\n")
    spec = _write(tmp_path, yaml.safe_dump(_job({"workers": 1, "entrypoint": "mytrain:train"})))
    monkeypatch.chdir(tmp_path)
    assert main(["spec", "validate", str(spec)]) == 0


def test_validate_refuses_a_missing_module_unless_told_not_to_check(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    body = _job({"workers": 1, "entrypoint": "cuberay.examples.digits_serve:app"})
    spec = _write(tmp_path, yaml.safe_dump(body))
    assert main(["spec", "validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"{spec}: spec.entrypoint:" in err and "cuberay.examples.digits_serve" in err
    assert "--no-import-check" in err and "Traceback" not in err
    assert main(["spec", "validate", "--no-import-check", str(spec)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {spec}")


# ---------------------------------------------------------------- validate

def test_cli_validate_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = _good_job(tmp_path)
    assert main(["spec", "validate", str(file)]) == 0
    assert capsys.readouterr().out.strip() == f"ok: {file} (TrainJob job, 2 workers x CPU=1)"
    assert main(["spec", "validate", str(file), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["workers"] == "2"


def test_cli_validate_spec_error_exits_2_without_traceback(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, "kind: Task\nmetadata: {name: a}\nspec: {command: ls, workers: 0}\n", "bad.yaml")
    good = _good_job(tmp_path)
    assert main(["spec", "validate", str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert f"ok: {good}" in out
    assert f"{bad}: spec.workers:" in err and "Traceback" not in err


def test_cli_validate_with_platform(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    platform = _write(tmp_path, yaml.safe_dump(PLATFORM), "platform.yaml")
    assert main(["spec", "validate", str(platform)]) == 0
    assert "Platform test, 3 tenants" in capsys.readouterr().out
    fits = _good_job(tmp_path, tenant="vision")
    assert main(["spec", "validate", "--platform", str(platform), str(fits)]) == 0
    too_big = _write(tmp_path, yaml.safe_dump(_job({"workers": 4, "resources": {"gpu": "8"}}, tenant="vision")),
                     "big.yaml")
    assert main(["spec", "validate", "--platform", str(platform), str(too_big)]) == 3
    assert "raise tenants.vision.quota.max.gpu" in capsys.readouterr().err
    unknown = _good_job(tmp_path, "unknown.yaml", tenant="cv")
    assert main(["spec", "validate", "-p", str(platform), str(unknown)]) == 2
    assert main(["spec", "validate", "-p", str(platform), "--tenant", "nlp", str(unknown)]) == 0
    assert main(["spec", "validate", "--tenant", "nlp", str(unknown)]) == 2
    err = capsys.readouterr().err
    assert "unknown tenant 'cv'" in err and "needs --platform" in err


def test_cli_validate_reads_a_sim_cluster_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["spec", "validate", str(CONFIGS / "sim" / "cluster-example.yaml")]) == 0
    assert "cluster for `cuberay sim`, 36 nodes, 224 GPUs" in capsys.readouterr().out
    bad = _write(tmp_path, "nodes:\n  - {name: a, count: 1, resources: {gpu: lots}}\n", "nodes.yaml")
    assert main(["spec", "validate", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


# ---------------------------------------------------------------- schema

def test_cli_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "cuberay job"
    assert main(["spec", "schema", "--kind", "platform", "-o", "yaml"]) == 0
    assert "Platform" in yaml.safe_load(capsys.readouterr().out)["title"]
    target = tmp_path / "job.schema.json"
    assert main(["spec", "schema", "--out", str(target)]) == 0
    jsonschema.Draft202012Validator.check_schema(json.loads(target.read_text()))
    as_yaml = tmp_path / "platform.schema.yaml"
    assert main(["spec", "schema", "-k", "platform", "--out", str(as_yaml)]) == 0
    assert "Platform" in yaml.safe_load(as_yaml.read_text())["title"]
    assert main(["spec", "schema", "-o", "json", "--out", str(as_yaml)]) == 0
    assert json.loads(as_yaml.read_text())["title"] == "cuberay job"  # -o says the format, --out the file
    capsys.readouterr()
    assert main(["spec", "schema", "-o", "table"]) == 2
    assert main(["spec", "schema", "-o", str(target)]) == 2  # -o is never a file
    assert main(["spec", "schema", "--out", str(tmp_path / "no-such-dir" / "x.json")]) == 2
    assert "pick a writable --out path" in capsys.readouterr().err


def test_the_digits_request_is_one_the_model_takes() -> None:
    """configs/serve/digits-request.json (the README's curl, `serve rollout --probe`): rows of 64 scaled pixels."""
    import json

    rows = json.loads((CONFIGS / "serve" / "digits-request.json").read_text())["inputs"]
    assert rows and all(len(r) == 64 and all(0.0 <= v <= 1.0 for v in r) for r in rows)
