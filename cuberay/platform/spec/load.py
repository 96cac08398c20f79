"""Reading spec files and reporting their errors; the value checks the models use.

The models (``common``, ``platform_file``, ``workload``, ``train``, ``tune``,
``serve``, ``jobs``) import this module; it imports none of them. It

- turns a path, YAML text or a mapping into documents, refusing what YAML
  would silently accept (duplicate keys) and what would exhaust memory
  (oversized files, alias bombs, deep nesting);
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
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import yaml
from pydantic import BaseModel, ValidationError

import cuberay.platform.spec.resources as res
from cuberay.errors import SpecError

# Union tags pydantic puts into error locations; they are not field names.
UNION_TAGS = frozenset({"workers-count", "workers-range"})
_MAX_LISTED_ERRORS = 5
# Limits on what a spec file may be. A spec is a few KiB with a few hundred values; these are far above any
# real spec and far below what exhausts memory or time (a 9-level alias bomb expands to 387 million values).
MAX_SPEC_BYTES = 2**20            # 1 MiB, checked before the file is read
MAX_EXPANDED_NODES = 100_000      # values after expanding aliases, counted while composing
MAX_DEPTH = 64                    # nesting levels (the YAML composer and pydantic recurse per level)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
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


@dataclass(frozen=True)
class Document:
    """One YAML document: its data, the file it came from and its node (for line numbers)."""

    data: Any
    file: str | None = None
    node: yaml.Node | None = None

    def line_of(self, loc: Sequence[str | int]) -> int | None:
        """The 1-based line of the deepest node along ``loc`` (None without a node)."""
        node, line = self.node, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                pair = next(((k, v) for k, v in node.value if getattr(k, "value", None) == str(part)), None)
                if pair is None:
                    break
                line, node = pair[0].start_mark.line + 1, pair[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        if line is None and self.node is not None:
            line = self.node.start_mark.line + 1
        return line


_SCALAR_KEYS = (str, int, float, bool, type(None))


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, alias bombs and deep nesting.

    Composing keeps the alias graph small (an alias is a reference), so sizes are
    counted there: each node's expanded size is 1 + its children's, computed once
    per node, and the load stops as soon as one exceeds ``MAX_EXPANDED_NODES`` -
    long before anything expands the graph.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._sizes: dict[int, int] = {}  # id(node) -> expanded size; nodes stay alive in the graph

    def fetch_flow_collection_start(self, token_class: type) -> None:
        # The scanner looks ahead over every open "[" or "{" (quadratic in their number): stop it here.
        if self.flow_level >= MAX_DEPTH:
            raise SpecError(f"the YAML is nested deeper than {MAX_DEPTH} levels (line {self.line + 1}); a spec "
                            f"needs a handful: flatten it")
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        line = self.peek_event().start_mark.line + 1
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:
                raise SpecError(f"the alias at line {line} refers to the node that contains it (a loop); "
                                f"a spec is a tree: write the values out")
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise SpecError(f"the YAML is nested deeper than {MAX_DEPTH} levels (line {line}); a spec needs a "
                            f"handful: flatten it")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._sizes[id(child)] for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
        else:
            size = 1
        if size > MAX_EXPANDED_NODES:
            how = " once its aliases (*name) are expanded" if self._aliases else ""
            fix = "write repeated values out once or use fewer aliases" if self._aliases else "split the file"
            raise SpecError(f"the YAML holds more than {MAX_EXPANDED_NODES:,} values{how} (at line {line}); "
                            f"a spec needs a few hundred: {fix}")
        self._sizes[id(node)] = size
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, _SCALAR_KEYS) and key in seen:
                raise SpecError(
                    f"duplicate key {short_repr(key)} at line {line} (first at line {seen[key]}); "
                    f"YAML would keep only the last one, so keep one and delete the other"
                )
            if isinstance(key, _SCALAR_KEYS):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _looks_like_text(source: str) -> bool:
    return "\n" in source or ": " in source or source.lstrip().startswith(("{", "---"))


def read_documents(source: str | Path | Mapping[str, Any]) -> list[Document]:
    """Read a path, YAML text or an already-parsed mapping into documents.

    A ``str`` is YAML text when it has a newline, ``": "`` or starts with
    ``{``/``---``; otherwise it is a path. Empty documents are skipped.

    Raises:
        SpecError: the file is missing or unreadable, the YAML is invalid, or
            a key appears twice in one mapping.
    """
    if isinstance(source, Mapping):
        return [Document(dict(source))]
    if isinstance(source, str) and _looks_like_text(source):
        if len(source) > MAX_SPEC_BYTES or len(source.encode("utf-8")) > MAX_SPEC_BYTES:
            raise SpecError(f"the text is {len(source.encode('utf-8')) / 2**20:.1f} MiB; {_SIZE_RULE}")
        return _parse(source, None)
    text = _read_bounded(Path(source))
    docs = _parse(text, str(source))
    if not docs:
        raise SpecError("the file holds no YAML document; write apiVersion, kind, metadata and spec",
                        file=str(source))
    return docs


_SIZE_RULE = (f"a spec is at most {MAX_SPEC_BYTES // 2**20} MiB (a few KiB is usual): "
              f"split it or remove what is not a spec")


def _read_bounded(path: Path) -> str:
    """The file's text, refusing more than MAX_SPEC_BYTES before reading it all (pipes included)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
            if len(raw) > MAX_SPEC_BYTES:
                size = path.stat().st_size if path.is_file() else 0
                seen = f"{size / 2**20:.1f} MiB" if size else f"more than {MAX_SPEC_BYTES // 2**20} MiB"
                raise SpecError(f"the file is {seen}; {_SIZE_RULE}", file=str(path))
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError("no such file; check the path", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the file ({exc}); pass a UTF-8 YAML file", file=str(path)) from None


def _parse(text: str, file: str | None) -> list[Document]:
    loader = _StrictLoader(text)
    docs: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            data = loader.construct_document(node)
            if data is not None:
                docs.append(Document(data, file, node))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise SpecError(
            f"invalid YAML{where}: {problem}; check the indentation, the colons and the quoting there",
            file=file,
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid YAML: {exc}; fix the syntax", file=file) from None
    except SpecError as exc:
        raise SpecError(exc.reason, file=file) from None
    finally:
        loader.dispose()
    return docs


def one_document(docs: list[Document], what: str) -> Document:
    """The only document of a file, or a SpecError saying how many there were."""
    if len(docs) != 1:
        raise SpecError(
            f"expected one {what} document, found {len(docs)}; put each in its own file "
            f"(or load them with load_specs)",
            file=docs[0].file if docs else None,
        )
    return docs[0]


def require_mapping(doc: Document) -> Mapping[str, Any]:
    """The document's data if it is a mapping, else a SpecError saying what was found."""
    if not isinstance(doc.data, Mapping):
        raise SpecError(
            f"the document is a {type(doc.data).__name__}, not a mapping; a spec starts with "
            f"apiVersion, kind, metadata and spec keys",
            file=doc.file,
        )
    return doc.data


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
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def spec_error(exc: ValidationError, doc: Document, *, vocabulary: Iterable[str] = (),
               strip_first: bool = False) -> SpecError:
    """One SpecError for a ValidationError: the first problem in front, the others listed.

    Args:
        exc: the pydantic error.
        doc: the document that was validated (file name and line numbers).
        vocabulary: known field names, for "did you mean" hints on unknown fields.
        strip_first: drop the first location element (the tag of a discriminated union).
    """
    words = sorted(set(vocabulary))
    problems = []
    for err in exc.errors(include_url=False):
        loc = list(err["loc"])[1 if strip_first else 0:]
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


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 2, 4, 4, 4, 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 70


def short_repr(value: Any, limit: int = 80) -> str:
    """A value as it appears in an error: bounded however large it is (reprlib never walks all of it)."""
    shown = _REPR.repr(value)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


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
    return res.format_memory(value) if resource == res.MEMORY else f"{value:g}"


def over_text(over: Mapping[str, tuple[float, float]]) -> str:
    """``cpu 8 > 6, gpu 4 > 2`` from ``Resources.exceeding``."""
    return ", ".join(f"{field_of(k)} {amount_text(k, a)} > {amount_text(k, b)}" for k, (a, b) in over.items())
