"""A default tenant: which tenant a job that names none goes to, and every message saying which and why.

One resolution (``Platform.choose_tenant``), first match wins: --tenant, metadata.tenant, CUBERAY_TENANT (the
caller's, carried by each call), the user's ``tenants[].default_for``, ``spec.default_tenant`` (for its
members), the only tenant naming the user, the only tenant open to them. The bundled platform file's default
lets a user named in no tenant run the README's ``cuberay tune import configs/tune/experiment.yml --wait``
verbatim; that runs here against the in-process controller on the bundled file itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from cuberay.cli import main, progress
from cuberay.errors import AdmissionError, SpecError
from cuberay.platform import client
from cuberay.platform.spec import load_platform
from cuberay.platform.spec.platform_file import Platform
from cuberay.platform.transport.in_process import InProcess
from tests.unit.local_cluster import two_node_cluster
from tests.unit.test_pipeline_by_path import Drivers

REPO = Path(__file__).resolve().parents[2]


def _platform(**spec: Any) -> Platform:
    tenants = spec.pop("tenants", [{"name": "vision", "members": ["alice", "bob"], "default_for": ["bob"]},
                                   {"name": "nlp", "members": ["alice", "bob", "carol"]},
                                   {"name": "open", "members": ["*"]}])
    return load_platform({"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform",
                          "spec": {"tenants": tenants, **spec}})


def test_the_precedence_and_the_reason_given() -> None:
    plat = _platform(default_tenant="nlp")
    assert plat.choose_tenant("alice", "vision", spec_tenant="nlp", preferred="open").text == "tenant vision (--tenant)"
    assert plat.choose_tenant("alice", spec_tenant="nlp", preferred="open").text == "tenant nlp (metadata.tenant)"
    assert plat.choose_tenant("alice", preferred="open").text == "tenant open (CUBERAY_TENANT)"
    assert plat.choose_tenant("bob").text == "tenant vision (your default, tenants[0].default_for)"
    assert plat.choose_tenant("alice").text == "tenant nlp (the platform's default_tenant)"
    assert plat.choose_tenant("zed").text == "tenant open (your only tenant)"  # not a member of the default
    carol = _platform().choose_tenant("carol")  # named in nlp only, "*" lets her into open too
    assert carol.text == "tenant nlp (the only tenant naming you)"
    # Naming a login is more specific than a default for everyone: carol keeps nlp with open as the default.
    assert _platform(default_tenant="open").choose_tenant("carol").text == "tenant nlp (the only tenant naming you)"
    assert _platform().resolve_tenant("bob").name == "vision"  # the Tenant, for callers that need no reason


def test_several_tenants_and_no_default_names_every_fix() -> None:
    with pytest.raises(SpecError) as err:
        _platform().choose_tenant("alice")
    text = str(err.value)
    assert err.value.exit_code == 2 and "user 'alice' is in several tenants (vision, nlp) and has no default" in text
    for fix in ("metadata.tenant", "--tenant", "CUBERAY_TENANT", "spec.default_tenant", "default_for"):
        assert fix in text


def test_a_bad_cuberay_tenant_is_named_as_such() -> None:
    plat = _platform()
    with pytest.raises(SpecError, match=r"unknown tenant 'cv'.* \(CUBERAY_TENANT\)") as err:
        plat.choose_tenant("alice", preferred="cv")
    assert err.value.exit_code == 2
    with pytest.raises(AdmissionError, match=r"not a member of tenant 'vision' \(CUBERAY_TENANT\)") as denied:
        plat.choose_tenant("carol", preferred="vision")
    assert denied.value.exit_code == 3


@pytest.mark.parametrize(("spec", "where", "says"), [
    ({"default_tenant": "cv"}, "spec.default_tenant", "'cv' is not a tenant"),
    ({"tenants": [{"name": "a", "members": ["*"], "default_for": ["*"]}]}, "spec.tenants[0].default_for[0]",
     "spec.default_tenant: a"),
    ({"tenants": [{"name": "a", "members": ["x"], "default_for": ["y"]}]}, "spec.tenants[0].default_for[0]",
     "not a member"),
    ({"tenants": [{"name": "a", "members": ["x"], "default_for": ["x"]},
                  {"name": "b", "members": ["x"], "default_for": ["x"]}]}, "spec.tenants[1].default_for[0]",
     "already has tenant 'a'"),
])
def test_a_bad_default_is_refused_with_its_field(spec: dict[str, Any], where: str, says: str) -> None:
    with pytest.raises(SpecError) as err:
        _platform(**spec)
    assert err.value.path == where and says in str(err.value)


def test_the_defaults_are_in_the_json_schema_with_descriptions() -> None:
    schema = Platform.model_json_schema()
    defs = schema["$defs"]
    assert "CUBERAY_TENANT" in defs["PlatformSpec"]["properties"]["default_tenant"]["description"]
    assert "default_tenant" in defs["Tenant"]["properties"]["default_for"]["description"]


# ------------------------------------------------------------------ the bundled platform, a newcomer, the CLI

@pytest.fixture
def bundled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcess]:
    """configs/platform.yaml as shipped (storage in tmp, fast cycles) on the unit tier's cluster without Ray."""
    spec = yaml.safe_load((REPO / "configs" / "platform.yaml").read_text())
    spec["spec"]["storage"] = str(tmp_path / "storage")
    spec["spec"]["scheduler"].update(cycle_interval_s=0.1, small_jobs=False)
    cluster = two_node_cluster()
    local = InProcess(spec, cluster, installer="ops")
    local.cluster = cluster  # type: ignore[attr-defined]
    monkeypatch.setenv("CUBERAY_USER", "newcomer")  # named in no tenant; "*" lets them into all three
    monkeypatch.delenv("CUBERAY_TENANT", raising=False)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(progress, "POLL_S", 0.05)
    monkeypatch.chdir(REPO)
    try:
        with client.using(local):
            yield local
    finally:
        local.close()


def test_the_readmes_tune_import_runs_verbatim_for_a_newcomer(bundled: InProcess,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    drivers = Drivers(bundled, set())
    try:
        assert main(["tune", "import", "configs/tune/experiment.yml", "--wait"]) == 0, capsys.readouterr().err
    finally:
        drivers.stop.set()
    out = capsys.readouterr().out
    assert "Job 'research-digits-sgd-1' submitted to tenant research (the platform's default_tenant)" in out
    assert "Job 'research-digits-sgd-1' succeeded" in out


def test_cuberay_tenant_comes_before_the_platforms_default(bundled: InProcess, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUBERAY_TENANT", "nlp")
    assert main(["tune", "import", "configs/tune/experiment.yml"]) == 0, capsys.readouterr().err
    assert "Job 'nlp-digits-sgd-1' submitted to tenant nlp (CUBERAY_TENANT)" in capsys.readouterr().out
    assert main(["tune", "import", "configs/tune/experiment.yml", "--tenant", "vision", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["tenant"] == "vision"  # --tenant first; json: the record only
    pipeline = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "flow"},
                "spec": {"steps": [{"name": "a", "job": {"kind": "Task", "spec": {"command": "echo hi"}}}]}}
    (tmp_path / "flow.yaml").write_text(yaml.safe_dump(pipeline))
    assert main(["pipeline", "submit", str(tmp_path / "flow.yaml"), "--no-run"]) == 0
    assert "Pipeline 'nlp/flow' stored in tenant nlp (CUBERAY_TENANT)" in capsys.readouterr().out
    monkeypatch.setenv("CUBERAY_TENANT", "nope")
    assert main(["pipeline", "submit", str(tmp_path / "flow.yaml")]) == 2
    err = capsys.readouterr().err
    assert "unknown tenant 'nope'" in err and "(CUBERAY_TENANT)" in err


def test_spec_validate_says_which_tenant_it_checked_against(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUBERAY_USER", "newcomer")
    monkeypatch.chdir(REPO)
    assert main(["tune", "import", "configs/tune/experiment.yml", "--dry-run"]) == 0  # offline: prints the TuneJob
    (tmp_path / "tune.yaml").write_text(capsys.readouterr().out)
    platform = str(REPO / "configs" / "platform.yaml")
    assert main(["spec", "validate", "--platform", platform, str(tmp_path / "tune.yaml")]) == 0
    assert "TuneJob digits-sgd in tenant research (the platform's default_tenant)" in capsys.readouterr().out
    monkeypatch.setenv("CUBERAY_TENANT", "nlp")
    assert main(["spec", "validate", "--platform", platform, str(tmp_path / "tune.yaml")]) == 0
    assert "TuneJob digits-sgd in tenant nlp (CUBERAY_TENANT)" in capsys.readouterr().out


def test_a_caller_no_platform_could_hold_is_a_spec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from cuberay.errors import SpecError
    from cuberay.platform import client

    monkeypatch.setenv("CUBERAY_TENANT", "t" * 64)
    with pytest.raises(SpecError, match="CUBERAY_TENANT") as err:
        client.caller()
    assert err.value.exit_code == 2
