"""One YAML file -> its documents as plain data, with the line of every field.

Safe loading only. PyYAML composes the node graph (anchors become shared nodes), then this
module builds the Python values itself so that it can (a) record the 1-based line of every
mapping key and sequence item by field path, (b) refuse duplicate keys, and (c) bound the work:
every visited node costs one unit of a per-document budget, so an alias bomb ("billion laughs")
or a self-referencing anchor ends in a coded error instead of exhausting memory.

libyaml's own composer recurses in C and crashes the interpreter on deeply nested flow
collections, so only libyaml's event parser (an explicit state stack) is used, under PyYAML's
Python composer, which raises RecursionError instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from bundles.diagnostics import Diagnostic, FieldPath, format_location
from protocol.errors import ErrorCode

MAX_FILE_BYTES = 1024 * 1024
MAX_DOCUMENTS = 100
MAX_NODES_PER_DOCUMENT = 100_000
"""Nodes visited after alias expansion; a real bundle document has a few hundred."""
MAX_DEPTH = 64

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"

LineMap = dict[FieldPath, int]


@dataclass(frozen=True, slots=True)
class YamlDocument:
    index: int
    """0-based position of the document in its file (empty documents count)."""
    line: int
    data: Any
    lines: LineMap

    def line_of(self, path: FieldPath) -> int:
        """The line of `path`, or of its closest recorded parent."""
        for end in range(len(path), 0, -1):
            found = self.lines.get(path[:end])
            if found is not None:
                return found
        return self.line


class YamlFileError(Exception):
    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(str(diagnostic))
        self.diagnostic = diagnostic


class _PySafeLoader(yaml.SafeLoader):
    pass


def _loader_class() -> type[Any]:
    try:  # libyaml scans and parses ~8x faster; composition stays in Python (see module doc)
        from yaml._yaml import CParser
    except ImportError:  # pragma: no cover - PyYAML built without libyaml
        return _PySafeLoader

    class _FastSafeLoader(Composer, CParser, SafeConstructor, Resolver):
        """libyaml's event parser (no recursion) + PyYAML's Python composer and safe constructor."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return _FastSafeLoader


LineLoader = _loader_class()
"""Safe loading only: the standard YAML tags (SafeConstructor); values are built by `_Builder`."""


class _Stop(Exception):
    def __init__(
        self, message: str, line: int, code: ErrorCode = ErrorCode.E_CONFIG_PARSE_ERROR
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.code = code


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


class _Builder:
    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.lines: LineMap = {}
        self.budget = MAX_NODES_PER_DOCUMENT

    def build(self, node: Node, path: FieldPath, depth: int) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise _Stop(
                f"document expands to more than {MAX_NODES_PER_DOCUMENT} nodes "
                "(anchors/aliases multiply it); write the values out or simplify",
                _line(node),
            )
        if depth > MAX_DEPTH:
            raise _Stop(
                f"nested deeper than {MAX_DEPTH} levels (or a self-referencing anchor)", _line(node)
            )
        if isinstance(node, ScalarNode):
            return self.loader.construct_object(node)
        if isinstance(node, SequenceNode):
            return self._sequence(node, path, depth)
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        raise _Stop(f"unsupported YAML node {type(node).__name__}", _line(node))

    def _sequence(self, node: SequenceNode, path: FieldPath, depth: int) -> list[Any]:
        if node.tag != _SEQ_TAG:
            raise _Stop(f"unsupported tag {node.tag!r} on a sequence", _line(node))
        out: list[Any] = []
        for i, item in enumerate(node.value):
            self.lines.setdefault((*path, i), _line(item))
            out.append(self.build(item, (*path, i), depth + 1))
        return out

    def _mapping(self, node: MappingNode, path: FieldPath, depth: int) -> dict[Any, Any]:
        if node.tag != _MAP_TAG:
            raise _Stop(f"unsupported tag {node.tag!r} on a mapping", _line(node))
        merged: dict[Any, Any] = {}
        explicit: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.update(self._merge_source(value_node, path, depth))
                continue
            key = self._key(key_node)
            if key in explicit:
                raise _Stop(f"duplicate key {key!r} in the same mapping", _line(key_node))
            child = (*path, key if isinstance(key, str | int) else str(key))
            self.lines[child] = _line(key_node)
            explicit[key] = self.build(value_node, child, depth + 1)
        # YAML merge keys (`<<: *base`) never override keys written in the mapping itself.
        merged.update(explicit)
        return merged

    def _key(self, key_node: Node) -> str | int | float | bool | None:
        if not isinstance(key_node, ScalarNode):
            raise _Stop("mapping keys must be plain scalars", _line(key_node))
        self.budget -= 1
        key = self.loader.construct_object(key_node)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise _Stop(f"unsupported mapping key {key!r}", _line(key_node))
        return key

    def _merge_source(self, node: Node, path: FieldPath, depth: int) -> dict[Any, Any]:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        out: dict[Any, Any] = {}
        # Earlier sources win over later ones in a `<<: [*a, *b]` list (YAML merge spec).
        for source in reversed(sources):
            if not isinstance(source, MappingNode):
                raise _Stop("`<<` merge needs a mapping or a list of mappings", _line(source))
            value = self.build(source, path, depth + 1)
            out.update(value)
        return out


def read_text(file: Path, display: str) -> str:
    """The file's text, refusing files over the size limit before reading them."""
    try:
        with file.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise YamlFileError(
            Diagnostic(ErrorCode.E_CONFIG_NOT_FOUND, f"cannot read file: {exc.strerror}", display)
        ) from exc
    if len(raw) > MAX_FILE_BYTES:
        raise YamlFileError(
            Diagnostic(
                ErrorCode.E_CONFIG_FILE_TOO_LARGE,
                f"file is larger than {MAX_FILE_BYTES} bytes",
                display,
                "split the resources over the recognised split files (agents.yaml, tools.yaml...)",
            )
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlFileError(
            Diagnostic(
                ErrorCode.E_CONFIG_PARSE_ERROR,
                f"file is not UTF-8 text (byte {exc.start})",
                display,
                "save the file as UTF-8",
            )
        ) from exc


def parse_documents(text: str, display: str, *, limit: int | None = None) -> list[YamlDocument]:
    """Every non-empty document of `text`; a coded `YamlFileError` for anything unusable."""
    docs: list[YamlDocument] = []
    index = 0
    loader: Any = None
    try:
        loader = LineLoader(text)
        while (limit is None or len(docs) < limit) and loader.check_node():
            if index >= MAX_DOCUMENTS:
                raise _Stop(
                    f"file has more than {MAX_DOCUMENTS} YAML documents",
                    int(loader.peek_event().start_mark.line) + 1,
                    ErrorCode.E_CONFIG_TOO_MANY_DOCUMENTS,
                )
            node = loader.get_node()
            if node is not None and not (isinstance(node, ScalarNode) and node.value == ""):
                builder = _Builder(loader)
                data = builder.build(node, (), 0)
                docs.append(YamlDocument(index, _line(node), data, builder.lines))
            index += 1
    except _Stop as stop:
        raise YamlFileError(
            Diagnostic(stop.code, stop.message, format_location(display, stop.line))
        ) from None
    except yaml.YAMLError as exc:
        raise YamlFileError(_yaml_diagnostic(exc, display)) from None
    except RecursionError:
        raise YamlFileError(
            Diagnostic(
                ErrorCode.E_CONFIG_PARSE_ERROR,
                f"YAML nested too deeply (limit {MAX_DEPTH} levels)",
                display,
            )
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    return docs


def _yaml_diagnostic(exc: yaml.YAMLError, display: str) -> Diagnostic:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = int(mark.line) + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    suggestion = (
        "only the standard YAML tags are accepted; remove the tag"
        if isinstance(exc, yaml.constructor.ConstructorError)
        else "fix the YAML syntax at that line (indentation, quotes, ':' after keys)"
    )
    return Diagnostic(
        ErrorCode.E_CONFIG_PARSE_ERROR, message, format_location(display, line), suggestion
    )


def load_file(file: Path, display: str, *, limit: int | None = None) -> list[YamlDocument]:
    """The documents of `file` (only the first `limit` non-empty ones if given)."""
    return parse_documents(read_text(file, display), display, limit=limit)


@dataclass(frozen=True, slots=True)
class SourceDoc:
    """Where a resource was written: the file as shown to the user and its parsed document."""

    display: str
    doc: YamlDocument

    def where(self, path: FieldPath = ()) -> str:
        """`goondan.yaml:14 spec.tools[1].ref` for a field of this document."""
        return format_location(self.display, self.doc.line_of(path), path)
