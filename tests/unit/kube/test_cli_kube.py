"""`cuberay kube ...` end to end in-process: files written, exit codes, and what apply sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fake_apiserver import FakeApiServer

from cuberay.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = str(REPO / "configs" / "platform.yaml")


def test_render_writes_a_file_per_tenant_that_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "manifests"
    assert main(["kube", "render", "--platform", EXAMPLE, "--scheduler", "volcano", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "cluster.yaml", "nlp.yaml", "research.yaml",
                                                     "vision.yaml"]
    assert "--batch-scheduler=volcano" in (out / "README.md").read_text()
    capsys.readouterr()
    assert main(["kube", "validate", str(out)]) == 0
    assert "ok: 23 objects valid" in capsys.readouterr().err


def test_render_prints_the_objects_or_the_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kube", "render", "--platform", EXAMPLE, "--scheduler", "none"]) == 0
    printed = capsys.readouterr()
    assert "vision.yaml" in printed.out and "RayCluster" in printed.out
    assert "web console and HTTP API on port 8266" in printed.err and "port-forward svc/TENANT-head-svc" in printed.err
    assert main(["kube", "render", "--platform", EXAMPLE, "--scheduler", "none", "--image", "reg/cuberay:1",
                 "-o", "yaml"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "NetworkPolicy", "Role", "RoleBinding",
                                         "RayCluster"] * 3
    head = docs[5]["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == "reg/cuberay:1"
    # The console: a named container port (KubeRay's head Service carries every one) that `cuberay up` serves.
    assert {"name": "console", "containerPort": 8266} in head["ports"]
    assert "--console-port 8266" in head["lifecycle"]["postStart"]["exec"]["command"][-1]


def test_render_refuses_a_tenant_name_kuberay_rejects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long = "r" + "e" * 59
    text = Path(EXAMPLE).read_text().replace("name: research", f"name: {long}").replace(
        "default_tenant: research", f"default_tenant: {long}")
    (tmp_path / "platform.yaml").write_text(text)
    assert main(["kube", "render", "--platform", str(tmp_path / "platform.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert "[kuberay.name-length]" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_validate_names_the_rule_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kube", "render", "--platform", EXAMPLE, "--out", str(tmp_path)]) == 0
    docs = list(yaml.safe_load_all((tmp_path / "vision.yaml").read_text()))
    docs[-1]["spec"]["workerGroupSpecs"][0]["groupName"] = "head"
    (tmp_path / "vision.yaml").write_text(yaml.safe_dump_all(docs))
    capsys.readouterr()
    assert main(["kube", "validate", str(tmp_path / "vision.yaml")]) == 2
    assert "[kueue.head-group-name]" in capsys.readouterr().out


def test_render_job_prints_a_rayjob(capsys: pytest.CaptureFixture[str]) -> None:
    job = str(REPO / "configs" / "jobs" / "train-ddp.yaml")
    assert main(["kube", "render-job", job, "--platform", EXAMPLE, "-o", "yaml"]) == 0
    rayjob = list(yaml.safe_load_all(capsys.readouterr().out))[-1]
    assert rayjob["kind"] == "RayJob" and rayjob["spec"]["shutdownAfterJobFinishes"] is True
    assert rayjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "vision"
    assert rayjob["spec"]["entrypoint"].endswith("cuberay run /etc/cuberay/job.yaml")


def test_apply_dry_run_then_status_and_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    assert main(["kube", "render", "--platform", EXAMPLE, "--out", str(out)]) == 0
    with FakeApiServer() as fake:
        config = str(fake.kubeconfig(tmp_path))
        assert main(["kube", "apply", str(out), "--dry-run", "--kubeconfig", config]) == 0
        assert len(fake.requests) == 28 and all(r.query.get("dryRun") == ["All"] for r in fake.requests)
        assert fake.requests[0].path == "/api/v1/namespaces/nlp"  # namespaces first, then cluster-scoped
        assert fake.requests[3].path == "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/local-cpu"
        assert fake.objects == {}
        assert main(["kube", "apply", str(out), "--kubeconfig", config]) == 0
        assert len(fake.objects) == 28
        capsys.readouterr()
        assert main(["kube", "status", str(out / "vision.yaml"), "--kubeconfig", config, "-o", "json"]) == 0
        assert '"state": "pending"' in capsys.readouterr().out
        capsys.readouterr()
        assert main(["kube", "delete", str(out), "--kubeconfig", config, "-o", "json"]) == 0
        assert fake.objects == {}
        assert {r["result"] for r in json.loads(capsys.readouterr().out)} == {"deleted"}
        assert fake.requests[-1].path == "/api/v1/namespaces/nlp"  # reverse order: namespaces last


def test_apply_without_a_cluster_config_says_how(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["kube", "render", "--platform", EXAMPLE, "--out", str(tmp_path)]) == 0
    assert main(["kube", "apply", str(tmp_path)]) == 1
    assert "--kubeconfig" in capsys.readouterr().err


def test_quotas_shows_the_per_pool_view(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kube", "quotas", "--platform", EXAMPLE, "-o", "yaml"]) == 0
    rows = yaml.safe_load(capsys.readouterr().out)
    vision_gpu = next(r for r in rows if (r["tenant"], r["pool"]) == ("vision", "gpu"))
    assert vision_gpu == {"tenant": "vision", "pool": "gpu", "guaranteed": "cpu 667m, memory 2Gi, nvidia.com/gpu 2",
                          "max": "cpu 2, memory 8Gi, nvidia.com/gpu 4", "min_replicas": 0, "max_replicas": 1,
                          "source": "split by capacity"}
