"""The serving decisions: which weights an entry is written with, whether Serve kept a write, where a rollback goes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cuberay.errors import CuberayError, NotFoundError, SpecError
from cuberay.platform.policy import serving as pol


def _entry(name: str = "t-web", route: str = "/web", weights: dict | None = None) -> dict:
    return {"name": name, "route_prefix": route, "import_path": "cuberay.serve.app:build",
            "args": {"plan": {"versions": ({"name": "v1"}, {"name": "v2"})}},
            "deployments": [{"name": "router", "user_config": {"weights": weights or {"v1": 90, "v2": 10},
                                                               "mirror": None}}]}


@dataclass(frozen=True)
class Change:
    id: int
    action: str
    weights: dict
    note: str = ""


def _history(*rows: tuple[str, dict, str]) -> list[Change]:
    return [Change(i, action, weights, note) for i, (action, weights, note) in enumerate(rows, start=1)]


def test_a_route_served_by_another_app_is_found_and_the_app_itself_is_not() -> None:
    apps = [_entry(), _entry("u-api", "/api")]
    assert pol.route_holder(apps, "t-web", "/web") is None  # itself: a redeploy
    assert pol.route_holder(apps, "t-other", "/web") == "t-web"
    assert pol.route_holder(apps, "t-other", "/free") is None


def test_a_write_held_only_when_serve_reports_every_app_as_written() -> None:
    written = pol.normalized(pol.merged([_entry("u-api", "/api")], _entry(weights={"v1": 50, "v2": 50}),
                                        "t-web"))["applications"]
    assert pol.lost(written, written) is None
    with_defaults = [{**a, "runtime_env": {}} for a in written]  # Serve may add keys of its own
    assert pol.lost(written, with_defaults) is None
    older = [written[0], pol.normalized(_entry())]  # another writer put the old weights back
    assert pol.lost(written, older) == "app 't-web' is not what was written"
    assert pol.lost(written, written[:1]) == "app 't-web' is missing"
    assert pol.lost(written[:1], written, removed="t-web") == "app 't-web' is still deployed"


def test_a_deploy_keeps_the_weights_the_app_has() -> None:
    spec_weights = _entry()
    deployed = _entry(weights={"v1": 0, "v2": 100})  # a rollout moved them
    assert pol.traffic_of(pol.deploy_entry(spec_weights, deployed, None))["weights"] == {"v1": 0, "v2": 100}
    remembered = {"v1": 50, "v2": 50}  # a new attempt: the last recorded change's
    assert pol.traffic_of(pol.deploy_entry(spec_weights, None, remembered))["weights"] == remembered
    assert pol.deploy_entry(spec_weights, None, None) == spec_weights  # the first deploy: the spec's
    llm = {"name": "t-chat", "route_prefix": "/chat", "import_path": "cuberay.serve.llm:build", "args": {}}
    assert pol.deploy_entry(llm, llm, remembered) == llm  # no traffic config to keep


def test_traffic_changes_name_the_apps_versions_and_sum_to_100() -> None:
    assert pol.check_traffic({"weights": {"v2": 100}}, ["v1", "v2"]) == {"weights": {"v1": 0, "v2": 100}}
    with pytest.raises(SpecError, match="sum to 90"):
        pol.check_weights({"v1": 80, "v2": 10}, ["v1", "v2"])
    with pytest.raises(SpecError, match=r"versions \['v9'\]"):
        pol.check_weights({"v9": 100}, ["v1", "v2"])
    with pytest.raises(SpecError, match="percentages"):
        pol.check_weights({"v1": True, "v2": 99}, ["v1", "v2"])
    with pytest.raises(SpecError, match=r"\['replicas'\]"):
        pol.check_traffic({"replicas": 3}, ["v1"])


def test_rollback_after_a_finished_rollout_returns_to_the_weights_before_it() -> None:
    history = _history(("deploy", {"v1": 90, "v2": 10}, "attempt 1"),
                       ("rollout", {"v1": 50, "v2": 50}, pol.step_note("v2", 1, 2)),
                       ("rollout", {"v1": 0, "v2": 100}, pol.step_note("v2", 2, 2)))
    weights, note = pol.rollback_target(history, {"v1": 0, "v2": 100})
    assert weights == {"v1": 90, "v2": 10}  # not the last step's 50/50
    assert note == "manual rollback to the weights before its last rollout (change 2)"


def test_rollback_picks_the_last_of_two_rollouts_and_old_step_notes_count() -> None:
    history = _history(("deploy", {"v1": 90, "v2": 10}, ""),
                       ("rollout", {"v1": 0, "v2": 100}, "rollout to v2: step 1"),  # a note without "of N"
                       ("rollout", {"v1": 50, "v2": 50}, pol.step_note("v1", 1, 2)),
                       ("rollout", {"v1": 100, "v2": 0}, pol.step_note("v1", 2, 2)))
    assert pol.rollback_target(history, {"v1": 100, "v2": 0})[0] == {"v1": 0, "v2": 100}
    assert pol.rollback_target(history[:2], {"v1": 0, "v2": 100})[0] == {"v1": 90, "v2": 10}


def test_without_a_rollout_rollback_undoes_the_last_change_and_to_picks_any() -> None:
    history = _history(("deploy", {"v1": 90, "v2": 10}, ""), ("traffic", {"v1": 70, "v2": 30}, "by hand"))
    assert pol.rollback_target(history, {"v1": 70, "v2": 30}) == (
        {"v1": 90, "v2": 10}, "manual rollback to the weights before its last change (change 2)")
    assert pol.rollback_target(history, {"v1": 90, "v2": 10}, to=2) == ({"v1": 70, "v2": 30},
                                                                          "manual rollback to change 2")


def test_rollback_refuses_what_it_cannot_do_and_says_what_to_do() -> None:
    deployed = _history(("deploy", {"v1": 90, "v2": 10}, ""))
    with pytest.raises(CuberayError, match="no traffic change since it was deployed"):
        pol.rollback_target(deployed, {"v1": 90, "v2": 10})
    rolled_back = _history(("deploy", {"v1": 90, "v2": 10}, ""),
                           ("rollout", {"v1": 50, "v2": 50}, pol.step_note("v2", 1, 2)),
                           ("rollback", {"v1": 90, "v2": 10}, "automatic rollback: errors"))
    with pytest.raises(CuberayError, match=r"already has the weights it had before its last rollout.*--to ID"):
        pol.rollback_target(rolled_back, {"v1": 90, "v2": 10})
    with pytest.raises(NotFoundError, match="change 9 is not one of"):
        pol.rollback_target(rolled_back, {"v1": 90, "v2": 10}, to=9)
    with pytest.raises(SpecError, match="no weights to restore"):
        pol.rollback_target(_history(("delete", {}, "")), {"v1": 90}, to=1)
