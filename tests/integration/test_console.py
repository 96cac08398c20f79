"""The web console as a person uses it, in a real browser (Chromium via Playwright), over the head's API server
actor and a real controller on the session's Ray cluster.

- a job held by its tenant's max shows on the Queue page with its reason, and moves to running without a reload
  once the job in its way ends;
- cancelling from a job page cancels it; the same click by a member who does not own the job is refused with the
  rule shown, and a non-member's job page shows the refusal instead of the job;
- a pipeline run's page draws its steps, and a step goes from waiting to running to succeeded;
- a search's page lists its trials as they report and draws each trial's value with the best so far; the Tune
  jobs page lists the search with its best value;
- no page logs a JavaScript error, no request leaves 127.0.0.1, and a request without a session is refused.

(The Services page's traffic split is checked in tests/integration/test_serve.py, where an app is deployed.)
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

import cuberay.pipelines as pipelines
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.integration.browser import Console, screenshot, serve_console
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def console(platform: Any, ray_cluster: Any, chromium: Any) -> Iterator[Console]:
    with serve_console(ray_cluster, chromium) as served:
        yield served


def gpu_task(name: str, command: str = "sleep 300") -> dict:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": "c"},
            "spec": {"workers": 1, "resources": {"cpu": "1", "gpu": "4"}, "command": command}}


def state_of(job_id: str) -> JobState:
    with client.acting_as("admin"):
        return client.status(job_id).state


def test_the_queue_a_job_page_and_who_may_cancel(console: Console, platform: Any, ray_cluster: Any, job_client: Any,
                                                tmp_path) -> None:
    # bob joins tenant c: a member who may read its jobs and cancel only his own.
    spec = copy.deepcopy(platform.spec)
    next(t for t in spec["spec"]["tenants"] if t["name"] == "c")["members"].append("bob")
    client.api().reload(spec)
    blocker = client.submit(gpu_task("blocker")).id  # as the platform's user, tester (tenant c's max is 4 GPUs)
    wait_for(lambda: state_of(blocker) == JobState.RUNNING, 120, "the blocking job to run")
    waiting = client.submit(gpu_task("waits")).id
    page = console.page("bob")
    page.goto(console.url + "/#/queue")
    row = page.locator(f"tr[data-job='{waiting}']")
    row.locator(".state", has_text="queued").wait_for()
    assert re.search(r"tenant 'c' is at its max GPU", row.inner_text()), row.inner_text()
    screenshot(page, "console-queue", tmp_path)

    client.cancel(blocker)  # the job in the way ends; the page is left as it is, never reloaded
    row.locator(".state", has_text="running").wait_for(timeout=120_000)

    # Its Ray Job links back to its page (what the Ray dashboard shows in the job's metadata).
    link = job_client.get_job_info(client.status(waiting).submission_id).metadata["cuberay.io/console"]
    assert link == f"{console.url}/#/job/{waiting}"
    # bob is a member of c but did not submit this job: the page shows it, the cancel is refused.
    page.goto(link)
    page.locator("h1", has_text=waiting).wait_for()
    page.locator("ol.timeline li[data-kind=admitted]").wait_for()
    dashboard = page.locator("a", has_text="Ray dashboard").get_attribute("href")
    assert dashboard.startswith(ray_cluster.dashboard_url) and f"cuberay-{waiting}" in dashboard
    screenshot(page, "console-job", tmp_path)
    page.click("#cancel")
    refusal = page.locator("#outcome [role=alert]")
    refusal.wait_for()
    assert "Refused" in refusal.inner_text() and "submitter" in refusal.inner_text(), refusal.inner_text()
    assert state_of(waiting) == JobState.RUNNING

    # Someone in no tenant: the job's page is refused, with the rule.
    outsider = console.page("mallory")
    outsider.goto(console.url + f"/#/job/{waiting}")
    outsider.locator("text=Could not load this page").wait_for()
    assert "member" in outsider.inner_text("main")
    assert waiting not in outsider.locator("h1").inner_text()

    # Its submitter may: the same click cancels it.
    owner = console.page("tester")
    owner.goto(console.url + f"/#/job/{waiting}")
    owner.click("#cancel")
    owner.locator("#outcome [role=status]", has_text="cancelled").wait_for()
    assert state_of(waiting) == JobState.CANCELLED
    console.expect_refusals(at_least=2)  # bob's click, mallory's page
    console.assert_clean()


def test_a_pipeline_runs_step_by_step_on_its_page(console: Console) -> None:
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "two-steps"},
            "spec": {"steps": [{"name": "first", "job": {"kind": "Task", "spec": {"command": "sleep 4"}}},
                               {"name": "second", "depends_on": ["first"],
                                "job": {"kind": "Task", "spec": {"command": "true"}}}]}}
    run = pipelines.submit(spec, "a")["run"]
    page = console.page("tester")
    page.goto(console.url + f"/#/run/{run.id}")
    first, second = (page.locator(f"svg.dag g[data-step={name}]") for name in ("first", "second"))
    second.and_(page.locator("[data-state=PENDING]")).wait_for()  # drawn before it may start
    first.and_(page.locator("[data-state=RUNNING]")).wait_for(timeout=120_000)
    assert second.get_attribute("data-state") == "PENDING"
    second.and_(page.locator("[data-state=SUCCEEDED]")).wait_for(timeout=120_000)
    assert first.get_attribute("data-state") == "SUCCEEDED"
    page.locator("h1 .state", has_text="succeeded").wait_for()
    # The Pipelines page lists what is stored: this one on request, a scheduled one with its next ticks.
    nightly = {**spec, "metadata": {"name": "nightly"},
               "spec": {**spec["spec"], "schedule": {"cron": "30 1 * * *", "start": "2099-01-01T00:00:00Z"}}}
    pipelines.submit(nightly, "a")
    page.goto(console.url + "/#/pipelines")
    page.locator("tr[data-pipeline=two-steps]", has_text="on request").wait_for()
    ticks = page.locator("tr[data-pipeline=nightly] td.next-ticks")
    ticks.wait_for()
    assert ticks.inner_text().count("2099") == 3, ticks.inner_text()
    console.assert_clean()


def test_a_searchs_trials_and_best_so_far(console: Console, tmp_path) -> None:
    spec = yaml.safe_load((REPO / "configs" / "jobs" / "tune-branin.yaml").read_text())
    spec["metadata"]["tenant"], spec["spec"]["num_samples"] = "a", 5
    spec["spec"]["resources"] = {"cpu": "250m"}  # the test platform's tenants have CPU and GPU quotas only
    job_id = client.submit(spec).id
    page = console.page("tester")
    page.goto(console.url + f"/#/job/{job_id}")
    page.locator("table tr[data-trial]").first.wait_for(timeout=120_000)  # shown while the search runs
    page.locator("h1 .state", has_text="succeeded").wait_for(timeout=180_000)
    rows = page.locator("table tr[data-trial]")
    wait_for(lambda: rows.count() == 5 and page.locator("svg.curve circle").count() == 5, 30,
             "every trial's row and point")
    values = [float(v) for v in page.locator("table tr[data-trial] td.num:nth-child(5)").all_inner_texts()]
    best = page.locator("table tr.best")
    best_text = best.first.locator("td.num").nth(1).inner_text()
    assert best.count() >= 1 and float(best_text) == min(values)
    assert "value" in page.locator("h2", has_text="Trials").inner_text()
    page.locator("svg.curve path.best-line").wait_for(state="attached")  # flat (zero height) when trial 0 stays best
    screenshot(page, "console-tune", tmp_path)
    page.goto(console.url + "/#/tune")
    listed = page.locator(f"tr[data-job='{job_id}']")
    listed.locator(".state", has_text="succeeded").wait_for()
    assert f"value {best_text}" in listed.inner_text(), listed.inner_text()
    console.assert_clean()


def test_without_a_session_nothing_is_answered(console: Console) -> None:
    page = console.page(None)
    page.locator("form[aria-label='sign in']").wait_for()
    answer = page.request.post(console.url + "/api/v1/call/tenants", data={"args": []})
    assert answer.status == 401
    page.fill("#token", "not-the-token")
    page.fill("#user", "tester")
    page.click("button[type=submit]")
    page.locator(".problem [role=alert]", has_text="not this cluster's token").wait_for()
    console.expect_refusals(at_least=0)
    console.problems[:] = [p for p in console.problems if "status of 401" not in p]  # the wrong token, on purpose
    console.assert_clean()
