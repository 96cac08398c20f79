"""Reporting spec errors, and the value checks the models use.

The models (``common``, ``platform_file``, ``workload``, ``train``, ``tune``,
``serve``, ``jobs``) import this module; it imports none of them. Reading YAML
(with its size, alias and depth limits) is :mod:`cuberay.platform.spec.documents`. This module

- rewrites a pydantic ``ValidationError`` as one :class:`SpecError` naming the
  file, the field path, the YAML line, what was seen and the fix;
- holds the value checks the models use (DNS names, label keys, import paths,
  durations, mounts, the resource grammar).

Whether a job could ever run on a platform is policy, not data: see
:mod:`cuberay.platform.policy.fit`.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from pydantic import BaseModel, ValidationError

import cuberay.platform.spec.resources as res
from cuberay.errors import SpecError
from cuberay.platform.spec.documents import Document, short_repr
from cuberay.platform.spec.resource_grammar import format_memory

# Union tags pydantic puts into error locations; they are not field names.
UNION_TAGS = frozenset({"workers-count", "workers-range", "model-import-path", "model-ref"})
_MAX_LISTED_ERRORS = 5
# Limits on what a spec file may be. A spec is a few KiB with a few hundred values; these are far above any
# real spec and far below what exhausts memory or time (a 9-level alias bomb expands to 387 million values).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MOUNT = re.compile(r"^(?P<source>[^;]+)\((?P<kind>[a-z-]+)\):(?P<target>/[^;]*)$")
MOUNT_KINDS = ("pvc", "pvc-share", "hostpath", "nfs", "storage", "configmap", "secret", "memory")


class FieldError(ValueError):
    """A model-level validation error that points below the model, at ``sub``.

    Raised inside a model validator; :func:`spec_error` appends ``sub`` to the
    location pydantic reports, so the message names the exact field.
    """

    def __init__(self, sub: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.sub = tuple(sub)


def require_unique(names: Iterable[str], where: str, what: str, fix: str) -> None:
    """FieldError at ``where[i].name`` for the first name listed twice, naming both places and ``fix``."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise FieldError([where, i, "name"], f"{what} {name!r} is listed at [{seen[name]}] and [{i}]; {fix}")
        seen[name] = i


def field_names(root: type[BaseModel]) -> set[str]:
    """Field names (aliases where set) of ``root`` and all its subclasses: the "did you mean" vocabulary."""
    words: set[str] = set()
    stack = [root]
    while stack:
        model = stack.pop()
        stack.extend(model.__subclasses__())
        words.update(f.alias or n for n, f in model.model_fields.items())
    return words


def format_path(loc: Iterable[str | int]) -> str:
    """``("spec", "tenants", 1, "name")`` -> ``spec.tenants[1].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "":  # an empty key (YAML allows it) still needs a visible place in the path
            out += '[""]'
        else:
            out += f".{part}" if out else str(part)
    return out


def spec_error(exc: ValidationError, doc: Document, *, vocabulary: Iterable[str] = ()) -> SpecError:
    """One SpecError for a ValidationError: the first problem in front, the others listed.

    Args:
        exc: the pydantic error.
        doc: the document that was validated (file name and line numbers).
        vocabulary: known field names, for "did you mean" hints on unknown fields.
    """
    words = sorted(set(vocabulary))
    problems = []
    for err in exc.errors(include_url=False):
        loc = list(err["loc"])
        error = (err.get("ctx") or {}).get("error")
        if isinstance(error, FieldError):
            loc += list(error.sub)
        loc = [p for p in loc if p not in UNION_TAGS]
        line = doc.line_of(loc)
        text = _describe(err, loc, words)
        problems.append((format_path(loc), f"{text} (line {line})" if line and doc.file else text))
    path, message = problems[0]
    if len(problems) > 1:
        others = [f"{p or '<document>'}: {m}" for p, m in problems[1:_MAX_LISTED_ERRORS + 1]]
        more = len(problems) - 1 - len(others)
        message += "\n  also: " + "\n  also: ".join(others) + (f"\n  ... and {more} more" if more else "")
    return SpecError(message, file=doc.file, path=path or None)


def _describe(err: Mapping[str, Any], loc: list[str | int], words: list[str]) -> str:
    kind, msg, seen = err["type"], err["msg"], err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    if kind == "extra_forbidden":
        name = str(loc[-1]) if loc else "?"
        close = difflib.get_close_matches(name, words, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "remove it or check the spelling"
        return f"unknown field {short_repr(name)}; {hint}"
    if kind == "missing":
        return "this field is required; add it"
    if kind in ("literal_error", "enum"):
        word = seen[:100] if isinstance(seen, str) else short_repr(seen)
        close = difflib.get_close_matches(word, re.findall(r"'([^']+)'", ctx.get("expected", "")), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{short_repr(seen)} is not allowed; {_lower_first(msg)}{hint}"
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        return f"must be {op} {ctx[key]}, got {short_repr(seen)}; change the value"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s), got {ctx.get('actual_length')}; add one"
    if kind == "string_too_short":
        return "must not be empty; write a value"
    if isinstance(seen, bool):
        return (f"{_lower_first(msg)}, got the boolean {seen!r}; YAML reads yes/no/on/off/true/false "
                f"as booleans, so quote the value if you meant text")
    if isinstance(seen, str) and kind in ("int_type", "float_type") and re.fullmatch(r"\s*-?[\d.]+\s*", seen):
        return f"{_lower_first(msg)}, got the text {short_repr(seen)}; write the number without quotes"
    return f"{_lower_first(msg)} (got {short_repr(seen)})"


_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
           "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


# ---------------------------------------------------------------- value checks

def dns_label(value: str) -> str:
    """A DNS-1123 label (names become Kubernetes object names and namespaces)."""
    if len(value) > 63 or not _DNS_LABEL.match(value):
        fixed = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63].strip("-") or "my-name"
        raise ValueError(f"{short_repr(value)} is not a DNS-1123 label (lowercase letters, digits and '-', starting and "
                         f"ending with a letter or digit, at most 63 characters); use e.g. {fixed!r}")
    return value


def label_map(value: dict[str, str]) -> dict[str, str]:
    """Kubernetes label syntax for every key and value (Ray node labels follow it too)."""
    for key, val in value.items():
        prefix, _, name = key.rpartition("/")
        if (prefix and not all(_DNS_LABEL.match(p) for p in prefix.split("."))) or not _LABEL_NAME.match(name) \
                or len(name) > 63:
            raise FieldError([key], f"{short_repr(key)} is not a Kubernetes label key; write [prefix/]name, e.g. "
                                    f"'cuberay.io/pool' or 'zone'")
        if len(val) > 63 or not _LABEL_VALUE.match(val):
            raise FieldError([key], f"{short_repr(val)} is not a label value (letters, digits, '-', '_', '.', at most 63)")
    return value


def import_path(value: str) -> str:
    """``package.module:attribute``."""
    if not _IMPORT_PATH.match(value):
        raise ValueError(f"{short_repr(value)} is not an import path; write 'package.module:function', "
                         f"e.g. 'cuberay.examples.digits:train_func'")
    return value


def module_name(value: str) -> str:
    """A dotted Python module name, ``package.module``."""
    if not _MODULE.match(value):
        raise ValueError(f"{short_repr(value)} is not a Python module name; write 'package.module', e.g. "
                         f"'mycompany.kinds'")
    return value


_RAY_RESOURCE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:/-]{0,62}$")
_RAY_BUILTIN = {"CPU", "GPU", "memory", "object_store_memory"}


def ray_resource_name(value: str) -> str:
    """A custom Ray resource's name (not one Ray counts itself)."""
    if not _RAY_RESOURCE.match(value) or value in _RAY_BUILTIN or value.startswith("node:"):
        raise ValueError(f"{short_repr(value)} is not a custom Ray resource name; write letters, digits and "
                         f"'_.:/-', starting with a letter and not one of Ray's own (CPU, GPU, memory), "
                         f"e.g. 'cuberay_driver'")
    return value


def parse_duration(value: str | int | float) -> float:
    """Seconds from ``3600``, ``"90m"``, ``"2h"``, ``"1d"`` or ``"1h30m"``; must be > 0."""
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif re.fullmatch(r"\s*\d+(\.\d+)?\s*", value):
        seconds = float(value)
    elif re.fullmatch(r"(\s*\d+(?:\.\d+)?\s*[smhd])+\s*", value):
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(value))
    else:
        raise ValueError(f"{short_repr(value)} is not a duration; write seconds (3600) or e.g. '90m', '2h', '1d', '1h30m'")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{short_repr(value)} must be a positive duration, e.g. '2h'")
    return seconds


def duration(value: str | float | None) -> str | float | None:
    """``value`` (kept as written) if it is a duration :func:`parse_duration` reads, or None."""
    if value is not None:
        parse_duration(value)
    return value


def grammar(parse: Callable[[Any], Any], value: Any) -> Any:
    """Run a resources.parse_* function; its SpecError becomes a ValueError pydantic can locate."""
    try:
        return parse(value)
    except SpecError as exc:
        raise ValueError(exc.reason) from None



def env_name(name: object) -> str:
    """An environment variable name."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise FieldError([str(name)], f"{short_repr(name)} is not an environment variable name; use letters, digits "
                                      f"and '_', not starting with a digit")
    return name


def mount(value: str) -> str:
    """A CubeStudio mount ``source(kind):/target`` (kept verbatim)."""
    match = _MOUNT.match(value.strip())
    if not match or match["kind"] not in MOUNT_KINDS:
        hint = "; one mount per list item" if ";" in value else ""
        raise ValueError(f"mount {short_repr(value)} is not 'source(kind):/target' with kind one of "
                         f"{', '.join(MOUNT_KINDS)}, e.g. 'workspace(pvc):/mnt'{hint}")
    return value


# ---------------------------------------------------------------- could it ever fit

def field_of(resource: str) -> str:
    """The spec field a Ray resource comes from: ``GPU`` -> ``gpu``, ``TPU`` -> ``gpu``, ``foo`` -> ``custom.foo``."""
    names = {res.CPU: "cpu", res.MEMORY: "memory", res.RDMA: "rdma", **{r: "gpu" for r in res.CARD_RESOURCES}}
    return names.get(resource, f"custom.{resource}")


def amount_text(resource: str, value: float) -> str:
    """``2Gi`` for memory, ``4`` or ``0.5`` otherwise."""
    return format_memory(value) if resource == res.MEMORY else f"{value:g}"


def over_text(over: Mapping[str, tuple[float, float]]) -> str:
    """``cpu 8 > 6, gpu 4 > 2`` from ``Resources.exceeding``."""
    return ", ".join(f"{field_of(k)} {amount_text(k, a)} > {amount_text(k, b)}" for k, (a, b) in over.items())
