"""TuneJob spec fields and the NNI experiment import: what is accepted, and errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cuberay.cli import main
from cuberay.errors import SpecError
from cuberay.platform.spec import TuneJob, load_spec
from cuberay.platform.spec.tune import ALGORITHMS, SCHEDULERS
from cuberay.tune import nni_import, schedulers, searchers

REPO_ROOT = Path(__file__).resolve().parents[2]


def tune_doc(**spec) -> dict:
    base = {"entrypoint": "a.b:c", "metric": "acc", "mode": "max",
            "search_space": {"lr": {"_type": "uniform", "_value": [0.1, 1]}}}
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "TuneJob", "metadata": {"name": "t"}, "spec": {**base, **spec}}


def test_spec_names_agree_with_the_runtime():
    assert list(ALGORITHMS) == searchers.algorithm_names()
    assert SCHEDULERS == schedulers.SCHEDULERS


def test_examples_load():
    job = load_spec(REPO_ROOT / "configs/jobs/tune.yaml")
    assert isinstance(job, TuneJob) and job.spec.trial_slots == 2 and job.spec.entrypoint == "trial.py:main"
    assert Path(job.spec.code_dir) == (REPO_ROOT / "configs/tune").resolve()  # beside the spec file


def test_search_space_from_a_file_beside_the_spec(tmp_path: Path):
    (tmp_path / "space.json").write_text(json.dumps({"x": {"_type": "randint", "_value": [0, 4]}}))
    doc = tune_doc(search_space="space.json", command="python3 t.py", entrypoint=None)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    job = load_spec(tmp_path / "job.yaml")
    assert job.spec.search_space == {"x": {"_type": "randint", "_value": [0, 4]}}
    doc["spec"]["search_space"] = "missing.json"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match=r"spec\.search_space: .*missing\.json.*cannot be read"):
        load_spec(tmp_path / "job.yaml")


@pytest.mark.parametrize("spec, path, words", [
    ({"algorithm": "nni:smac"}, "spec.algorithm", "nni:tpe"),
    ({"scheduler": "fifo"}, "spec.scheduler", "asha"),
    ({"command": "python3 t.py"}, "spec.entrypoint", "exactly one"),
    ({"entrypoint": None}, "spec.entrypoint", "exactly one"),
    ({"entrypoint": "trial.py"}, "spec.entrypoint", "import path"),
    ({"search_space": {"lr": {"_type": "uniform", "_value": [1, 0]}}}, "spec.search_space.lr", "low must be below"),
    ({"search_space": {"o": {"_type": "choice", "_value": [{"_name": "a", "z": {"_type": "x", "_value": []}}]}}},
     "spec.search_space.o[0].z", "unknown _type 'x'"),
    ({"algorithm": "nni:evolution", "algorithm_args": {"population_size": 1}, "workers": 2},
     "spec.algorithm_args.population_size", "population_size >= trials at once (2)"),
    ({"scheduler_args": {"max_t": 3}}, "spec.scheduler_args", "set scheduler"),
])
def test_bad_tunejobs_name_the_field(spec, path, words):
    with pytest.raises(SpecError) as err:
        load_spec(tune_doc(**spec))
    assert err.value.path == path and words in str(err.value)


def test_the_gang_is_the_concurrent_trials_when_workers_is_not_given():
    assert load_spec(tune_doc(max_concurrent_trials=3)).spec.max_workers == 3
    assert load_spec(tune_doc()).spec.trial_slots == 1


def test_file_entrypoints_and_all_knobs_are_accepted():
    job = load_spec(tune_doc(entrypoint="trial.py:main", algorithm="nni:anneal", seed=3, scheduler="asha",
                             scheduler_args={"max_t": 4}, workers=3, max_concurrent_trials=2))
    assert job.spec.trial_slots == 2 and job.spec.seed == 3


def test_the_nni_example_imports_to_a_valid_tunejob():
    config = REPO_ROOT / "configs/tune/experiment.yml"
    job = load_spec(nni_import.to_tune_job(nni_import.load_config(config), config, tenant="a"))
    s = job.spec
    assert (s.command, s.num_samples, s.trial_slots, s.max_runtime) == ("python3 trial.py", 8, 2, "30m")
    assert (s.algorithm, s.mode, s.seed, s.metric) == ("nni:tpe", "max", 0, "default")
    assert (s.scheduler, s.scheduler_args) == ("median_stopping", {"grace_period": 2})
    assert Path(s.code_dir) == config.parent.resolve() and set(s.search_space) == {"lr", "alpha", "epochs"}
    assert job.tenant == "a" and job.name == "digits-sgd"


BASE = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": "python3 t.py",
        "trialConcurrency": 1, "maxTrialNumber": 4, "tuner": {"name": "TPE"}}


@pytest.mark.parametrize("change, path, words", [
    ({"tuner": {"name": "SMAC"}}, "tuner.name", "not supported; use one of TPE"),
    ({"advisor": {"name": "BOHB"}}, "advisor", "advisors"),
    ({"useAnnotation": True}, "useAnnotation", "annotations"),
    ({"fooBar": 1}, "fooBar", "NNI field 'fooBar' is not supported"),
    ({"assessor": {"name": "Curvefitting"}}, "assessor.name", "has no equivalent"),
    ({"maxTrialNumber": None}, "maxTrialNumber", "required"),
    ({"trialCommand": None}, "trialCommand", "required"),
    ({"searchSpace": None}, "searchSpaceFile", "required"),
    ({"searchSpaceFile": "s.json"}, "searchSpaceFile", "not both"),
    ({"tuner": {"name": "TPE", "classArgs": {"optimize_mode": "up"}}}, "tuner.classArgs.optimize_mode", "maximize"),
])
def test_unsupported_nni_config_fields_are_named(change, path, words, tmp_path):
    config = {**BASE, **change}
    with pytest.raises(SpecError) as err:
        nni_import.to_tune_job({k: v for k, v in config.items() if v is not None or k in change and k == "x"},
                               tmp_path / "exp.yml")
    assert err.value.path == path and words in str(err.value)


def test_nni_defaults_follow_each_tuners_own_direction(tmp_path):
    for tuner, mode in (("TPE", "min"), ("Anneal", "min"), ("Evolution", "max"), ("Random", "max")):
        doc = nni_import.to_tune_job({**BASE, "tuner": {"name": tuner}}, tmp_path / "e.yml")
        assert doc["spec"]["mode"] == mode
    snake = nni_import.to_tune_job({"search_space": BASE["searchSpace"], "trial_command": "x",
                                    "trial_concurrency": 2, "max_trial_number": 3, "tuner": {"name": "random"},
                                    "trial_gpu_number": 1}, tmp_path / "e.yml")
    assert snake["spec"]["resources"]["gpu"] == "1" and snake["spec"]["workers"] == 2


def test_cli_import_dry_run_prints_a_valid_tunejob(capsys, tmp_path: Path) -> None:
    code = main(["tune", "import", str(REPO_ROOT / "configs/tune/experiment.yml"), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (tmp_path / "job.yaml").write_text(out)
    job = load_spec(tmp_path / "job.yaml")
    assert job.kind == "TuneJob" and job.spec.command == "python3 trial.py" and job.spec.num_samples == 8
    assert job.spec.scheduler == "median_stopping" and job.spec.search_space["lr"]["_type"] == "loguniform"
    # The example's trainingService is accepted, and the import says it changes nothing.
    assert "trainingService have no effect here" in err, err


def test_only_fields_that_are_set_are_named_as_without_effect() -> None:
    from cuberay.tune.nni_import import no_effect

    assert no_effect({"trainingService": {"platform": "local"}, "logLevel": "info", "debug": False,
                      "trialCommand": "python3 trial.py"}) == ["trainingService", "logLevel"]


def test_spec_validate_finds_a_file_entrypoint_in_code_dir(tmp_path):
    from cuberay.cli.spec_cmd import check_imports

    check_imports(load_spec(REPO_ROOT / "configs/jobs/tune.yaml"))  # trial.py:main beside the spec: no error
    data = load_spec(REPO_ROOT / "configs/jobs/tune.yaml").model_dump(mode="json", by_alias=True)
    data["spec"]["entrypoint"] = "trial.py:mian"
    with pytest.raises(SpecError, match=r"spec\.entrypoint: .*trial\.py' defines no 'mian'"):
        check_imports(load_spec(data))
    data["spec"]["entrypoint"], data["spec"]["code_dir"] = "trial.py:main", str(tmp_path)
    with pytest.raises(SpecError, match=r"trial\.py' does not exist"):
        check_imports(load_spec(data))
