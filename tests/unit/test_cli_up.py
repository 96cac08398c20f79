"""The newcomer's path: `cuberay up`'s next steps work as written, for whoever runs them on this machine.

``client.up`` (it starts Ray) is the only stand-in; the membership checks run
the controller's own tenant resolution on the bundled platform file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cuberay.cli import main
from cuberay.platform import client
from cuberay.platform.control.convert import choose_tenant
from cuberay.platform.spec import load_platform, load_spec
from cuberay.platform.transport import ray_call

REPO_ROOT = Path(__file__).resolve().parents[2]
PLATFORM = load_platform(REPO_ROOT / "configs" / "platform.yaml")
URL = "http://127.0.0.1:8265"


@pytest.fixture
def fake_up(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str | None, str | None]]:
    calls: list[tuple[str | None, str | None]] = []

    def up(platform_file: str | None = None, address: str | None = None, console_port: int | None = None) -> str:
        calls.append((platform_file, address) + ((console_port,) if console_port else ()))
        return URL

    monkeypatch.setattr(client, "up", up)
    monkeypatch.chdir(REPO_ROOT)
    return calls


def test_up_prints_the_commands_to_run_next(fake_up: list, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):  # where Ray would look first
        monkeypatch.delenv(name, raising=False)
    assert main(["up"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == f"Ray dashboard: {URL}"
    assert re.search(r"^Storage: +\S+ \(database, logs, checkpoints; from ", out, re.M), out
    assert "cuberay submit configs/jobs/train-ddp.yaml --wait" in err
    # The exact lines `ray job submit` needs against the local head (token auth, the dashboard address).
    lines = [line.strip() for line in err.splitlines()]
    assert "export RAY_AUTH_MODE=token" in lines
    assert f"export RAY_ADDRESS={URL}" in lines
    submit = next(line for line in lines if line.startswith("ray job submit -- cuberay run "))
    assert Path(submit.split()[-1]).is_absolute() and Path(submit.split()[-1]).is_file()  # the driver's cwd differs
    assert "cuberay down" in err
    assert "token at login: paste the one in ~/.ray/auth_token" in err  # the dashboard's login asks for it
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/etc/ray/token")
    assert main(["up"]) == 0 and "paste the one in /etc/ray/token" in capsys.readouterr().err


def test_up_on_an_existing_cluster_names_its_address(fake_up: list, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "--address", "10.0.0.1:6379"]) == 0
    err = capsys.readouterr().err
    assert f"export RAY_ADDRESS={URL}" in err and "RAY_AUTH_MODE=token if that cluster" in err
    assert fake_up == [(None, "10.0.0.1:6379")]


def test_up_json_is_the_url_and_where_things_go(fake_up: list, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CUBERAY_HOME", str(tmp_path / "home"))
    assert main(["up", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"dashboard_url": URL, "storage": str(tmp_path / "home"),
                                                   "storage_from": "cuberay's home: $CUBERAY_HOME"}


def test_the_platform_files_storage_wins_over_cuberays_home(fake_up: list, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CUBERAY_HOME", str(tmp_path / "home"))
    own = tmp_path / "platform.yaml"
    own.write_text((REPO_ROOT / "configs" / "platform.yaml").read_text().replace(
        "  storage: null", f"  storage: {tmp_path / 'data'}", 1))
    assert main(["up", "--platform", str(own), "-o", "json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["storage"], facts["storage_from"]) == (str(tmp_path / "data"), f"spec.storage of {own}")
    # What the controller is given: the bundled file's unset storage is fixed to this machine's home.
    assert client._platform_dict(REPO_ROOT / "configs" / "platform.yaml")["spec"]["storage"] == str(tmp_path / "home")
    assert load_platform(REPO_ROOT / "configs" / "platform.yaml").tenant_storage("vision") == tmp_path / "home" / "vision"


def test_up_names_the_local_heads_metrics_endpoint_and_cpus(fake_up: list, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from cuberay.platform.control import head

    monkeypatch.setattr(head, "read_state", lambda: {"dashboard_url": URL, "cpus": 6, "api_url": "http://127.0.0.1:4242",
                                                     "metrics_url": "http://10.0.0.5:40123/metrics"})
    assert main(["up"]) == 0
    out = capsys.readouterr().out
    assert "Console:       http://127.0.0.1:4242/ (sign in with the cluster token" in out
    assert "Metrics:       http://10.0.0.5:40123/metrics (Prometheus text" in out and "configs/grafana" in out
    assert "Local head:    6 logical CPUs" in out
    assert head.head_cpus(PLATFORM) >= 6  # the bundled node pools' CPUs: demo-wait.yaml fits live as it validates


def test_cuberay_env_prints_what_rays_cli_needs_for_the_local_head(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from cuberay.platform.control import head

    monkeypatch.setattr(head, "read_state", lambda: None)
    assert main(["env"]) == 1 and "no local head from `cuberay up` is running" in capsys.readouterr().err
    monkeypatch.setattr(head, "read_state", lambda: {"dashboard_url": URL})
    assert main(["env"]) == 0
    assert capsys.readouterr().out.splitlines() == ["export RAY_AUTH_MODE=token", f"export RAY_ADDRESS={URL}"]
    assert main(["env", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"RAY_AUTH_MODE": "token", "RAY_ADDRESS": URL}
    monkeypatch.setattr(head, "read_state", lambda: {"dashboard_url": URL, "api_url": "http://127.0.0.1:4242"})
    assert main(["env"]) == 0  # and where its HTTP API answers, for curl and other tools
    assert capsys.readouterr().out.splitlines()[-1] == "export CUBERAY_API_URL=http://127.0.0.1:4242"


def test_up_on_a_running_cluster_serves_the_console_on_the_port_asked_for(fake_up: list,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "--address", "10.0.0.5:6379", "--console-port", "8266"]) == 0
    assert fake_up[-1][1:] == ("10.0.0.5:6379", 8266)
    assert "Console:       port 8266 of the head" in capsys.readouterr().out
    assert main(["up", "--console-port", "8266"]) == 2  # the local head picks its own port on 127.0.0.1
    assert "`cuberay console` prints it" in capsys.readouterr().err


def test_cuberay_console_prints_the_consoles_url_or_why_there_is_none(capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from cuberay.platform.control import head

    monkeypatch.setattr(head, "read_state", lambda: None)
    assert main(["console"]) == 1 and "no local head from `cuberay up` is running" in capsys.readouterr().err
    monkeypatch.setattr(head, "read_state", lambda: {"dashboard_url": URL, "api_error": "port 4242 is taken"})
    assert main(["console"]) == 1 and "port 4242 is taken" in capsys.readouterr().err
    monkeypatch.setattr(head, "read_state", lambda: {"dashboard_url": URL, "api_url": "http://127.0.0.1:4242"})
    assert main(["console"]) == 0
    printed = capsys.readouterr()
    assert printed.out == "http://127.0.0.1:4242/\n" and "cluster token" in printed.err
    assert main(["console", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"console_url": "http://127.0.0.1:4242/", "dashboard_url": URL}


def test_readme_live_platform_names_the_same_environment() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    live = readme[readme.index("## Live platform"):readme.index("## Exit codes")]
    assert 'eval "$(cuberay env)"' in live and "ray job submit -- cuberay run" in live


# ------------------------------------------------------------------ the bundled platform's membership

@pytest.mark.parametrize("user", ["root", "someone-new", "alice", "carol"])
def test_every_local_login_may_submit_every_example(user: str) -> None:
    """`cuberay submit configs/jobs/X.yaml` as any login: the controller's own tenant resolution accepts it."""
    for path in sorted((REPO_ROOT / "configs" / "jobs").glob("*.yaml")):
        job = load_spec(path)
        assert job.tenant is not None, f"{path.name}: examples name their tenant"
        assert choose_tenant(PLATFORM, user, None, job.tenant).tenant.name == job.tenant


def test_shipped_platform_tenants_and_admins() -> None:
    assert [t.name for t in PLATFORM.tenants] == ["vision", "nlp", "research"]
    assert all(t.members == ["*"] for t in PLATFORM.tenants)
    assert {t.name: t.admins for t in PLATFORM.tenants} == {"vision": ["alice"], "nlp": ["carol"],
                                                            "research": ["carol"]}
    assert PLATFORM.tenants_of("root") == ["vision", "nlp", "research"]
    # Open to all, so a file without a tenant (an NNI experiment) needs a default: the scavenger tenant's.
    assert PLATFORM.spec.default_tenant == "research"
    assert PLATFORM.choose_tenant("root").text == "tenant research (the platform's default_tenant)"
    assert PLATFORM.choose_tenant("alice").text == "tenant vision (the only tenant naming you)"  # vision's admin
    assert PLATFORM.choose_tenant("carol").tenant.name == "research"  # named in two: the default decides
    assert PLATFORM.choose_tenant("root", preferred="nlp").text == "tenant nlp (CUBERAY_TENANT)"


def test_the_demo_wait_still_comes_from_vision_quota() -> None:
    """Membership opened up; vision's max CPU (the demo's wait) did not."""
    vision = PLATFORM.tenant("vision")
    assert vision.max_resources()["CPU"] == 4
    ddp, wait = (load_spec(REPO_ROOT / "configs" / "jobs" / f) for f in ("train-ddp.yaml", "demo-wait.yaml"))
    assert ddp.tenant == wait.tenant == "vision"
    assert ddp.min_workers * ddp.worker_request().resources["CPU"] + \
        wait.min_workers * wait.worker_request().resources["CPU"] > vision.max_resources()["CPU"]


def test_platform_file_comments_explain_the_choice() -> None:
    text = (REPO_ROOT / "configs" / "platform.yaml").read_text()
    assert re.search(r'every tenant takes "\*"', text) and "shared cluster" in text


# ------------------------------------------------------------------ down

@pytest.mark.parametrize("recorded", [False, True], ids=["no-head", "a-head-that-died"])
def test_down_without_a_running_head_joins_no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], recorded: bool) -> None:
    """No running local head and no address: Ray's "auto" would join any Ray on this machine; down does not."""
    monkeypatch.setenv("CUBERAY_HOME", str(tmp_path / "home"))
    if recorded:  # a head that is gone (a pid above Linux's largest), its file left behind
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / "local-head.json").write_text(json.dumps(
            {"pid": 2**22 + 1, "pgid": 2**22 + 1, "create_time": 1.0, "address": "127.0.0.1:1", "head_id": "x"}))
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # Ray's default address file: none there
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def join(*_args: object, **_kwargs: object) -> None:  # fail here, before any cluster on the machine is joined
        raise AssertionError("down tried to join a Ray cluster")

    monkeypatch.setattr(client, "_init_ray", join)
    monkeypatch.setattr(ray_call, "init_ray", join)
    assert main(["down"]) == 0
    assert "Nothing to stop" in capsys.readouterr().err


def test_down_says_it_is_down_when_it_stopped_something(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(client, "down", lambda: True)
    assert main(["down"]) == 0
    assert capsys.readouterr().err.strip() == "cuberay is down."


def test_up_says_its_own_head_exited_not_that_there_is_no_cluster(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A raylet can exit as the head starts on a loaded machine: `up` then names that head, its logs and the fix,
    instead of "no Ray cluster ...; start one with `cuberay up`" (what joining a dead address says elsewhere)."""
    import subprocess

    from cuberay.errors import PlatformNotRunningError
    from cuberay.platform.transport import ray_errors

    gone = subprocess.Popen(["true"])
    gone.wait()
    head = {"pid": gone.pid, "pgid": gone.pid, "create_time": 0.0, "address": "127.0.0.1:1",
            "log": str(tmp_path / "ray-head.log"), "temp_dir": str(tmp_path / "ray")}

    class AuthenticationError(Exception):  # how Ray names a token refusal
        pass

    refusal: list[Exception] = [ConnectionError("Timed out while waiting for GCS")]

    def join(address: str | None, log_to_driver: bool) -> str:  # what Ray's refusal becomes (ray_call.init_ray)
        raise ray_errors.init_error(refusal[0], str(address))

    monkeypatch.setattr(client, "_init_ray", join)
    monkeypatch.setenv("CUBERAY_HOME", str(tmp_path / "home"))  # no head recorded: `up` starts one
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # `up` sets it for the head it starts; undone after the test
    with pytest.raises(PlatformNotRunningError) as err:
        client.up(REPO_ROOT / "configs" / "platform.yaml", start_head=lambda: head)
    text = str(err.value)
    assert text.startswith("no driver can join the local Ray head that `cuberay up` started at 127.0.0.1:1 "
                           "(Timed out while waiting for GCS; the head has exited)."), text
    assert f"{tmp_path / 'ray-head.log'}" in text and f"{tmp_path / 'ray' / 'session_latest' / 'logs'}" in text
    assert "`cuberay down`" in text and "start one with `cuberay up`" not in text
    refusal[0] = AuthenticationError("token mismatch")  # any other refusal keeps its own words and fix
    with pytest.raises(PlatformNotRunningError, match="refused this process .token mismatch.; it uses token"):
        client.up(REPO_ROOT / "configs" / "platform.yaml", start_head=lambda: head)
