"""The repository Dockerfile parses, and the versions it pins are the project's."""

from __future__ import annotations

import io
import re
from pathlib import Path

from dockerfile_parse import DockerfileParser

import cuberay
from cuberay.kuberay.labels import DEFAULT_IMAGE, RAY_VERSION

REPO = Path(__file__).resolve().parents[3]


def _parser() -> DockerfileParser:
    return DockerfileParser(fileobj=io.BytesIO((REPO / "Dockerfile").read_bytes()))


def _pyproject(pattern: str) -> str:
    # A regex, not tomllib: the project supports Python 3.10, which has no tomllib.
    match = re.search(pattern, (REPO / "pyproject.toml").read_text(), re.M)
    assert match, pattern
    return match[1]


def _ray_pin() -> str:
    return _pyproject(r'^\s*"ray\[[^\]]*\]==([^"]+)"')


def test_dockerfile_parses_into_instructions() -> None:
    instructions = [i["instruction"] for i in _parser().structure]
    assert instructions.count("FROM") == 1
    assert {"ARG", "FROM", "COPY", "RUN", "WORKDIR", "LABEL"} <= set(instructions)


def test_base_image_is_rays_official_image_of_the_pinned_version() -> None:
    parser = _parser()
    base = parser.baseimage  # ARG defaults substituted
    match = re.fullmatch(r"rayproject/ray:(?P<ray>[0-9.]+)-py(?P<py>3\d+)(-gpu)?", base)
    assert match, base
    pin = _ray_pin()  # e.g. 2.60.*
    assert re.fullmatch(pin.replace(".", r"\.").replace("*", r"\d+"), match["ray"]), (match["ray"], pin)
    assert match["ray"] == RAY_VERSION  # rayVersion of every rendered RayCluster


def test_image_version_and_python_match_the_project() -> None:
    parser = _parser()
    assert parser.labels["org.opencontainers.image.version"] == cuberay.__version__
    assert DEFAULT_IMAGE == f"cuberay:{cuberay.__version__}"
    requires = _pyproject(r'^requires-python = "([^"]+)"')
    minimum = tuple(int(x) for x in requires.removeprefix(">=").split("."))
    py = re.search(r"-py3(\d+)", parser.baseimage)
    assert py and (3, int(py[1])) >= minimum
    run = next(i["value"] for i in parser.structure if i["instruction"] == "RUN")
    assert '"ray[default,tune,serve,train]==${RAY_VERSION}"' in run and " ." in run
