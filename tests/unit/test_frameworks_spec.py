"""Frameworks in the spec: backends of function mode, MPI in command mode, their schema, errors and renders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cuberay.cli import main
from cuberay.errors import SpecError
from cuberay.platform.spec import job_schema, load_spec
from cuberay.train import mpi
from cuberay.train.trainers import TRAINERS, _lean, trainer_class

REPO = Path(__file__).resolve().parents[2]
FRAMEWORKS = REPO / "configs" / "frameworks"
PLATFORM = str(REPO / "configs" / "platform.yaml")


def spec_file(tmp_path: Path, **spec: object) -> Path:
    body = {"workers": 2, **spec}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob",
                                    "metadata": {"name": "fw"}, "spec": body}))
    return path


def test_the_schema_lists_every_framework_and_describes_mpi() -> None:
    train = job_schema()["$defs"]["TrainSpec"]["properties"]
    assert train["backend"]["enum"] == ["torch", "deepspeed", "tensorflow", "xgboost", "lightgbm"]
    assert "framework" in train["backend"]["description"]
    launch = job_schema()["$defs"]["MpiLaunch"]["properties"]["slots_per_worker"]
    assert launch["minimum"] == 1 and "hostfile" in launch["description"]
    assert set(TRAINERS) == set(train["backend"]["enum"])


@pytest.mark.parametrize(("spec", "words"), [
    ({"entrypoint": "m:f", "backend": "tensorflw"}, ["spec.backend", "'tensorflw' is not allowed",
                                                       "did you mean 'tensorflow'"]),
    ({"entrypoint": "m:f", "mpi": {"slots_per_worker": 2}}, ["spec.mpi", "command mode", "mpirun"]),
    ({"command": "mpirun x", "mpi": {"slots_per_worker": 0}}, ["spec.mpi.slots_per_worker", "1"]),
    ({"command": "python x.py", "backend": "xgboost"}, ["spec.backend", "function mode"]),
    ({"entrypoint": "m:f", "backend": "xgboost", "deepspeed": {}}, ["backend is xgboost", "deepspeed"]),
    ({"command": "python ps.py", "roles": {"worker": {"workers": 2}}}, ["spec.roles.worker", "spec.workers"]),
    ({"command": "python ps.py", "roles": {"ps": {}}}, ["spec.roles.chief", "add roles.chief"]),
    ({"command": "python ps.py", "roles": {"chief": {"workers": 2}}}, ["spec.roles.chief.workers", "to 1"]),
    ({"command": "python ps.py", "roles": {"server": {}}}, ["spec.roles", "server", "chief"]),
    ({"entrypoint": "m:f", "roles": {"chief": {}}}, ["spec.roles", "command mode"]),
    ({"command": "python ps.py", "workers": {"min": 1, "max": 2}, "roles": {"chief": {}}},
     ["spec.workers", "fixed size"]),
])
def test_bad_framework_input_names_the_field_and_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         spec: dict, words: list[str]) -> None:
    assert main(["spec", "validate", str(spec_file(tmp_path, **spec))]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("path", sorted(FRAMEWORKS.glob("*.yaml")), ids=lambda p: p.name)
def test_each_framework_example_renders_as_a_rayjob_running_cuberay_run(path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # On Kubernetes nothing new is needed: the RayJob's driver is `cuberay run`, which runs the same adapter.
    assert main(["kube", "render-job", str(path), "--platform", PLATFORM, "-o", "yaml"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    rayjob = objects[-1]
    assert rayjob["kind"] == "RayJob" and rayjob["spec"]["entrypoint"].endswith("cuberay run /etc/cuberay/job.yaml")
    carried = yaml.safe_load(next(o for o in objects if o["kind"] == "ConfigMap")["data"]["job.yaml"])
    # The same job (the render leaves out fields at their defaults): backend, mpi, command and config included.
    assert type(load_spec(path)).model_validate(carried).spec == load_spec(path).spec


def test_the_framework_examples_cover_every_new_framework() -> None:
    jobs = [load_spec(p) for p in sorted(FRAMEWORKS.glob("*.yaml"))]
    assert {j.spec.backend for j in jobs if j.spec.entrypoint} == {"tensorflow", "xgboost", "lightgbm"}
    commands = " ".join(j.spec.command for j in jobs if j.spec.command)
    assert "mpirun" in commands and "jax_collective" in commands and "PADDLE_TRAINER_ENDPOINTS" in commands
    assert [j.spec.mpi.slots_per_worker for j in jobs if j.spec.mpi] == [2]
    assert [sorted(j.spec.roles) for j in jobs if j.spec.roles] == [["chief", "ps"]]


def test_the_schema_describes_roles_each_with_its_own_size_resources_and_placement() -> None:
    defs = job_schema()["$defs"]
    roles = defs["TrainSpec"]["properties"]["roles"]
    assert "TF_CONFIG" in roles["description"] and "chief" in roles["description"]
    assert set(roles["propertyNames"]["enum"]) == {"chief", "ps", "evaluator"}
    role = defs["Role"]["properties"]
    assert set(role) == {"workers", "resources", "placement", "node_selector"}
    assert all(field.get("description") for field in role.values())


def test_a_role_that_fits_no_pool_is_refused_naming_the_role(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # configs/platform.yaml's CPU nodes have 2 cores: a parameter server of 3 fits none of them.
    path = spec_file(tmp_path, command="python ps.py", workers=1, resources={"cpu": "0.5"},
                     roles={"chief": {"resources": {"cpu": "0.5"}},
                            "ps": {"resources": {"cpu": "3"}, "node_selector": {"cuberay.io/pool": "cpu"}}})
    assert main(["spec", "validate", str(path), "--platform", PLATFORM, "--tenant", "vision"]) == 3
    err = capsys.readouterr().err
    assert "spec.roles.ps" in err and "3" in err, err
    # Over the tenant's max, the refusal counts the roles.
    path = spec_file(tmp_path, command="python ps.py", resources={"cpu": "0.5"},
                     roles={"chief": {"resources": {"cpu": "0.5"}}, "ps": {"resources": {"cpu": "3"}}})
    assert main(["spec", "validate", str(path), "--platform", PLATFORM, "--tenant", "vision"]) == 3
    err = capsys.readouterr().err
    assert "asks 2 x 0.5 + 3.5 for its roles = 4.5" in err, err


def test_a_gang_with_roles_renders_a_worker_group_for_each_pool_its_roles_need(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kube", "render-job", str(FRAMEWORKS / "train-tensorflow-ps.yaml"), "--platform", PLATFORM,
                 "-o", "yaml"]) == 0
    rayjob = list(yaml.safe_load_all(capsys.readouterr().out))[-1]
    groups = {g["groupName"]: g["replicas"] for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    assert groups == {"gpu": 1, "cpu": 2}  # the workers on the GPU node; the chief and the ps one CPU node each


def test_a_framework_not_installed_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module

    def no_tensorflow(name: str, *args: object) -> object:
        if name == "ray.train.tensorflow":
            raise ImportError("No module named 'tensorflow'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_tensorflow)
    with pytest.raises(SpecError, match="needs tensorflow-cpu .*runtime_env pip"):
        trainer_class("tensorflow")
    with pytest.raises(SpecError, match="not one of torch"):
        trainer_class("mxnet")


def test_the_lean_trainer_drops_the_unused_helpers_and_keeps_the_dataset_one_when_datasets_are_passed() -> None:
    # Stand-ins named as Ray Train's default callbacks: the subclass filters them by class name.
    made = {name: type(name, (), {}) for name in ("DatasetsCallback", "PlacementGroupCleanerCallback", "Metrics")}

    class Trainer:
        def __init__(self, datasets: dict | None = None) -> None:
            self.datasets = datasets

        def _create_default_callbacks(self) -> list:
            return [cls() for cls in made.values()]

    lean = _lean(Trainer)
    assert lean.__name__ == "Trainer" and issubclass(lean, Trainer)
    assert [type(c).__name__ for c in lean()._create_default_callbacks()] == ["Metrics"]
    assert [type(c).__name__ for c in lean({"train": object()})._create_default_callbacks()] == [
        "DatasetsCallback", "Metrics"]
    assert _lean(object) is object  # a trainer without the hook runs as Ray made it


# ---------------------------------------------------------------- the MPI launcher's files and names

def test_hostfile_names_each_worker_by_its_actor_with_its_slots() -> None:
    hosts = mpi.host_names("cuberay-ab12", 3)
    assert hosts == ["cuberay-ab12-w0", "cuberay-ab12-w1", "cuberay-ab12-w2"]
    assert mpi.hostfile(hosts, 2) == "cuberay-ab12-w0 slots=2\ncuberay-ab12-w1 slots=2\ncuberay-ab12-w2 slots=2\n"
    with pytest.raises(ValueError, match="slots"):
        mpi.hostfile(hosts, 0)


@pytest.mark.parametrize(("shared", "root"), [(True, True), (False, False)])
def test_launcher_env_turns_off_shared_memory_only_for_a_shared_hostname(shared: bool, root: bool) -> None:
    env = mpi.launcher_env(hostfile_path="/h", agent_path="/a", ray_address="10.0.0.1:6379", shared_hostname=shared,
                           as_root=root)
    assert env["OMPI_MCA_orte_default_hostfile"] == "/h" and env["OMPI_MCA_plm_rsh_agent"] == "/a"
    assert env["OMPI_MCA_plm_rsh_no_tree_spawn"] == env["OMPI_MCA_orte_leave_session_attached"] == "1"
    assert env[mpi.ADDRESS_NAME] == "10.0.0.1:6379"
    assert ("OMPI_MCA_btl" in env) is shared
    assert ("OMPI_ALLOW_RUN_AS_ROOT" in env) is root and ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM" in env) is root


def test_the_agent_script_runs_this_python_even_from_a_path_with_spaces(tmp_path: Path) -> None:
    directory = tmp_path / "a dir; $(touch pwned)"
    directory.mkdir()
    hostfile_path, agent_path = mpi.write_launcher_files(str(directory), hosts=["h-w0"], slots=1,
                                                         python=sys.executable)
    assert Path(hostfile_path).read_text() == "h-w0 slots=1\n"
    # Without its Ray address the agent refuses, and says under what it runs; nothing else ran.
    result = subprocess.run([agent_path, "h-w0", "orted"], capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert result.returncode == 2 and mpi.ADDRESS_NAME in result.stderr, result
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
