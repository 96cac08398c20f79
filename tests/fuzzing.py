"""Fuzz targets for hostile input, shared by the unit tier (a fast subset) and ``benchmarks/bench_fuzz.py``
(10,000+ inputs per target): the spec loader, the resource grammar, the trace readers and the platform file.

The contract each checks: an input is accepted, or refused with a ``CuberayError`` (never another
exception), and a refusal of a structured document names the field path (``SpecError.path``).
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml
from hypothesis import strategies as st

from cuberay.errors import CuberayError, SpecError
from cuberay.platform.sim.inputs import load_trace
from cuberay.platform.spec import load_platform, load_spec
from cuberay.platform.spec.resources import parse_worker

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "configs" / "jobs").glob("*.yaml"))
PLATFORM = yaml.safe_load((REPO / "configs" / "platform.yaml").read_text())

# Values a field may be set to: scalars of every YAML type, odd strings, and small containers.
_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
_TRICKY = st.sampled_from(["", " ", "0", "-1", "1e309", "nan", "inf", "-0", "1(V100)", "2(", "(npu,910B)",
                           "500m", "32Gi", "1Ei", "9" * 40, "$(reboot)", "`id`", "; rm -rf /", "a\nb", "\x00",
                           "1.5(A100)", "0.5", "yes", "null", "~", "*", "../..", "Ω", "１", "1（V100）"])
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), _TEXT, _TRICKY)
VALUES = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(_TEXT, inner, max_size=4)), max_leaves=12)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _paths(value, prefix + (i,))
    return out


@st.composite
def mutated(draw: st.DrawFn, bases: list[Any]) -> Any:
    """A valid document with 1-3 changes: a value replaced, a key dropped, or an unknown key added."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(VALUES)
        elif action == "drop" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif isinstance(parent, dict):
            parent[draw(_TEXT)] = draw(VALUES)
    return doc


JOB_DOCS = [yaml.safe_load(p.read_text()) for p in EXAMPLES]


def _check_refusal(err: BaseException, structured: bool, whole_file_ok: bool = False) -> None:
    assert isinstance(err, CuberayError), f"{type(err).__name__}: {err}"
    if structured and isinstance(err, SpecError):
        # A trace refused as a whole ("no rows") names its file; anything else names the line or option.
        assert err.path or (whole_file_ok and err.file), f"no field path in: {err}"


def check(call: Callable[[], Any], *, structured: bool, whole_file_ok: bool = False) -> None:
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the contract is about which exceptions escape
        _check_refusal(err, structured, whole_file_ok)


def _is_document(doc: Any) -> bool:
    """A mapping that looks like a cuberay document (its errors are about fields, so they have paths)."""
    return isinstance(doc, dict) and isinstance(doc.get("kind"), str) and isinstance(doc.get("spec"), dict)


# ---------------------------------------------------------------- targets: (strategy, check)

def spec_dict(doc: Any) -> None:
    check(lambda: load_spec(doc), structured=_is_document(doc))


def spec_text(text: str) -> None:
    check(lambda: load_spec(text), structured=False)


@st.composite
def spec_texts(draw: st.DrawFn) -> str:
    """YAML text: a mutated example dumped, then cut or spliced with random characters."""
    text = yaml.safe_dump(draw(mutated(JOB_DOCS)), allow_unicode=True)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["&a ", "*a", ": ", "- ", "{", "[", "!!python/object ", "\t",
                                                 "<<: *a\n", "%YAML 1.1\n", "---\n", "'"])) + text[at:]
    return text


RESOURCE_FIELDS = ("cpu", "memory", "gpu", "rdma")


def resources(values: dict[str, Any]) -> None:
    check(lambda: parse_worker(**values), structured=False)
    doc = copy.deepcopy(JOB_DOCS[[p.name for p in EXAMPLES].index("task.yaml")])
    doc["spec"]["resources"] = values
    try:
        load_spec(doc)
    except Exception as err:  # noqa: BLE001
        _check_refusal(err, structured=True)
        assert err.path.startswith("spec.resources"), err


RESOURCE_VALUES = st.dictionaries(st.sampled_from(RESOURCE_FIELDS),
                                  st.one_of(_TRICKY, _TEXT, st.integers(-10, 10**20),
                                            st.floats(allow_nan=True, allow_infinity=True),
                                            st.from_regex(r"\s*[0-9.eE+-]{1,8}[a-zA-Z]{0,3}\s*(\([A-Za-z0-9, ]{0,12}\))?",
                                                          fullmatch=True)), max_size=4)


_CELL = st.one_of(_TRICKY, _TEXT.filter(lambda s: "\r" not in s), st.integers(-10, 10**6).map(str),
                  st.floats(allow_nan=True, allow_infinity=True).map(str),
                  st.sampled_from(["2017-10-03 14:00:00", "2017-13-40 99:00:00", "vc1", "7", "0.5"]))
TRACE_COLUMNS = ["timestamp", "duration", "num_gpus", "cluster", "submit_time", "gpus", "cpus", "memory",
                 "workers", "tenant", "priority", "gpu_time"]


@st.composite
def trace_texts(draw: st.DrawFn) -> str:
    header = draw(st.sampled_from([["timestamp", "duration", "num_gpus", "gpu_time", "cluster"],
                                   ["submit_time", "duration", "gpus", "cpus", "memory", "workers", "tenant",
                                    "priority"],
                                   ["submit_time", "duration", "gpus"]]))
    if draw(st.booleans()):
        header = draw(st.lists(st.sampled_from(TRACE_COLUMNS + ["x", ""]), max_size=8)) or header
    rows = draw(st.lists(st.lists(_CELL, min_size=0, max_size=len(header) + 1), max_size=5))
    quote = lambda cell: '"' + cell.replace('"', '""') + '"'  # noqa: E731
    return "\n".join([",".join(header)] + [",".join(quote(c) for c in row) for row in rows]) + "\n"


def trace(text: str, window: tuple[str | None, str | None] = (None, None)) -> None:
    fd, name = tempfile.mkstemp(suffix=".csv")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        check(lambda: load_trace(name, start=window[0], end=window[1]), structured=True, whole_file_ok=True)
    finally:
        os.unlink(name)


WINDOWS = st.tuples(st.one_of(st.none(), _TRICKY, st.sampled_from(["7d", "2017-10-01", "3600"])),
                    st.one_of(st.none(), _TRICKY, st.sampled_from(["36h", "2017-10-31", "0"])))


def platform(doc: Any) -> None:
    check(lambda: load_platform(doc), structured=_is_document(doc))


TARGETS: dict[str, tuple[Any, Callable[..., None]]] = {
    "spec-dict": (mutated(JOB_DOCS), spec_dict),
    "spec-text": (spec_texts(), spec_text),
    "resources": (RESOURCE_VALUES, resources),
    "trace": (st.tuples(trace_texts(), WINDOWS), lambda args: trace(*args)),
    "platform": (mutated([PLATFORM]), platform),
}
