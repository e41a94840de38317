"""Registry, composable toolsets, catalog items, schema validation and the result mapping."""

from __future__ import annotations

from typing import Any

import pytest

from agent_process.catalog import CatalogBuilder
from agent_process.registry import (
    SourceKind,
    ToolEntry,
    ToolOrigin,
    ToolRegistry,
    ToolRegistryError,
)
from agent_process.results import (
    ResultStatus,
    ToolResult,
    result_from_exception,
    truncate_message,
)
from agent_process.schema import ArgsValidator, SchemaInvalid
from agent_process.toolsets import FilteredToolset, FunctionToolset, PrefixedToolset, RenamedToolset
from bundles.sdk import CallDeferred, MiddlewareError, ToolFailed

ORIGIN = ToolOrigin(SourceKind.EXTENSION, "ext", "goondan.yaml:4")


def entry(name: str, **kw: Any) -> ToolEntry:
    return ToolEntry(name=name, handler=print, is_async=False, origin=ORIGIN, **kw)


def test_wrappers_compose_prefix_filter_and_rename() -> None:
    base = FunctionToolset([entry("read"), entry("write"), entry("delete")])
    kept = FilteredToolset(base, lambda e: e.name != "delete")
    renamed = RenamedToolset(kept, {"write": "save"})
    names = [e.name for e in PrefixedToolset(renamed, "fs")]
    assert names == ["fs__read", "fs__save"]
    assert [e.name for e in base] == ["read", "write", "delete"]  # wrappers copy, never edit


@pytest.mark.parametrize("bad", ["has__sep", "1digit", "sp ace", ""])
def test_bad_export_names_are_refused_with_the_rule(bad: str) -> None:
    with pytest.raises(ToolRegistryError, match="must match") as caught:
        FunctionToolset([entry(bad)])
    assert caught.value.code == "E_TOOL_LOAD"


def test_full_names_over_64_characters_are_refused() -> None:
    with pytest.raises(ToolRegistryError, match="over the 64") as caught:
        ToolRegistry.build([PrefixedToolset([entry("x" * 60)], "long")])
    assert "shorten" in caught.value.message


def test_registering_the_same_name_twice_in_one_source_is_a_conflict() -> None:
    toolset = FunctionToolset([entry("a")])
    with pytest.raises(ToolRegistryError, match="twice") as caught:
        toolset.add(entry("a"))
    assert caught.value.code == "E_TOOL_NAME_CONFLICT"


def test_catalog_items_record_their_source_and_each_step_gets_fresh_copies() -> None:
    registry = ToolRegistry.build(
        [
            [entry("ext__shown", description="d")],
            [entry("ext__hidden", visible=False)],
            [
                ToolEntry(
                    name="cfg__t",
                    handler=print,
                    is_async=False,
                    origin=ToolOrigin(SourceKind.CONFIG, "cfg"),
                )
            ],
        ]
    )
    catalog = CatalogBuilder(registry)
    first = catalog.build()
    assert [(i.name, i.source_kind, i.source_name) for i in first] == [
        ("ext__shown", "extension", "ext"),
        ("cfg__t", "config", "cfg"),
    ]
    first[0].description = "edited by middleware"
    assert catalog.build()[0].description == "d"
    assert catalog.item("ext__hidden").name == "ext__hidden"
    with pytest.raises(KeyError):
        catalog.item("nope__x")


SCHEMA_2020 = {
    "type": "object",
    "$defs": {"pos": {"type": "integer", "minimum": 1}},
    "properties": {
        "line": {"$ref": "#/$defs/pos"},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]},
        "card": {"type": "string"},
        "cvv": {"type": "string"},
    },
    "dependentRequired": {"card": ["cvv"]},
    "unevaluatedProperties": False,
}


@pytest.mark.parametrize(
    ("args", "valid"),
    [
        ({"line": 3, "pair": ["a", 1]}, True),
        ({"line": 0}, False),
        ({"pair": [1, 1]}, False),
        ({"card": "4111"}, False),
        ({"card": "4111", "cvv": "123"}, True),
        ({"other": 1}, False),
        ([], False),
    ],
)
def test_draft_2020_12_keywords_are_enforced(args: Any, valid: bool) -> None:
    validator = ArgsValidator("t__x", SCHEMA_2020)
    if valid:
        validator.validate(args)
        return
    with pytest.raises(ToolFailed) as caught:
        validator.validate(args)
    assert caught.value.code == "E_TOOL_INVALID_ARGS"
    assert "allowed keys: line, pair, card, cvv" in caught.value.message


def test_invalid_schema_is_refused_at_load() -> None:
    with pytest.raises(SchemaInvalid, match="at properties/a"):
        ArgsValidator("t__x", {"type": "object", "properties": {"a": {"type": 5}}})


@pytest.mark.parametrize(
    ("message", "limit", "expected"),
    [
        ("short", 20, "short"),
        ("x" * 30, 30, "x" * 30),
        ("x" * 31, 30, "x" * 15 + "... (truncated)"),
        ("x" * 31, 10, "... (trunc"),
        ("x" * 5, 0, ""),
    ],
)
def test_truncation_keeps_the_suffix_inside_the_limit(
    message: str, limit: int, expected: str
) -> None:
    assert truncate_message(message, limit) == expected
    assert len(truncate_message(message, limit)) <= max(limit, 0)


def test_one_function_maps_every_exception_to_data() -> None:
    plain = result_from_exception(OSError(), 100)
    assert plain.error is not None and (plain.error.code, plain.error.message) == (
        "E_TOOL",
        "OSError",
    )
    coded = result_from_exception(ToolFailed("m" * 50, code="E_X", suggestion="s"), 20)
    assert coded.error is not None and coded.error.code == "E_X" and len(coded.error.message) == 20
    mw = result_from_exception(MiddlewareError("denied", code="E_TOOL"), 100)
    assert mw.error is not None and mw.error.name == "MiddlewareError"
    deferred = result_from_exception(CallDeferred("cal.get", {"a": 1}, "wait"), 100)
    assert deferred.status is ResultStatus.PENDING and deferred.deferred is not None
    assert deferred.deferred.method == "cal.get"


def test_model_text_never_contains_the_deferred_marker() -> None:
    result = ToolResult(status=ResultStatus.OK, output={"a": 1})
    assert result.to_model_text() == '{"status":"ok","output":{"a":1}}'
