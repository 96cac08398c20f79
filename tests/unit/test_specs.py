"""The spec model: loading, validation errors (file, field path, fix), platform rules, schema.

The `cuberay spec` commands are tested in test_cli_spec.py, the shipped platform's membership in test_cli_up.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cuberay.errors import AdmissionError, SpecError
from cuberay.platform.policy.cluster_state import ClusterState
from cuberay.platform.policy.fit import check_job, platform_ledger, tenant_quotas
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.spec import (
    ElasticWorkers,
    Placement,
    Platform,
    ServeApp,
    SpecModel,
    Task,
    TrainJob,
    TuneJob,
    job_schema,
    load_documents,
    load_platform,
    load_spec,
    load_specs,
    platform_schema,
)
from cuberay.platform.spec.load import parse_duration
from cuberay.platform.spec.pipeline import load_pipeline
from cuberay.platform.spec.resources import LABEL_ACCELERATOR, LABEL_POOL, Resources
from tests.unit.helpers import PLATFORM

GI = 2**30


def _write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _job(spec: dict[str, Any], kind: str = "TrainJob", **meta: Any) -> dict[str, Any]:
    body = {"entrypoint": "pkg.mod:train"} if kind == "TrainJob" and "command" not in spec else {}
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": kind, "metadata": {"name": "job", **meta},
            "spec": {**body, **spec}}




def _platform(**spec: Any) -> Platform:
    return load_platform({**PLATFORM, "spec": {**PLATFORM["spec"], **spec}})


# ---------------------------------------------------------------- the shipped configs

def _config_files(root: Path) -> list[Path]:
    return [root / "configs" / "platform.yaml", *sorted((root / "configs" / "jobs").glob("*.yaml")),
            *sorted((root / "configs" / "frameworks").glob("*.yaml"))]


def test_every_config_file_validates(repo_root: Path) -> None:
    files = _config_files(repo_root)
    assert len(files) >= 6
    kinds = set()
    platform = load_platform(repo_root / "configs" / "platform.yaml")
    for path in files:
        for doc in load_documents(path):
            kinds.add(doc.kind)
            if not isinstance(doc, Platform):
                check_job(platform, doc, file=str(path))
    assert kinds == {"Platform", "TrainJob", "TuneJob", "ServeApp", "Task"}


def test_example_jobs_are_the_documented_ones(repo_root: Path) -> None:
    jobs = repo_root / "configs" / "jobs"
    ddp = load_spec(jobs / "train-ddp.yaml")
    assert isinstance(ddp, TrainJob) and ddp.spec.entrypoint == "cuberay.examples.digits:train_func"
    assert ddp.min_workers == 2 and ddp.worker_request().resources["CPU"] == 1
    assert load_spec(jobs / "train-command.yaml").spec.command
    assert isinstance(load_spec(jobs / "task.yaml"), Task)
    assert isinstance(load_spec(jobs / "tune.yaml"), TuneJob)
    assert isinstance(load_spec(jobs / "serve.yaml"), ServeApp)


def test_configs_validate_against_the_json_schema(repo_root: Path) -> None:
    job_validator = jsonschema.Draft202012Validator(job_schema())
    platform_validator = jsonschema.Draft202012Validator(platform_schema())
    for path in _config_files(repo_root):
        data = yaml.safe_load(path.read_text())
        validator = platform_validator if data["kind"] == "Platform" else job_validator
        errors = list(validator.iter_errors(data))
        assert not errors, f"{path}: {errors[0].message}"


# ---------------------------------------------------------------- the model

def test_every_field_has_a_description() -> None:
    stack, missing = [SpecModel], []
    while stack:
        model = stack.pop()
        stack.extend(model.__subclasses__())
        missing += [f"{model.__name__}.{n}" for n, f in model.model_fields.items() if not f.description]
    assert not missing


def test_models_are_frozen_and_forbid_extras() -> None:
    job = load_spec(_job({}))
    with pytest.raises(Exception):
        job.metadata.name = "other"  # type: ignore[misc]
    assert all(m.model_config["extra"] == "forbid" and m.model_config["frozen"] for m in SpecModel.__subclasses__())


def test_accessors() -> None:
    job = load_spec(_job({"workers": {"min": 2, "max": 4}, "max_runtime": "90m", "priority": 7,
                          "resources": {"cpu": "2", "memory": "4Gi", "gpu": "1(A100)"},
                          "node_selector": {LABEL_POOL: "a100"}}, tenant="vision"))
    assert (job.name, job.tenant, job.min_workers, job.max_workers) == ("job", "vision", 2, 4)
    assert job.max_runtime_s == 5400.0
    req = job.worker_request()
    assert req.resources == Resources(CPU=2, memory=4 * GI, GPU=1)
    assert req.node_selector() == {LABEL_POOL: "a100", LABEL_ACCELERATOR: "A100"}
    platform = _platform()
    assert job.effective_priority(platform.tenant("vision")) == 7
    plain = load_spec(_job({}))
    assert plain.effective_priority(platform.tenant("vision")) == 5
    assert plain.effective_priority(None) == 0
    assert plain.max_runtime_s is None
    assert plain.spec.placement is Placement.AUTO
    assert plain.worker_request().resources == Resources(CPU=1)
    assert plain.with_tenant("nlp").tenant == "nlp"


@pytest.mark.parametrize(("value", "seconds"), [(3600, 3600.0), ("90m", 5400.0), ("2h", 7200.0), ("1d", 86400.0),
                                                ("1h30m", 5400.0), ("45s", 45.0), ("120", 120.0), (0.5, 0.5)])
def test_durations(value: Any, seconds: float) -> None:
    assert parse_duration(value) == seconds


def test_round_trip_through_yaml_and_json() -> None:
    for kind, spec in [("TrainJob", {"workers": {"min": 1, "max": 3}, "backend": "deepspeed",
                                     "deepspeed": {"zero_optimization": {"stage": 2}}}),
                       ("Task", {"command": "echo hi", "env": {"N": 4}, "placement": "strict_spread"}),
                       ("TuneJob", {"entrypoint": "a.b:c", "metric": "acc", "mode": "max",
                                    "search_space": {"lr": {"_type": "uniform", "_value": [0.1, 1]}}}),
                       ("ServeApp", {"versions": [{"name": "v1", "model": {"job": "train"}, "weight": 60},
                                               {"name": "v2", "model": "a.b:App", "weight": 40,
                                                "replicas": {"min": 1, "max": 3}}],
                                  "route_prefix": "/x", "mirror": {"version": "v2", "percent": 5}})]:
        job = load_spec(_job(spec, kind=kind))
        assert load_spec(yaml.safe_dump(job.model_dump(mode="json"))) == job
        assert load_spec(json.loads(job.model_dump_json())) == job
        assert job.model_dump(mode="json")["apiVersion"] == "cuberay.io/v1alpha1"


def test_env_numbers_become_text_and_elastic_workers() -> None:
    job = load_spec(_job({"command": "x", "env": {"OMP_NUM_THREADS": 4}, "workers": {"min": 2, "max": 2}},
                         kind="Task"))
    assert job.spec.env == {"OMP_NUM_THREADS": "4"}
    assert job.spec.workers == ElasticWorkers(min=2, max=2)


def test_gpu_zero_is_allowed_and_means_none() -> None:
    assert load_spec(_job({"resources": {"cpu": "1", "gpu": "0"}})).worker_request().resources == Resources(CPU=1)
    gpu_only = load_spec(_job({"resources": {"cpu": "0", "gpu": "1"}}))
    assert gpu_only.worker_request().resources == Resources(GPU=1)


# ---------------------------------------------------------------- bad jobs: file, path, fix

BAD_JOBS = [
    # (yaml body under spec: or a whole document, expected path, words in the message)
    ("spec:\n  entrypoint: a:b\n  resources: {gpu: '1.5'}\n", "spec.resources.gpu", ["whole", "2"]),
    ("spec:\n  entrypoint: a:b\n  resources: {cpu: '-1'}\n", "spec.resources.cpu", [">= 0"]),
    ("spec:\n  entrypoint: a:b\n  resources: {cpu: 2 cores}\n", "spec.resources.cpu", ["e.g."]),
    ("spec:\n  entrypoint: a:b\n  resources: {memory: 4GB}\n", "spec.resources.memory", ["'GB'", "Gi"]),
    ("spec:\n  entrypoint: a:b\n  resources: {memory: '0'}\n", "spec.resources.memory", ["leave it out"]),
    ("spec:\n  entrypoint: a:b\n  resources: {rdma: 1(xyz)}\n", "spec.resources.rdma", ["roce"]),
    ("spec:\n  entrypoint: a:b\n  resources: {cpu: '0'}\n", "spec.resources.cpu", ["empty bundle"]),
    ("spec:\n  entrypoint: a:b\n  resources: {custom: {GPU: 1}}\n", "spec.resources.custom.GPU", ["gpu"]),
    ("spec:\n  entrypoint: a:b\n  resources: {custom: {foo: 0}}\n", "spec.resources.custom.foo", ["> 0"]),
    ("spec:\n  entrypoint: a:b\n  workers: 0\n", "spec.workers", [">= 1"]),
    ("spec:\n  entrypoint: a:b\n  workers: -2\n", "spec.workers", [">= 1"]),
    ("spec:\n  entrypoint: a:b\n  workers: '2'\n", "spec.workers", ["without quotes"]),
    ("spec:\n  entrypoint: a:b\n  workers: {min: 3, max: 2}\n", "spec.workers.max", ["below min"]),
    ("spec:\n  entrypoint: a:b\n  workers: {min: 0, max: 2}\n", "spec.workers.min", [">= 1"]),
    ("spec:\n  entrypoint: a:b\n  worker: 2\n", "spec.worker", ["did you mean 'workers'"]),
    ("spec:\n  entrypoint: a:b\n  placement: packk\n", "spec.placement", ["did you mean 'pack'"]),
    ("spec:\n  entrypoint: a:b\n  max_runtime: 2 weeks\n", "spec.max_runtime", ["'2h'"]),
    ("spec:\n  entrypoint: a:b\n  max_runtime: 0\n", "spec.max_runtime", ["positive"]),
    ("spec:\n  entrypoint: a:b\n  max_failures: -1\n", "spec.max_failures", [">= 0"]),
    ("spec:\n  entrypoint: a:b\n  env: {1X: a}\n", "spec.env.1X", ["environment variable name"]),
    ("spec:\n  entrypoint: a:b\n  env: {DEBUG: yes}\n", "spec.env.DEBUG", ["quote"]),
    ("spec:\n  entrypoint: a:b\n  node_selector: {'bad key!': x}\n", "spec.node_selector.bad key!", ["label key"]),
    ("spec:\n  entrypoint: a:b\n  command: ls\n", "spec.entrypoint", ["exactly one"]),
    ("spec: {}\n", "spec.entrypoint", ["exactly one"]),
    ("spec:\n  entrypoint: train.py\n", "spec.entrypoint", ["package.module:function"]),
    ("spec:\n  command: ls\n  config: {lr: 1}\n", "spec.config", ["function mode"]),
    ("spec:\n  entrypoint: a:b\n  deepspeed: {}\n", "spec.backend", ["backend: deepspeed"]),
    ("spec:\n  entrypoint: a:b\n  backend: jax\n", "spec.backend", ["'torch'"]),
]


@pytest.mark.parametrize(("body", "path", "words"), BAD_JOBS, ids=[b[1] + ":" + b[2][0] for b in BAD_JOBS])
def test_bad_job_names_file_path_and_fix(tmp_path: Path, body: str, path: str, words: list[str]) -> None:
    file = _write(tmp_path, "apiVersion: cuberay.io/v1alpha1\nkind: TrainJob\nmetadata: {name: job}\n" + body)
    with pytest.raises(SpecError) as err:
        load_spec(file)
    assert err.value.file == str(file)
    assert err.value.path == path, str(err.value)
    for word in words:
        assert word in str(err.value), f"{word!r} missing from: {err.value}"
    assert str(err.value).startswith(f"{file}: {path}: ")
    assert "(line " in str(err.value)


BAD_DOCUMENTS = [
    ("kind: TrainJb\nmetadata: {name: a}\nspec: {}\n", "kind", "did you mean 'TrainJob'"),
    ("metadata: {name: a}\nspec: {}\n", "kind", "no kind"),
    ("apiVersion: cuberay.io/v1\nkind: Task\nmetadata: {name: a}\nspec: {command: ls}\n", "apiVersion",
     "cuberay.io/v1alpha1"),
    ("kind: Task\nmetadata: {name: My_Job}\nspec: {command: ls}\n", "metadata.name", "'my-job'"),
    ("kind: Task\nmetadata: {name: " + "a" * 64 + "}\nspec: {command: ls}\n", "metadata.name", "63"),
    ("kind: Task\nmetadata: {name: a, tenant: Vision}\nspec: {command: ls}\n", "metadata.tenant", "'vision'"),
    ("kind: Task\nmetadata: {name: a}\nspec: {}\n", "spec.command", "required"),
    ("kind: Task\nmetadata: {name: a}\n", "spec", "required"),
    ("kind: Platform\nspec: {}\n", "kind", "--platform"),
    ("kind: TuneJob\nmetadata: {name: a}\nspec: {entrypoint: a:b, metric: acc, mode: best}\n", "spec.mode", "'max'"),
    ("kind: TuneJob\nmetadata: {name: a}\nspec: {entrypoint: a:b, metric: acc, mode: max, "
     "search_space: {lr: {_type: logunif, _value: [1, 2]}}}\n", "spec.search_space.lr", "loguniform"),
    ("kind: TuneJob\nmetadata: {name: a}\nspec: {entrypoint: a:b, metric: acc, mode: max, workers: 2, "
     "max_concurrent_trials: 4}\n", "spec.max_concurrent_trials", "raise workers"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {versions: [{name: v1, model: a:B}], route_prefix: api}\n",
     "spec.route_prefix", "'/api'"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {}\n", "spec.versions", "required"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {versions: [{name: v1, model: a:b, weight: 50}, "
     "{name: v1, model: a:c, weight: 50}]}\n", "spec.versions[1].name", "[0] and [1]"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {versions: [{name: v1, model: a:b, weight: 90}, "
     "{name: v2, model: a:c, weight: 20}]}\n", "spec.versions", "sum to 100"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {versions: [{name: v1, model: a:b}], "
     "mirror: {version: v9, percent: 10}}\n", "spec.mirror.version", "not one of"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {workers: 2, versions: [{name: v1, model: a:b}]}\n",
     "spec.workers", "per version"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {versions: [{name: v1, model: {job: t, run: r}}]}\n",
     "spec.versions[0].model", "exactly one"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {versions: [{name: v1, model: {job: t}, engine: custom}]}\n",
     "spec.versions[0].model", "import path"),
    ("kind: ServeApp\nmetadata: {name: a}\nspec: {versions: [{name: v1, model: {source: /m}, weight: 50}, "
     "{name: v2, model: {job: t}, weight: 50}]}\n", "spec.versions", "only vllm"),
]


@pytest.mark.parametrize(("text", "path", "word"), BAD_DOCUMENTS, ids=[d[1] + ":" + d[2] for d in BAD_DOCUMENTS])
def test_bad_document(tmp_path: Path, text: str, path: str, word: str) -> None:
    file = _write(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load_spec(file)
    assert (err.value.file, err.value.path) == (str(file), path), str(err.value)
    assert word in str(err.value)


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("kind: Task\nmetadata: {name: a\nspec: {command: ls}\n", "invalid YAML at line 3"),
        ("kind: Task\nmetadata: {name: a}\nspec:\n  command: ls\n  command: pwd\n",
         "duplicate key 'command' at line 5"),
        ("- kind: Task\n", "not a mapping"),
        ("", "no YAML document"),
        ("kind: Task\nmetadata: {name: a}\nspec: {command: ls}\n---\nkind: Task\nmetadata: {name: b}\n"
         "spec: {command: ls}\n", "found 2"),
    ],
)
def test_unreadable_files(tmp_path: Path, text: str, word: str) -> None:
    file = _write(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load_spec(file)
    assert err.value.file == str(file)
    assert word in str(err.value)


def test_missing_file_and_several_problems_at_once(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "nope.yaml")
    file = _write(tmp_path, "kind: Task\nmetadata: {name: A}\nspec: {command: ls, workers: 0, foo: 1}\n")
    with pytest.raises(SpecError) as err:
        load_spec(file)
    text = str(err.value)
    assert err.value.path == "metadata.name"
    assert "also: spec.workers" in text and "also: spec.foo" in text


def test_load_specs_refuses_duplicate_names(tmp_path: Path) -> None:
    doc = "kind: Task\nmetadata: {name: same}\nspec: {command: ls}\n"
    assert len(load_specs(doc + "---\n" + doc.replace("same", "other"))) == 2
    file = _write(tmp_path, doc + "---\n" + doc)
    with pytest.raises(SpecError) as err:
        load_specs(file)
    assert err.value.path == "metadata.name" and "documents 1 and 2" in str(err.value)
    with pytest.raises(SpecError, match="is a Platform"):
        load_specs(yaml.safe_dump(PLATFORM))


def test_platform_and_pipeline_files_refuse_another_kind_in_one_wording(tmp_path: Path) -> None:
    job = _write(tmp_path, "kind: Task\nmetadata: {name: a}\nspec: {command: ls}\n")
    for load, kind in ((load_platform, "Platform"), (load_pipeline, "Pipeline")):
        with pytest.raises(SpecError) as err:
            load(job)
        assert (err.value.file, err.value.path) == (str(job), "kind")
        assert err.value.reason == f"kind is 'Task'; a {kind.lower()} file has kind: {kind}"


# ---------------------------------------------------------------- the platform

def test_platform_defaults_and_methods() -> None:
    platform = _platform()
    vision, nlp, shared = platform.tenants
    assert vision.storage == "/srv/cuberay/vision" and nlp.storage == "/data/nlp"
    assert platform.database_url() == "sqlite:////srv/cuberay/cuberay.db"
    assert platform.spec.scheduler.max_drivers == 16 and platform.spec.scheduler.backfill
    assert vision.guaranteed_resources() == Resources(CPU=8, GPU=8)
    assert vision.max_resources() == Resources(CPU=16, GPU=16)
    assert nlp.max_resources() is None and nlp.guaranteed_resources() == Resources()
    assert shared.max_resources() == Resources(CPU=4, memory=8 * GI)
    assert vision.is_member("bob") and vision.is_admin("bob") and not vision.is_member("carol")
    assert platform.tenants_of("alice") == ["vision", "nlp", "shared"]
    assert platform.tenants_of("zed") == ["shared"]
    assert platform.resolve_tenant("carol").name == "nlp"
    assert platform.resolve_tenant("alice", "nlp").name == "nlp"


def test_unlisted_max_resource_is_capped_at_guaranteed() -> None:
    platform = _platform(tenants=[{"name": "t", "quota": {"guaranteed": {"cpu": "2", "gpu": "1"},
                                                          "max": {"cpu": "4"}}}])
    assert platform.tenant("t").max_resources() == Resources(CPU=4, GPU=1)


def test_tenant_lookup_errors() -> None:
    platform = _platform()
    with pytest.raises(SpecError) as err:
        platform.tenant("cv")
    assert err.value.path == "metadata.tenant" and "vision, nlp, shared" in str(err.value)
    with pytest.raises(AdmissionError, match="not a member of tenant 'vision'"):
        platform.resolve_tenant("carol", "vision")
    with pytest.raises(SpecError, match="several tenants"):
        platform.resolve_tenant("alice")


SMALL_NODE = {"cpu": "4", "memory": "1Gi"}
BAD_PLATFORMS = [
    ({"tenants": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}, "spec.tenants[2].name", "[0] and [2]"),
    ({"tenants": []}, "spec.tenants", "at least 1"),
    ({"tenants": [{"name": "a", "quota": {"guaranteed": {"cpu": "4"}, "max": {"cpu": "2"}}}]},
     "spec.tenants[0].quota.max.cpu", "below guaranteed"),
    ({"tenants": [{"name": "a", "quota": {"guaranteed": {"cpu": "-4"}}}]},
     "spec.tenants[0].quota.guaranteed.cpu", ">= 0"),
    ({"tenants": [{"name": "a", "quota": {"max": {"gpu": "8(V100)"}}}]}, "spec.tenants[0].quota.max.gpu", "models"),
    ({"tenants": [{"name": "a", "quota": {"max": {"rdma": "2(ib)"}}}]}, "spec.tenants[0].quota.max.rdma", "fabric"),
    ({"tenants": [{"name": "a", "admins": ["*"]}]}, "spec.tenants[0].admins[0]", "only allowed in members"),
    ({"tenants": [{"name": "a", "member": ["x"]}]}, "spec.tenants[0].member", "did you mean 'members'"),
    ({"tenants": [{"name": "a", "mounts": ["ws(pvc):/mnt;data(hostpath):/data"]}]}, "spec.tenants[0].mounts[0]",
     "one mount per list item"),
    ({"tenants": [{"name": "a", "mounts": ["ws(bucket):/mnt"]}]}, "spec.tenants[0].mounts[0]", "pvc"),
    ({"tenants": [{"name": "a"}], "database": "not a url"}, "spec.database", "SQLAlchemy URL"),
    ({"tenants": [{"name": "a"}], "node_pools": [{"name": "p", "nodes": 1, "resources": SMALL_NODE},
                                                 {"name": "p", "nodes": 2, "resources": SMALL_NODE}]},
     "spec.node_pools[1].name", "unique"),
    ({"tenants": [{"name": "a"}], "node_pools": [{"name": "p", "nodes": 0, "resources": SMALL_NODE}]},
     "spec.node_pools[0].nodes", ">= 1"),
    ({"tenants": [{"name": "a"}], "node_pools": [{"name": "p", "nodes": 1, "resources": {"cpu": "4"}}]},
     "spec.node_pools[0].resources.memory", "required"),
    ({"tenants": [{"name": "a", "quota": {"guaranteed": {"gpu": "8"}}}],
      "node_pools": [{"name": "p", "nodes": 1, "resources": {"cpu": "4", "memory": "1Gi", "gpu": "4"}}]},
     "spec.tenants", "gpu 8 > 4"),
    ({"tenants": [{"name": "a"}], "scheduler": {"cycle_interval_s": 0}}, "spec.scheduler.cycle_interval_s", "> 0"),
]


@pytest.mark.parametrize(("spec", "path", "word"), BAD_PLATFORMS, ids=[p[1] + ":" + p[2] for p in BAD_PLATFORMS])
def test_bad_platform(tmp_path: Path, spec: dict, path: str, word: str) -> None:
    file = _write(tmp_path, yaml.safe_dump({**PLATFORM, "spec": spec}), "platform.yaml")
    with pytest.raises(SpecError) as err:
        load_platform(file)
    assert (err.value.file, err.value.path) == (str(file), path), str(err.value)
    assert word in str(err.value)


def test_node_pools_give_labels_resources_and_a_ledger() -> None:
    platform = _platform(node_pools=[
        {"name": "a100", "nodes": 2, "labels": {"zone": "b"},
         "resources": {"cpu": "32", "memory": "256Gi", "gpu": "8(A100)", "rdma": "1(ib)"}}])
    pool = platform.spec.node_pools[0]
    assert pool.node_resources() == Resources(CPU=32, memory=256 * GI, GPU=8, rdma=1)
    assert pool.node_labels() == {"zone": "b", LABEL_POOL: "a100", LABEL_ACCELERATOR: "A100",
                                  "cuberay.io/rdma": "ib"}
    assert platform.capacity() == Resources(CPU=64, memory=512 * GI, GPU=16, rdma=2)
    assert sorted(platform_ledger(platform).nodes) == ["a100-0", "a100-1"]


# ---------------------------------------------------------------- could it ever fit

def test_check_job_quota_message_names_the_numbers_and_the_fix() -> None:
    platform = _platform()
    job = load_spec(_job({"workers": 4, "resources": {"gpu": "8"}}, tenant="vision"))
    with pytest.raises(AdmissionError) as err:
        check_job(platform, job, file="job.yaml")
    assert str(err.value) == ("job.yaml: spec.workers: tenant 'vision' max gpu is 16 and the job asks 4 x 8 = 32. "
                              "A job starts only when its whole gang fits within its tenant's max: lower workers "
                              "or each worker's gpu, or ask an admin to raise tenants.vision.quota.max.gpu")
    assert check_job(platform, load_spec(_job({"workers": 2, "resources": {"gpu": "8"}}, tenant="vision"))).name \
        == "vision"
    elastic = load_spec(_job({"workers": {"min": 2, "max": 8}, "resources": {"gpu": "8"}}, tenant="vision"))
    assert check_job(platform, elastic).name == "vision"  # it can start with its minimum


def test_the_static_check_and_admission_refuse_a_job_over_its_tenant_max_in_the_same_words() -> None:
    """``cuberay spec validate --platform`` and the controller's submit name every resource over the max."""
    platform = _platform()
    job = load_spec(_job({"workers": 4, "resources": {"gpu": "8", "cpu": "5"}}, tenant="vision"))
    with pytest.raises(AdmissionError) as err:
        check_job(platform, job)
    static = str(err.value).removeprefix("spec.workers: ")
    state = ClusterState(platform_ledger(platform), tenant_quotas(platform))
    request = JobRequest("j", "vision", job.worker_request(), job.min_workers, "pack", 0, 0.0)
    live = state.submit(request)
    assert live is not None and live.reason == static
    assert static == ("tenant 'vision' max cpu is 16 and the job asks 4 x 5 = 20; max gpu is 16 and the job asks "
                      "4 x 8 = 32. A job starts only when its whole gang fits within its tenant's max: lower workers "
                      "or each worker's cpu and gpu, or ask an admin to raise tenants.vision.quota.max.cpu and "
                      "tenants.vision.quota.max.gpu"), static


def test_check_job_unknown_or_missing_tenant() -> None:
    platform = _platform()
    with pytest.raises(SpecError) as err:
        check_job(platform, load_spec(_job({}, tenant="cv")), file="job.yaml")
    assert (err.value.file, err.value.path) == ("job.yaml", "metadata.tenant")
    assert "known tenants: vision, nlp, shared" in str(err.value)
    with pytest.raises(SpecError, match="--tenant"):
        check_job(platform, load_spec(_job({})))


@pytest.mark.parametrize(
    ("spec", "word"),
    [
        ({"workers": 5, "resources": {"gpu": "8"}}, "larger than the cluster"),
        ({"workers": 1, "resources": {"gpu": "16"}}, "largest matching node"),
        ({"workers": 3, "resources": {"cpu": "1"}, "placement": "strict_spread"}, "strict_spread"),
        ({"workers": 2, "resources": {"gpu": "8"}, "placement": "strict_pack"}, "strict_pack"),
        ({"workers": 1, "resources": {"gpu": "1(H100)"}}, "labels"),
        ({"workers": 1, "node_selector": {LABEL_POOL: "v100"}}, "labels"),
    ],
)
def test_gang_larger_than_the_cluster_is_refused(spec: dict, word: str) -> None:
    platform = _platform(node_pools=[{"name": "a100", "nodes": 2,
                                      "resources": {"cpu": "32", "memory": "256Gi", "gpu": "8(A100)"}}])
    job = load_spec(_job(spec, tenant="nlp"))
    with pytest.raises(AdmissionError) as err:
        check_job(platform, job, file="job.yaml")
    assert str(err.value).startswith("job.yaml: spec.workers: ") and word in str(err.value)


def test_gang_that_fits_the_pools_passes() -> None:
    platform = _platform(node_pools=[{"name": "a100", "nodes": 2,
                                      "resources": {"cpu": "32", "memory": "256Gi", "gpu": "8(A100)"}}])
    for spec in ({"workers": 4, "resources": {"gpu": "4(A100)"}}, {"workers": 32, "resources": {"gpu": "0.5"}},
                 {"workers": 2, "placement": "strict_spread"}, {"workers": 8, "placement": "strict_pack",
                                                                "resources": {"gpu": "1"}}):
        assert check_job(platform, load_spec(_job(spec, tenant="nlp"))).name == "nlp"


# ---------------------------------------------------------------- JSON Schema

def test_schemas_are_valid_and_catch_typos() -> None:
    for schema in (job_schema(), platform_schema()):
        jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(job_schema())
    good = _job({"workers": 2, "resources": {"cpu": 2, "memory": "4Gi"}})
    assert not list(validator.iter_errors(good))
    assert list(validator.iter_errors(_job({"worker": 2})))
    assert list(validator.iter_errors({**good, "kind": "Nope"}))
    kinds = {s["$ref"].split("/")[-1] for s in job_schema()["oneOf"]}
    assert kinds == {"TrainJob", "TuneJob", "ServeApp", "Task"}
