"""Golden manifests of `cuberay kube render` and `render-job`; every object passes schema and rules.

Regenerate after an intended change with ``CUBERAY_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from cuberay.kuberay.labels import Scheduler
from cuberay.kuberay.manifest import to_yaml
from cuberay.kuberay.render import all_manifests, render_platform
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.kuberay.render_job import render_job
from cuberay.kuberay.validate import validate_objects
from cuberay.platform.spec import load_platform, load_spec

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "unit" / "golden" / "kube"
PLATFORMS = {"example": REPO / "configs" / "platform.yaml", "large": REPO / "configs" / "kube" / "platform-large.yaml",
             "topology": REPO / "configs" / "topology" / "platform.yaml"}
JOBS = ("train-ddp", "task", "serve-echo")
UPDATE = os.environ.get("CUBERAY_UPDATE_GOLDEN") == "1"


def _compare(path: Path, text: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}; run with CUBERAY_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8"), (
        f"{path.relative_to(REPO)} differs from the render; if the change is intended, regenerate with "
        f"CUBERAY_UPDATE_GOLDEN=1 and review the diff")


@pytest.mark.parametrize("scheduler", list(Scheduler), ids=lambda s: s.value)
@pytest.mark.parametrize("platform_name", list(PLATFORMS))
def test_render_matches_golden_and_validates(platform_name: str, scheduler: Scheduler) -> None:
    files = render_platform(load_platform(PLATFORMS[platform_name]), RenderOptions(scheduler=scheduler))
    folder = GOLDEN / platform_name / scheduler.value
    for name, content in files.items():
        _compare(folder / name, content if isinstance(content, str) else to_yaml(content))
    assert sorted(p.name for p in folder.iterdir()) == sorted(files), "stale golden files"
    problems = validate_objects(m.obj for m in all_manifests(files))
    assert problems == [], "\n".join(map(str, problems))


@pytest.mark.parametrize("job", JOBS)
def test_render_job_matches_golden_and_validates(job: str) -> None:
    platform = load_platform(PLATFORMS["example"])
    manifests = render_job(platform, load_spec(REPO / "configs" / "jobs" / f"{job}.yaml"), RenderOptions())
    _compare(GOLDEN / "jobs" / f"{job}.yaml", to_yaml(manifests))
    problems = validate_objects(m.obj for m in manifests)
    assert problems == [], "\n".join(map(str, problems))


def test_golden_yaml_parses_to_the_rendered_objects() -> None:
    """The comments are comments only: the YAML text loads back to exactly the objects sent to the API."""
    files = render_platform(load_platform(PLATFORMS["large"]), RenderOptions())
    for content in files.values():
        if isinstance(content, str):
            continue
        assert list(yaml.safe_load_all(to_yaml(content))) == [m.obj for m in content]


def test_tenant_file_explains_the_quota_mapping() -> None:
    text = (GOLDEN / "example" / "kueue" / "cluster.yaml").read_text()
    assert "nominalQuota   = the tenant's guarantee in the pool" in text
    assert "nominalQuota: 2833m # guaranteed 1333m + head" in text


def test_readme_excerpt_is_the_rendered_output() -> None:
    """The README's rendered tenant is copied from the golden files, line for line."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("# llm.yaml: the RayCluster's InfiniBand worker group\n", 1)[1].split("```", 1)[0]
    rendered = ((GOLDEN / "large" / "kueue" / "llm.yaml").read_text() +
                (GOLDEN / "large" / "kueue" / "cluster.yaml").read_text())
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) > 10
    missing = [line for line in lines if line not in rendered.splitlines()]
    assert missing == [], f"README lines not in the render: {missing}"
