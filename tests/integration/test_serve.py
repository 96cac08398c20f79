"""Serving end to end: two digits versions trained by TrainJobs, served behind the cuberay router.

One app lives through the whole module (Serve start-up is the slow part on 2
cores): the 90/10 split over 2,000 requests, the mirror that never changes an
answer, replicas on the admitted nodes, the rate limit, a rollout to a broken
version that rolls back by itself, rollback and history, delete. Bad input is
refused before anything is submitted.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
import torch

from cuberay.errors import NotFoundError, SpecError
from cuberay.platform import client, demo
from cuberay.platform.control.head import free_port
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec
from cuberay.serve import deploy, ops
from cuberay.serve.config import traffic_of, with_traffic
from cuberay.serve.torch_model import load_model
from tests.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

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
    versions = ops.entry_for(ops._app(served["record"]), [], client._call)["args"]["plan"]["versions"]
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


def test_replicas_run_on_the_nodes_admission_chose(served, ray_cluster) -> None:
    record = client.status(served["record"].id)
    allocated = {a["node_id"] for a in record.allocation}
    assert len(record.allocation) in (3, 4)  # v1 + v2 + v3 at min; v2 may have been granted its max of 2
    app = deploy.app_status(served["serve_name"])
    placed = {name: {r["node_id"] for r in dep["replicas"]} for name, dep in app["deployments"].items()}
    assert set(placed) == {"router", "v1", "v2", "v3"}
    for name, nodes in placed.items():
        assert nodes and nodes <= allocated, f"{name} replicas on {nodes}, allocated {allocated}"


def test_rate_limit_answers_429_with_retry_after(served) -> None:
    name = served["serve_name"]
    config = deploy.deployed_config(name)
    limited = with_traffic(config, rate_limit={"requests_per_s": 0.05, "burst": 2})
    deploy.apply(limited)
    deploy.wait_traffic(name, traffic_of(limited))
    try:
        with ThreadPoolExecutor(6) as pool:  # at once: the bucket holds 2 and refills one per 20 s
            codes = list(pool.map(lambda _: _post(served["url"], [ROWS[0]]), range(6)))
        assert [r.status_code for r in codes].count(429) >= 3, [r.status_code for r in codes]
        refused = next(r for r in codes if r.status_code == 429)
        assert int(refused.headers["Retry-After"]) >= 1
    finally:
        deploy.apply(config)
        deploy.wait_traffic(name, traffic_of(config))


def test_rollout_to_a_broken_version_rolls_back_by_itself_and_history_shows_it(served) -> None:
    name = served["serve_name"]
    stop = threading.Event()

    def traffic() -> None:  # the rollout judges the version by live requests
        session = requests.Session()
        while not stop.is_set():
            _post(served["url"], [ROWS[1]], session)

    senders = [threading.Thread(target=traffic, daemon=True) for _ in range(4)]
    for sender in senders:
        sender.start()
    try:
        outcome = ops.run_rollout("digits-serve", "v3", "a", say=lambda line: None)
    finally:
        stop.set()
        for sender in senders:
            sender.join(timeout=60)
    assert not outcome.completed and "max_error_rate" in outcome.reason
    assert outcome.applied[0] == {"v3": 50, "v1": 45, "v2": 5}
    assert traffic_of(deploy.deployed_config(name))["weights"] == {"v1": 90, "v2": 10, "v3": 0}
    changes = ops.history("digits-serve", "a")
    assert [(c.user, c.action) for c in changes][-2:] == [("tester", "rollout"), ("cuberay", "rollback")]
    # A manual rollback restores the weights before the last change: here the broken step's.
    assert ops.rollback("digits-serve", "a") == {"v3": 50, "v1": 45, "v2": 5}
    assert ops.rollback("digits-serve", "a") == {"v1": 90, "v2": 10, "v3": 0}


def test_bad_input_is_refused_before_anything_is_submitted(served) -> None:
    before = {r.id for r in client.list_jobs()}
    with pytest.raises(SpecError, match="route_prefix '/digits' is already taken by app 'digits-serve'"):
        ops.deploy_app(_example_app("other"))
    with pytest.raises(NotFoundError, match="no SUCCEEDED run"):
        ops.deploy_app(_example_app("ghost", "/ghost", train="never-trained"))
    llm_app = {"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp", "metadata": {"name": "chat", "tenant": "a"},
               "spec": {"route_prefix": "/chat", "versions": [{"name": "tiny", "model": {"source": "/models/x"}}]}}
    with pytest.raises(SpecError, match=r"cuberay\[llm\]"):
        ops.deploy_app(llm_app)
    assert {r.id for r in client.list_jobs()} == before


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
        with pytest.raises(SpecError, match=f"route_prefix '/waiting' is already taken by app "
                                            f"'waits-for-memory' \\({ref.id}, QUEUED\\)"):
            ops.deploy_app(clash, wait_s=0)
    finally:
        client.cancel(ref.id)


def test_delete_takes_the_app_off_serve_and_frees_its_quota(served) -> None:
    # Last in the module: it ends the shared app.
    record = ops.delete("digits-serve", "a")
    assert record.state == JobState.CANCELLED
    assert deploy.app_status(served["serve_name"]) is None
    wait_for(lambda: record.id not in client._call("running"), 30, "the allocation to be released")
    assert ops.history("digits-serve", "a")[-1].action == "delete"

