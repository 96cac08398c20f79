"""Reading spec files: a path, YAML text or a mapping becomes documents, within limits.

YAML that would silently mean something else (duplicate keys) is refused, and so
is input that would exhaust time or memory before any field is checked: files
over ``MAX_SPEC_BYTES``, documents that expand (through aliases) to more than
``MAX_EXPANDED_NODES`` values, nesting deeper than ``MAX_DEPTH``, recursive
aliases. Each refusal is a :class:`SpecError` (exit 2) that says the rule.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from cuberay.errors import SpecError

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 2, 4, 4, 4, 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 70


def short_repr(value: Any, limit: int = 80) -> str:
    """A value as it appears in an error: bounded however large it is (reprlib never walks all of it)."""
    shown = _REPR.repr(value)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


MAX_SPEC_BYTES = 2**20            # 1 MiB, checked before the file is read
MAX_EXPANDED_NODES = 100_000      # values after expanding aliases, counted while composing
MAX_DEPTH = 64                    # nesting levels (the YAML composer and pydantic recurse per level)


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


def require_kind(doc: Document, kind: str) -> Mapping[str, Any]:
    """The document's mapping if its ``kind`` is ``kind`` (a Platform, a Pipeline), else a SpecError naming it."""
    data = require_mapping(doc)
    if data.get("kind") != kind:
        raise SpecError(f"kind is {data.get('kind')!r}; a {kind.lower()} file has kind: {kind}", file=doc.file,
                        path="kind")
    return data


