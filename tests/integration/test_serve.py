"""Serving end to end: two digits versions trained by TrainJobs, served behind the cuberay router.

One app lives through the whole module (Serve start-up is the slow part on 2
cores): the 90/10 split over 2,000 requests, the mirror that never changes an
answer, replicas on the admitted nodes, the rate limit, answers to malformed
requests and to a failing version, a rollout to a broken version that rolls back
by itself, a step without data that times out, rollback to the weights before a
finished rollout, two rollouts of two apps at once, history, delete. Bad input
and taken routes and names are refused before anything runs, on every path.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import torch
import yaml

from cuberay.cli import main
from cuberay.errors import AdmissionError, CuberayError, NotFoundError, SpecError
from cuberay.platform import client, demo
from cuberay.platform.control.head import free_port
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec
from cuberay.serve import deploy, ops
from cuberay.serve.config import traffic_of
from cuberay.serve.torch_model import load_model
from tests.integration.browser import serve_console
from tests.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200), pytest.mark.second_lane]  # tests/run_suite.py

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "jobs"
ROWS = torch.rand(50, 64).tolist()  # digits are 8x8 images scaled to [0, 1]


def _example_app(name: str = "digits-serve", route: str | None = None, train: str = "digits-ddp") -> dict[str, Any]:
    """configs/jobs/serve.yaml in tenant a, plus a broken version v3 (weight 0) to roll out to, faster rollouts."""
    app = load_spec(EXAMPLES / "serve.yaml").with_tenant("a").model_dump(mode="json")
    app["metadata"]["name"] = name
    spec = app["spec"]
    spec["versions"].append({"name": "v3", "model": "cuberay.examples.serve_models:Failing", "weight": 0})
    for version in spec["versions"]:
        if isinstance(version["model"], dict) and version["model"].get("job"):
            version["model"]["job"] = train
    spec["rollout"] = {"steps": [50, 100], "interval": 6, "max_error_rate": 0.2, "min_requests": 5}
    if route:
        spec["route_prefix"] = route
    return app


@pytest.fixture(scope="module")
def served(ray_cluster, tmp_path_factory) -> Any:
    """Train two runs, deploy the app; yields what the tests need. Serve is shut down at the end."""
    from ray import serve

    from tests.integration.conftest import platform_test_spec

    spec = platform_test_spec(tmp_path_factory.mktemp("serve") / "cuberay")
    quota = spec["spec"]["tenants"][0]["quota"]  # tenant a; the examples ask for memory too
    quota["guaranteed"]["memory"], quota["max"]["memory"] = "8Gi", "16Gi"
    mp = pytest.MonkeyPatch()
    mp.setenv("CUBERAY_USER", "tester")
    client.install(spec, address=ray_cluster.address, replace=True)
    port = free_port()
    try:
        # v1 is the older of two runs of the example TrainJob, v2 the latest (serve.yaml says so).
        train = load_spec(EXAMPLES / "train-ddp.yaml").with_tenant("a").model_dump(mode="json")
        runs = []
        for seed in (1, 2):  # the example trains deterministically: another seed makes another model
            train["spec"]["config"]["seed"] = seed
            runs.append(client.submit(load_spec(train), "a"))
        # Serve starts while the runs train (both are slow on 2 cores; neither needs the other).
        serve.start(proxy_location="HeadOnly", http_options={"port": port})
        for run in runs:
            record = client.wait(run, timeout=600)
            assert record.state == JobState.SUCCEEDED, record.message
        record = ops.deploy_app(_example_app(), wait_s=400)
        assert record.state == JobState.RUNNING, record.reason
        yield {"record": record, "url": f"http://127.0.0.1:{port}/digits", "runs": runs,
               "serve_name": "a-digits-serve", "port": port}
    finally:
        client.uninstall()  # cancels the app: its driver takes it off Serve
        serve.shutdown()
        mp.undo()


def _post(url: str, rows: list, session: requests.Session | None = None) -> requests.Response:
    return (session or requests).post(url, json={"inputs": rows}, timeout=60)


def _expected(served: Any) -> dict[str, list[int]]:
    """What each version must answer for ROWS, from its checkpoint loaded here."""
    versions = ops.entry_for(ops._app(served["record"]), [], client.api())["args"]["plan"]["versions"]
    out = {}
    for v in versions:
        if v["engine"] == "torch":
            model = load_model(v["checkpoint"], v["factory"], v["config"])
            with torch.no_grad():
                out[v["name"]] = model(torch.tensor(ROWS)).argmax(dim=1).tolist()
    return out


def test_split_90_10_over_2000_requests_mirror_never_changes_answers(served) -> None:
    expected = _expected(served)
    assert expected["v1"] != expected["v2"], "the two runs should be different models"
    before = deploy.stats(served["serve_name"])["versions"].get("v2", {}).get("mirrored", 0)

    local = threading.local()  # one kept-alive connection per sender: no TCP set-up per request

    def one(i: int) -> tuple[int, str, list[int], int]:
        row = i % len(ROWS)
        if not hasattr(local, "session"):
            local.session = requests.Session()
        response = _post(served["url"], [ROWS[row]], local.session)
        body = response.json()
        return response.status_code, response.headers.get("x-cuberay-version"), body.get("predictions"), row

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(2000)))
    assert Counter(code for code, *_ in answers) == {200: 2000}
    split = Counter(version for _, version, _, _ in answers)
    assert abs(split["v1"] / 2000 - 0.90) <= 0.03 and abs(split["v2"] / 2000 - 0.10) <= 0.03, split
    wrong = [(v, row) for _, v, predictions, row in answers if predictions != [expected[v][row]]]
    assert not wrong, f"{len(wrong)} answers differ from their version's model, e.g. {wrong[:3]}"
    mirrored = wait_for(lambda: (deploy.stats(served["serve_name"])["versions"]["v2"]["mirrored"] - before
                                 >= 190) and deploy.stats(served["serve_name"])["versions"]["v2"]["mirrored"] - before,
                        30, "mirrored requests to reach the shadow")
    assert 190 <= mirrored <= 210  # 10 % of 2,000, every copy arrived


def test_the_consoles_services_page_shows_the_split_and_its_changes(served, ray_cluster, chromium) -> None:
    app = served["record"].id
    changes = client.api().serve_history(app)
    with serve_console(ray_cluster, chromium) as console:
        page = console.page("tester")
        page.goto(console.url + "/#/services")
        card = page.locator(f"section[data-app='{app}']")
        for version, weight in changes[-1].weights.items():
            card.locator(f"tr[data-version={version}] td.num", has_text=f"{weight:g} %").wait_for()
        assert card.locator("table").nth(1).locator("tbody tr").count() == len(changes)
        # Live figures per version, from the app's router through the controller (no Ray in the browser).
        for _ in range(20):
            assert _post(served["url"], [ROWS[0]]).status_code == 200
        stats = client.api().serve_stats(app, 60.0)
        assert stats.note is None and stats.weights == changes[-1].weights, stats
        assert sum(f.count for f in stats.versions.values()) >= 20 and all(f.error_rate == 0
                                                                         for f in stats.versions.values())
        busiest = max(stats.versions, key=lambda v: stats.versions[v].count)
        row = card.locator(f"tr[data-version={busiest}]")
        total = row.locator("td.total")
        wait_for(lambda: total.inner_text() != "–" and int(total.inner_text()) >= stats.versions[busiest].requests,
                 30, "the page to show the requests just sent")  # live: it refreshes without a reload
        assert row.locator("td.rate").inner_text() not in ("–", "0.00")
        assert row.locator("td.errors").inner_text() == "0.0 %" and row.locator("td.p50").inner_text().endswith("ms")
        console.assert_clean()


def test_replicas_run_on_the_nodes_admission_chose(served, ray_cluster) -> None:
    record = client.status(served["record"].id)
    allocated = {a["node_id"] for a in record.allocation}
    assert len(record.allocation) in (3, 4)  # v1 + v2 + v3 at min; v2 may have been granted its max of 2
    app = deploy.app_status(served["serve_name"])
    placed = {name: {r["node_id"] for r in dep["replicas"]} for name, dep in app["deployments"].items()}
    assert set(placed) == {"router", "v1", "v2", "v3"}
    for name, nodes in placed.items():
        assert nodes and nodes <= allocated, f"{name} replicas on {nodes}, allocated {allocated}"


def _traffic(served: Any, action: str, changes: dict, note: str) -> None:
    """A traffic change through the controller (the only writer of Serve's config), live once it returns."""
    traffic = client.api().serve_traffic(served["record"].id, action, changes, note)
    deploy.wait_traffic(served["serve_name"], traffic)


def test_rate_limit_answers_429_with_retry_after(served) -> None:
    before = traffic_of(deploy.deployed_config(served["serve_name"]))["rate_limit"]
    _traffic(served, "traffic", {"rate_limit": {"requests_per_s": 0.05, "burst": 2}}, "test: a tight limit")
    try:
        with ThreadPoolExecutor(6) as pool:  # at once: the bucket holds 2 and refills one per 20 s
            codes = list(pool.map(lambda _: _post(served["url"], [ROWS[0]]), range(6)))
        assert [r.status_code for r in codes].count(429) >= 3, [r.status_code for r in codes]
        refused = next(r for r in codes if r.status_code == 429)
        assert int(refused.headers["Retry-After"]) >= 1
    finally:
        _traffic(served, "traffic", {"rate_limit": before}, "test: the limit back")


LEAKS = ("Traceback", ".py", "site-packages", "RayTaskError", "pid=")  # what an answer must never carry


def test_malformed_requests_are_400s_that_say_what_was_expected(served) -> None:
    expected = 'expected JSON {"inputs": [[64 numbers], ...]}'
    cases = {  # body -> the start of the answer's message
        b"inputs=0.1,0.2": "the request body is not JSON",
        b'{"rows": [[0.5]]}': 'the request is a JSON object without "inputs"',
        b'{"inputs": [[0.5, 0.5, 0.5]]}': "row 0 has 3 numbers; " + expected,
        b'{"inputs": [["a", "b"]]}': "row 0 holds a JSON string where numbers belong; " + expected,
        b'{"inputs": "0.5"}': '"inputs" is a JSON string; ' + expected,
    }
    for body, message in cases.items():
        answer = requests.post(served["url"], data=body, headers={"Content-Type": "application/json"}, timeout=60)
        assert answer.status_code == 400, (body, answer.status_code, answer.text)
        assert answer.json()["error"].startswith(message), (body, answer.text)
        assert not [leak for leak in LEAKS if leak in answer.text], answer.text
    assert _post(served["url"], [ROWS[0]]).status_code == 200  # and the app still answers


def _replica_logs(ray_cluster: Any, serve_name: str, deployment: str) -> str:
    folder = Path(ray_cluster.temp_dir) / "session_latest" / "logs" / "serve"
    return "".join(p.read_text(errors="replace") for p in folder.glob(f"replica_{serve_name}_{deployment}_*.log"))


def test_a_failing_version_answers_500_with_a_request_id_and_logs_the_traceback(served, ray_cluster) -> None:
    _traffic(served, "traffic", {"weights": {"v1": 0, "v2": 0, "v3": 100}}, "test: all to the broken v3")
    try:
        answer = _post(served["url"], [ROWS[0]])
    finally:
        _traffic(served, "traffic", {"weights": {"v1": 90, "v2": 10, "v3": 0}}, "test: back to 90/10")
    assert answer.status_code == 500 and answer.headers["x-cuberay-version"] == "v3", answer.text
    body = answer.json()
    assert body["error"] == "version v3 failed to answer; the app's log has the details under this request id"
    assert body["request_id"] == answer.headers["x-request-id"]
    assert not [leak for leak in LEAKS if leak in answer.text], answer.text
    logged = wait_for(lambda: (lambda text: body["request_id"] in text and text)(
        _replica_logs(ray_cluster, served["serve_name"], "router")), 30, "the failure in the router's log")
    after = logged[logged.index(f"request {body['request_id']}"):]
    assert "Traceback" in after and "this version is broken on purpose" in after


@contextlib.contextmanager
def _traffic_to(*urls: str, senders: int = 2) -> Iterator[None]:
    """Requests to each url from ``senders`` threads while the block runs (rollouts judge versions on them)."""
    stop = threading.Event()

    def send(url: str) -> None:
        session = requests.Session()
        while not stop.is_set():
            session.post(url, json={"inputs": [ROWS[1]]}, timeout=60)

    threads = [threading.Thread(target=send, args=(url,), daemon=True) for url in urls for _ in range(senders)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def test_rollout_to_a_broken_version_rolls_back_by_itself_and_history_shows_it(served) -> None:
    name = served["serve_name"]
    with _traffic_to(served["url"], senders=4):
        outcome = ops.run_rollout("digits-serve", "v3", "a", say=lambda line: None)
    assert not outcome.completed and "max_error_rate" in outcome.reason
    assert outcome.applied[0] == {"v3": 50, "v1": 45, "v2": 5}
    assert traffic_of(deploy.deployed_config(name))["weights"] == {"v1": 90, "v2": 10, "v3": 0}
    changes = ops.history("digits-serve", "a")
    assert [(c.user, c.action) for c in changes][-2:] == [("tester", "rollout"), ("tester", "rollback")]
    # Rolled back already: a manual rollback has nowhere to go but a change picked from the history.
    with pytest.raises(CuberayError, match="already has the weights it had before its last rollout"):
        ops.rollback("digits-serve", "a")
    broken_step = changes[-2]
    assert ops.rollback("digits-serve", "a", to=broken_step.id) == {"v3": 50, "v1": 45, "v2": 5}
    assert ops.rollback("digits-serve", "a") == {"v1": 90, "v2": 10, "v3": 0}


def test_a_rollout_step_without_requests_times_out_and_rolls_back(served) -> None:
    """No data is no health: v2 gets no requests at all, so its first step must not pass."""
    outcome = ops.run_rollout("digits-serve", "v2", "a", steps=[50, 100], interval_s=1, step_timeout_s=4,
                              say=lambda line: None)
    assert not outcome.completed
    assert "answered 0 of the 5 requests (rollout.min_requests)" in outcome.reason, outcome.reason
    assert outcome.applied == [{"v2": 50, "v1": 50, "v3": 0}, {"v1": 90, "v2": 10, "v3": 0}]
    assert traffic_of(deploy.deployed_config(served["serve_name"]))["weights"] == {"v1": 90, "v2": 10, "v3": 0}
    last = ops.history("digits-serve", "a")[-1]
    assert (last.user, last.action, last.note) == ("tester", "rollback", f"automatic rollback: {outcome.reason}")


def test_rollback_after_a_finished_rollout_returns_to_the_weights_before_it(served) -> None:
    with _traffic_to(served["url"], senders=4):
        outcome = ops.run_rollout("digits-serve", "v2", "a", steps=[50, 100], interval_s=1, say=lambda line: None)
    assert outcome.completed, outcome.reason
    assert traffic_of(deploy.deployed_config(served["serve_name"]))["weights"] == {"v1": 0, "v2": 100, "v3": 0}
    assert ops.rollback("digits-serve", "a") == {"v1": 90, "v2": 10, "v3": 0}  # not the last step's 50/50
    assert traffic_of(deploy.deployed_config(served["serve_name"]))["weights"] == {"v1": 90, "v2": 10, "v3": 0}
    last = ops.history("digits-serve", "a")[-1]
    assert (last.user, last.action) == ("tester", "rollback") and "before its last rollout" in last.note


def _echo_app(name: str) -> dict[str, Any]:
    """configs/jobs/serve-echo.yaml in tenant a under another name and route, judged on a single request."""
    app = load_spec(EXAMPLES / "serve-echo.yaml").with_tenant("a").model_dump(mode="json")
    app["metadata"]["name"], app["spec"]["route_prefix"] = name, f"/{name}"
    app["spec"]["rollout"] = {"min_requests": 1}
    return app


def test_two_rollouts_of_different_apps_at_once_both_take_effect(served) -> None:
    """Each step of each rollout is a change of Serve's whole declarative config: both must land."""
    second = ops.deploy_app(_echo_app("echo-rollouts"), wait_s=400)
    assert second.state == JobState.RUNNING, second.reason
    echo_url = f"http://127.0.0.1:{served['port']}/echo-rollouts"
    steps = 8
    try:
        before = {app: len(ops.history(app, "a")) for app in ("digits-serve", "echo-rollouts")}
        with _traffic_to(served["url"], echo_url), ThreadPoolExecutor(2) as pool:
            rollouts = [pool.submit(ops.run_rollout, app, "v2", "a", steps=steps, interval_s=0.5,
                                    say=lambda line: None) for app in ("digits-serve", "echo-rollouts")]
            outcomes = [r.result(timeout=900) for r in rollouts]
        assert [o.completed for o in outcomes] == [True, True], [o.reason for o in outcomes]
        assert traffic_of(deploy.deployed_config("a-digits-serve"))["weights"] == {"v1": 0, "v2": 100, "v3": 0}
        assert traffic_of(deploy.deployed_config("a-echo-rollouts"))["weights"] == {"v1": 0, "v2": 100}
        for app in ("digits-serve", "echo-rollouts"):
            new = ops.history(app, "a")[before[app]:]
            assert [c.action for c in new] == ["rollout"] * steps, [(c.action, c.note) for c in new]
            assert new[-1].weights["v2"] == 100
    finally:
        ops.delete("echo-rollouts", "a")


def test_bad_input_is_refused_before_anything_is_submitted(served) -> None:
    before = {r.id for r in client.list_jobs()}
    with pytest.raises(NotFoundError, match="no SUCCEEDED run"):
        ops.deploy_app(_example_app("ghost", "/ghost", train="never-trained"))
    llm_app = {"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp", "metadata": {"name": "chat", "tenant": "a"},
               "spec": {"route_prefix": "/chat", "versions": [{"name": "tiny", "model": {"source": "/models/x"}}]}}
    with pytest.raises(SpecError, match=r"cuberay\[llm\]"):
        ops.deploy_app(llm_app)
    assert {r.id for r in client.list_jobs()} == before


def test_a_taken_route_or_name_is_refused_by_the_controller_on_every_path(served, tmp_path, capsys) -> None:
    """`cuberay serve deploy`, `cuberay submit FILE` and the Python API: the same AdmissionError (exit 3)."""
    before = {r.id for r in client.list_jobs()}
    route = "route_prefix '/digits' is already taken by ServeApp 'digits-serve'"
    name = "Serve app name 'a-digits-serve' is already taken by ServeApp 'digits-serve'"
    with pytest.raises(AdmissionError, match=route):
        ops.deploy_app(_example_app("other"))
    with pytest.raises(AdmissionError, match=name):
        ops.deploy_app(_example_app(route="/elsewhere"))
    with pytest.raises(AdmissionError, match=route):
        client.submit(load_spec(_example_app("other")), "a")
    for clash, message in ((_example_app("other"), route), (_example_app(route="/elsewhere"), name)):
        path = tmp_path / f"{clash['metadata']['name']}-{clash['spec']['route_prefix'][1:]}.yaml"
        path.write_text(yaml.safe_dump(clash))
        for argv in (["submit", str(path)], ["serve", "deploy", str(path)]):
            code = main(argv)
            assert code == 3, (argv, capsys.readouterr())
            assert message in " ".join(capsys.readouterr().err.split()), argv
    assert {r.id for r in client.list_jobs()} == before  # nothing queued, not even as REJECTED


def test_the_custom_code_example_serves_its_two_versions(served) -> None:
    app = load_spec(EXAMPLES / "serve-echo.yaml").with_tenant("a")
    record = ops.deploy_app(app, wait_s=400)
    try:
        assert record.state == JobState.RUNNING, record.reason
        url = f"http://127.0.0.1:{served['port']}/echo"
        answers = [requests.post(url, json={"n": i}, timeout=60) for i in range(20)]
        assert [r.status_code for r in answers] == [200] * 20
        assert Counter(r.json()["version"] for r in answers) == {"v1": 18, "v2": 2}  # 90/10, exact per cycle
        assert all(r.json()["version"] == r.headers["x-cuberay-version"] for r in answers)
        assert answers[3].json()["echo"] == '{"n": 3}'
    finally:
        ops.delete("echo-serve", "a")
    assert deploy.app_status("a-echo-serve") is None


def test_the_demo_serves_the_model_it_trained_and_queries_it(served) -> None:
    """`cuberay demo`'s last step: configs/jobs/demo-serve.yaml serves digits-ddp's latest run by name."""
    result = demo.serve_and_query("tester", timeout_s=300, tenant="a")
    assert result.url == f"http://127.0.0.1:{served['port']}/digits-demo"  # the Serve already running
    assert result.rows == demo.QUERY_ROWS
    assert result.accuracy > 0.8, result  # the example trains to ~0.93 test accuracy
    assert deploy.app_status("a-digits-demo") is None  # deleted again
    assert not [r for r in client.list_jobs("a", [JobState.RUNNING]) if r.name == "digits-demo"]


def test_a_route_held_by_a_queued_app_is_refused(served) -> None:
    """The route check sees every active app, also one still waiting in the queue (not yet on Serve)."""
    waiting = load_spec(EXAMPLES / "demo-serve.yaml").with_tenant("a").model_dump(mode="json")
    waiting["metadata"]["name"] = "waits-for-memory"
    waiting["spec"]["route_prefix"] = "/waiting"
    waiting["spec"]["resources"]["memory"] = "15.75Gi"  # max 16Gi; the running app holds >= 512Mi
    ref = client.submit(load_spec(waiting), "a")
    try:
        wait_for(lambda: client.status(ref.id).state == JobState.QUEUED and client.status(ref.id).reason, 30,
                 "the big app to wait for tenant a's memory")
        clash = _example_app(name="other-digits", route="/waiting")
        with pytest.raises(AdmissionError, match=f"route_prefix '/waiting' is already taken by ServeApp "
                                                 f"'waits-for-memory' \\({ref.id}, QUEUED\\)"):
            ops.deploy_app(clash, wait_s=0)
    finally:
        client.cancel(ref.id)


def _pinned(record: Any, serve_name: str) -> dict[str, set[str]]:
    """Deployment -> nodes of its replicas, for Serve app ``serve_name``; asserts each is on the app's nodes."""
    allocated = {a["node_id"] for a in client.status(record.id).allocation}
    placed = {name: {r["node_id"] for r in dep["replicas"]}
              for name, dep in deploy.app_status(serve_name)["deployments"].items()}
    for name, nodes in placed.items():
        assert nodes and nodes <= allocated, f"{serve_name} {name} replicas on {nodes}, allocated {allocated}"
    return placed


def test_two_bound_graphs_split_80_20_with_every_deployment_on_the_apps_nodes(served) -> None:
    """configs/jobs/serve-graph.yaml: two versions, each a two-deployment graph bound with its own arguments."""
    record = ops.deploy_app(load_spec(EXAMPLES / "serve-graph.yaml").with_tenant("a"), wait_s=400)
    try:
        assert record.state == JobState.RUNNING, record.reason
        url = f"http://127.0.0.1:{served['port']}/graph"
        answers = [requests.post(url, json={"values": [1, 2]}, timeout=60) for _ in range(50)]
        assert [r.status_code for r in answers] == [200] * 50, answers[0].text
        labels = Counter(r.json()["label"] for r in answers)
        assert abs(labels["v1"] - 40) <= 3 and labels["v1"] + labels["v2"] == 50, labels
        assert all(r.json()["label"] == r.headers["x-cuberay-version"] for r in answers)
        scaled = {r.json()["label"]: r.json()["scaled"] for r in answers}
        assert scaled == {"v1": [2.0, 4.0], "v2": [10.0, 20.0]}  # each graph's constructor arguments, kept
        for version in ("v1", "v2"):  # apart per version, every deployment pinned
            assert set(_pinned(record, f"a-graph-serve.{version}")) == {"Ingress", "Scaler"}
        assert set(_pinned(record, "a-graph-serve")) == {"router"}
        # traffic moves across graph versions and rolls back as it does for any version
        traffic = client.api().serve_traffic(record.id, "traffic", {"weights": {"v1": 0, "v2": 100}}, "test")
        deploy.wait_traffic("a-graph-serve", traffic)
        assert {requests.post(url, json={"values": [1]}, timeout=60).json()["label"] for _ in range(5)} == {"v2"}
        back = client.api().serve_rollback(record.id)
        assert back["weights"] == {"v1": 80, "v2": 20}
    finally:
        ops.delete("graph-serve", "a")
    assert [deploy.app_status(n) for n in ("a-graph-serve", "a-graph-serve.v1", "a-graph-serve.v2")] == [None] * 3


def test_a_serve_config_file_imports_and_serves(served, capsys) -> None:
    """`cuberay serve import configs/serve/serve-config.yaml --wait`: the Serve config file, served."""
    config = Path(__file__).resolve().parents[2] / "configs" / "serve" / "serve-config.yaml"
    assert main(["serve", "import", str(config), "--tenant", "a", "--wait"]) == 0, capsys.readouterr().err
    try:
        answer = requests.post(f"http://127.0.0.1:{served['port']}/scale", json={"values": [1, 2]}, timeout=60)
        assert answer.status_code == 200 and answer.json() == {"label": "v1", "scaled": [2.0, 4.0]}, answer.text
        record = ops.find("scale", "a")
        assert set(_pinned(record, "a-scale.v1")) == {"Ingress", "Scaler"}
    finally:
        ops.delete("scale", "a")
    assert deploy.app_status("a-scale.v1") is None


def test_delete_takes_the_app_off_serve_and_frees_its_quota(served) -> None:
    # Last in the module: it ends the shared app.
    record = ops.delete("digits-serve", "a")
    assert record.state == JobState.CANCELLED
    assert deploy.app_status(served["serve_name"]) is None
    wait_for(lambda: record.id not in client.api().running(), 30, "the allocation to be released")
    assert ops.history("digits-serve", "a")[-1].action == "delete"

