"""One YAML file -> its documents as plain data, with the line of every field.

Safe loading only. PyYAML composes the node graph (anchors become shared nodes), then this
module builds the Python values itself so that it can (a) record the 1-based line of every
mapping key and sequence item by field path, (b) refuse duplicate keys, and (c) bound the work:
every visited node costs one unit of a per-document budget, so an alias bomb ("billion laughs")
or a self-referencing anchor ends in a coded error instead of exhausting memory.

libyaml's own composer recurses in C and crashes the interpreter on deeply nested flow
collections, so only libyaml's event parser (an explicit state stack) is used, under PyYAML's
Python composer. Nesting is bounded at `MAX_DEPTH` by `_DepthGuard` while composing and by
`_Builder` while building (a self-referencing anchor nests without end); both raise `_too_deep`.
libyaml has a nesting limit of its own (1000 flow levels) that its scanner can reach ahead of the
composer on one line of openers (`[[[[...`); `_yaml_error` reports that case as ours too, found
by nesting rather than by libyaml's wording.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError
from yaml.resolver import Resolver
from yaml.tokens import (
    FlowMappingEndToken,
    FlowMappingStartToken,
    FlowSequenceEndToken,
    FlowSequenceStartToken,
)

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


class _Stop(Exception):
    def __init__(
        self,
        message: str,
        line: int,
        code: ErrorCode = ErrorCode.E_CONFIG_PARSE_ERROR,
        suggestion: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.code = code
        self.suggestion = suggestion


FIX_SYNTAX = "fix the YAML syntax at that line (indentation, quotes, ':' after keys)"
FIX_TAG = "only the standard YAML tags are accepted; remove the tag"
FIX_DEPTH = "flatten the structure, or remove the alias that refers to its own anchor"
FIX_SIZE = "write the repeated values out, or simplify the anchors and aliases"
FIX_DUPLICATE = "keep one of the two keys"
FIX_KEY = "write the key as a plain string"
FIX_MERGE = "point `<<` at an anchored mapping (`<<: *base`) or a list of them"
FIX_CHARACTER = "remove the control character (a bundle file is printable UTF-8 text)"


def _too_deep(line: int) -> _Stop:
    return _Stop(
        f"nested deeper than {MAX_DEPTH} levels (or a self-referencing anchor)",
        line,
        suggestion=FIX_DEPTH,
    )


class _DepthGuard(Composer):
    """PyYAML's composer, refusing nodes deeper than `MAX_DEPTH` before it recurses into them."""

    _depth = 0
    peek_event: Callable[[], Any]  # the parser's, beside this class in the loader

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self._depth >= MAX_DEPTH + 1:
            raise _too_deep(int(self.peek_event().start_mark.line) + 1)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _PySafeLoader(_DepthGuard, yaml.SafeLoader):
    pass


def _loader_class() -> type[Any]:
    try:  # libyaml scans and parses in C; composition stays in Python (see module doc)
        from yaml._yaml import CParser
    except ImportError:  # pragma: no cover - PyYAML built without libyaml
        return _PySafeLoader

    class _FastSafeLoader(_DepthGuard, CParser, SafeConstructor, Resolver):
        """libyaml's event parser (no recursion) + PyYAML's Python composer and safe constructor."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _DepthGuard.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return _FastSafeLoader


LineLoader = _loader_class()
"""Safe loading only: the standard YAML tags (SafeConstructor); values are built by `_Builder`."""


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
                "(anchors/aliases multiply it)",
                _line(node),
                suggestion=FIX_SIZE,
            )
        if depth > MAX_DEPTH:
            raise _too_deep(_line(node))
        if isinstance(node, ScalarNode):
            return self.loader.construct_object(node)
        if isinstance(node, SequenceNode):
            return self._sequence(node, path, depth)
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        raise _Stop(f"unsupported YAML node {type(node).__name__}", _line(node))

    def _sequence(self, node: SequenceNode, path: FieldPath, depth: int) -> list[Any]:
        if node.tag != _SEQ_TAG:
            raise _Stop(
                f"unsupported tag {node.tag!r} on a sequence", _line(node), suggestion=FIX_TAG
            )
        out: list[Any] = []
        for i, item in enumerate(node.value):
            self.lines.setdefault((*path, i), _line(item))
            out.append(self.build(item, (*path, i), depth + 1))
        return out

    def _mapping(self, node: MappingNode, path: FieldPath, depth: int) -> dict[Any, Any]:
        if node.tag != _MAP_TAG:
            raise _Stop(
                f"unsupported tag {node.tag!r} on a mapping", _line(node), suggestion=FIX_TAG
            )
        merged: dict[Any, Any] = {}
        explicit: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.update(self._merge_source(value_node, path, depth))
                continue
            key = self._key(key_node)
            if key in explicit:
                raise _Stop(
                    f"duplicate key {key!r} in the same mapping",
                    _line(key_node),
                    suggestion=FIX_DUPLICATE,
                )
            child = (*path, key if isinstance(key, str | int) else str(key))
            self.lines[child] = _line(key_node)
            explicit[key] = self.build(value_node, child, depth + 1)
        # YAML merge keys (`<<: *base`) never override keys written in the mapping itself.
        merged.update(explicit)
        return merged

    def _key(self, key_node: Node) -> str | int | float | bool | None:
        if not isinstance(key_node, ScalarNode):
            raise _Stop("mapping keys must be plain scalars", _line(key_node), suggestion=FIX_KEY)
        self.budget -= 1
        key = self.loader.construct_object(key_node)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise _Stop(f"unsupported mapping key {key!r}", _line(key_node), suggestion=FIX_KEY)
        return key

    def _merge_source(self, node: Node, path: FieldPath, depth: int) -> dict[Any, Any]:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        out: dict[Any, Any] = {}
        # Earlier sources win over later ones in a `<<: [*a, *b]` list (YAML merge spec).
        for source in reversed(sources):
            if not isinstance(source, MappingNode):
                raise _Stop(
                    "`<<` merge needs a mapping or a list of mappings",
                    _line(source),
                    suggestion=FIX_MERGE,
                )
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
                    "split the resources over the recognised split files",
                )
            node = loader.get_node()
            if node is not None and not (isinstance(node, ScalarNode) and node.value == ""):
                builder = _Builder(loader)
                data = builder.build(node, (), 0)
                docs.append(YamlDocument(index, _line(node), data, builder.lines))
            index += 1
    except _Stop as stop:
        raise YamlFileError(_stop_diagnostic(stop, display)) from None
    except yaml.YAMLError as exc:
        raise YamlFileError(_yaml_error(exc, text, display)) from None
    finally:
        if loader is not None:
            loader.dispose()
    return docs


def _stop_diagnostic(stop: _Stop, display: str) -> Diagnostic:
    return Diagnostic(stop.code, stop.message, format_location(display, stop.line), stop.suggestion)


def _yaml_error(exc: yaml.YAMLError, text: str, display: str) -> Diagnostic:
    """PyYAML's error as ours; libyaml's own nesting limit as our depth diagnostic."""
    if isinstance(exc, ReaderError):
        return _reader_diagnostic(exc, text, display)
    mark = getattr(exc, "problem_mark", None)
    if mark is not None and _flow_nesting_exceeds_limit(text, int(mark.line)):
        return _stop_diagnostic(_too_deep(int(mark.line) + 1), display)
    colon = _missing_colon(exc, text)
    if colon is not None:
        line, key = colon
        return Diagnostic(
            ErrorCode.E_CONFIG_PARSE_ERROR,
            f"invalid YAML: `{key}` has no ':' after it, so the next line's key does not fit",
            format_location(display, line),
            f"write `{key.split()[0]}: ...` (a ':' and a space after the key)",
        )
    return _yaml_diagnostic(exc, display)


def _missing_colon(exc: yaml.YAMLError, text: str) -> tuple[int, str] | None:
    """(1-based line, its text) of the line a "mapping values are not allowed" error really
    means: the scanner stops on the key after a plain `key value` line that lacks its ':'."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None or "mapping values are not allowed" not in str(getattr(exc, "problem", "")):
        return None
    lines = text.splitlines()
    for index in range(min(int(mark.line), len(lines)) - 1, -1, -1):
        before = lines[index].strip()
        if not before or before.startswith("#"):
            continue
        if ":" in before or len(before.split()) < 2 or before.startswith(("-", "[", "{")):
            return None
        return index + 1, before[:80]
    return None


def _reader_diagnostic(exc: ReaderError, text: str, display: str) -> Diagnostic:
    """A character YAML does not allow, at its line: the reader stops at its first one."""
    char = exc.character if isinstance(exc.character, str) else chr(exc.character)
    at = text.find(char)
    line = text.count("\n", 0, at) + 1 if at >= 0 else None
    return Diagnostic(
        ErrorCode.E_CONFIG_PARSE_ERROR,
        f"invalid YAML: character U+{ord(char):04X} is not allowed",
        format_location(display, line),
        FIX_CHARACTER,
    )


def _flow_nesting_exceeds_limit(text: str, last_line: int) -> bool:
    """Whether `[`/`{` nest deeper than `MAX_DEPTH` by the end of 0-based line `last_line`.

    PyYAML's pure-Python scanner has no nesting limit, so it reads past the point where libyaml
    gave up. A file with fewer openers than the limit is answered without scanning.
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.line > last_line:
                return False
            if isinstance(token, FlowSequenceStartToken | FlowMappingStartToken):
                depth += 1
                if depth > MAX_DEPTH:
                    return True
            elif isinstance(token, FlowSequenceEndToken | FlowMappingEndToken):
                depth -= 1
    except yaml.YAMLError:
        return False
    return False


def _yaml_diagnostic(exc: yaml.YAMLError, display: str) -> Diagnostic:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = int(mark.line) + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    suggestion = FIX_TAG if isinstance(exc, yaml.constructor.ConstructorError) else FIX_SYNTAX
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
