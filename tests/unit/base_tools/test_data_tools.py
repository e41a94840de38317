"""json-query, text-transform, wait and self-restart. Arguments are validated against the
export's schema from goondan.yaml first, as the executor does."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from bundles.sdk import ToolFailed

from .conftest import BASE, FakeContext, call, load_tool

SCHEMAS = {
    (doc["metadata"]["name"], export["name"]): export["parameters"]
    for doc in yaml.safe_load_all((BASE / "goondan.yaml").read_text())
    if doc["kind"] == "Tool"
    for export in doc["spec"]["exports"]
}
MODULES = {
    name: load_tool(f"tools/{name.replace('-', '_')}.py")
    for name in ("json-query", "text-transform", "wait", "self-restart")
}


async def run(ctx: FakeContext, full_name: str, args: dict[str, Any]) -> Any:
    tool, export = full_name.split("__", 1)
    Draft202012Validator(SCHEMAS[(tool, export)]).validate(args)
    async with asyncio.timeout(10):
        return await call(MODULES[tool], export, ctx, args)


async def fails(ctx: FakeContext, full_name: str, args: dict[str, Any]) -> ToolFailed:
    with pytest.raises(ToolFailed) as info:
        await run(ctx, full_name, args)
    return info.value


DATA = {
    "users": [
        {"name": "ann", "email": "a@x", "tags": ["x", "y"], "odd key": 1},
        {"name": "bob", "email": "b@x", "tags": ["z"]},
    ],
    "meta": {"total": 2, "page": {"n": 1}},
}


# -- json-query ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "result", "found"),
    [
        ("$.users[0].name", "ann", True),
        ("users[-1].email", "b@x", True),
        (".meta.page.n", 1, True),
        ('users[0]["odd key"]', 1, True),
        ("users[0]['odd key']", 1, True),
        ("users[*].name", ["ann", "bob"], True),
        ("users[*].tags[*]", ["x", "y", "z"], True),
        ("users[0:1].name", ["ann"], True),
        ("meta.*", [2, {"n": 1}], True),
        ("$", DATA, True),
        ("users[5].name", None, False),
        ("users[*].missing", [], False),
        ("meta.total.deeper", None, False),
        # JSONPath (RFC 9535) beyond the short form
        ("$..n", [1], True),
        ("$.users[?@.name == 'bob'].email", ["b@x"], True),
        ("$.users[?length(@.tags) > 1].name", ["ann"], True),
        ("$.users[::-1].name", ["bob", "ann"], True),
        ("$['meta']['total']", 2, True),
    ],
)
async def test_query_paths(ctx: FakeContext, path: str, result: Any, found: bool) -> None:
    out = await run(ctx, "json-query__query", {"data": DATA, "path": path})
    assert out == {"result": result, "found": found}


async def test_query_accepts_json_text_and_reports_bad_input(ctx: FakeContext) -> None:
    out = await run(ctx, "json-query__query", {"data": '{"a": [1, 2]}', "path": "a[1]"})
    assert out["result"] == 2
    assert (await fails(ctx, "json-query__query", {"data": "{nope", "path": "a"})).code == (
        "E_TOOL_QUERY_INVALID"
    )
    for bad in ("a.", "a[", "a[x]", "[1", "$$", "$[?@.a ==]", "$.a" * 600):
        error = await fails(ctx, "json-query__query", {"data": DATA, "path": bad})
        assert error.code == "E_TOOL_QUERY_INVALID"


@pytest.mark.parametrize(
    "path",
    ["$" + "[?(" * 300 + "@" + ")]" * 300, "$[?" + "!" * 990 + "@]", "$[?" + "(" * 498 + "@]"],
    ids=["too-long", "negations", "parentheses"],
)
async def test_hostile_paths_are_coded_errors(ctx: FakeContext, path: str) -> None:
    error = await fails(ctx, "json-query__query", {"data": DATA, "path": path})
    assert error.code == "E_TOOL_QUERY_INVALID"


async def test_long_paths_within_the_limit_answer(ctx: FakeContext) -> None:
    for path in ("$" + "[0]" * 333, "$[?" + "(" * 300 + "@" + ")" * 300 + "]"):
        out = await run(ctx, "json-query__query", {"data": {"a": [[1]]}, "path": path})
        assert out["found"] is (path.startswith("$[?"))


async def test_descendants_of_deeply_nested_data_are_a_coded_error(ctx: FakeContext) -> None:
    deep: list[Any] = []
    inner = deep
    for _ in range(500):
        inner.append([])
        inner = inner[0]
    error = await fails(ctx, "json-query__query", {"data": deep, "path": "$..*"})
    assert error.code == "E_TOOL_QUERY_INVALID"
    assert error.suggestion is not None


async def test_pick_count_flatten(ctx: FakeContext) -> None:
    picked = await run(ctx, "json-query__pick", {"data": DATA, "path": "users", "keys": ["name"]})
    assert picked["result"] == [{"name": "ann"}, {"name": "bob"}]
    one = await run(ctx, "json-query__pick", {"data": DATA["meta"], "keys": ["total", "nope"]})
    assert one["result"] == {"total": 2}
    assert (await run(ctx, "json-query__count", {"data": DATA, "path": "users"}))["count"] == 2
    assert (await run(ctx, "json-query__count", {"data": '"abc"'}))["count"] == 3
    assert (await run(ctx, "json-query__count", {"data": DATA, "path": "nope"}))["count"] == 0
    flat = await run(ctx, "json-query__flatten", {"data": [1, [2, [3, [4]]]]})
    assert flat["result"] == [1, 2, [3, [4]]]
    deep = await run(ctx, "json-query__flatten", {"data": [1, [2, [3, [4]]]], "depth": -1})
    assert deep["result"] == [1, 2, 3, 4]
    obj = await run(ctx, "json-query__flatten", {"data": DATA["meta"], "depth": -1})
    assert obj["result"] == {"total": 2, "page.n": 1}


async def test_pick_count_flatten_refuse_the_wrong_types(ctx: FakeContext) -> None:
    assert (await fails(ctx, "json-query__pick", {"data": 3, "keys": ["a"]})).code == (
        "E_TOOL_INVALID_ARGS"
    )
    assert (await fails(ctx, "json-query__count", {"data": 3})).code == "E_TOOL_INVALID_ARGS"
    assert (await fails(ctx, "json-query__flatten", {"data": "3"})).code == "E_TOOL_INVALID_ARGS"


# -- text-transform ------------------------------------------------------------------------


async def test_replace_literal_regex_count_and_case(ctx: FakeContext) -> None:
    out = await run(
        ctx, "text-transform__replace", {"text": "a.b.c", "find": ".", "replacement": "\\1"}
    )
    assert out == {"text": "a\\1b\\1c", "replacements": 2}
    out = await run(
        ctx,
        "text-transform__replace",
        {"text": "x=1, y=22", "find": r"(\w)=(\d+)", "replacement": r"\2:\1", "regex": True},
    )
    assert out["text"] == "1:x, 22:y"
    out = await run(
        ctx,
        "text-transform__replace",
        {"text": "Aa aA", "find": "aa", "replacement": "-", "ignoreCase": True, "count": 1},
    )
    assert out == {"text": "- aA", "replacements": 1}
    bad = await fails(ctx, "text-transform__replace", {"text": "x", "find": "(", "regex": True})
    assert bad.code == "E_TOOL_QUERY_INVALID"
    group = {"text": "x", "find": "x", "replacement": r"\9", "regex": True}
    assert (await fails(ctx, "text-transform__replace", group)).code == "E_TOOL_QUERY_INVALID"


async def test_slice_split_join_trim(ctx: FakeContext) -> None:
    assert (await run(ctx, "text-transform__slice", {"text": "hello", "start": 1, "end": -1}))[
        "text"
    ] == "ell"
    lines = await run(
        ctx, "text-transform__slice", {"text": "a\nb\nc\n", "start": -2, "unit": "lines"}
    )
    assert lines == {"text": "b\nc\n", "total": 3}
    assert (await run(ctx, "text-transform__split", {"text": " a  b\tc "}))["parts"] == [
        "a",
        "b",
        "c",
    ]
    csv = {"text": "a, b,,c", "separator": ",", "trim": True, "removeEmpty": True}
    assert (await run(ctx, "text-transform__split", csv))["parts"] == ["a", "b", "c"]
    rx = {"text": "a1b22c", "separator": r"\d+", "regex": True, "maxSplit": 1}
    assert (await run(ctx, "text-transform__split", rx))["parts"] == ["a", "b22c"]
    joined = await run(ctx, "text-transform__join", {"parts": ["a", "b"], "separator": ", "})
    assert joined == {"text": "a, b"}
    assert (await run(ctx, "text-transform__trim", {"text": "  x  ", "side": "start"}))[
        "text"
    ] == "x  "
    assert (await run(ctx, "text-transform__trim", {"text": "--x--", "characters": "-"}))[
        "text"
    ] == "x"


@pytest.mark.parametrize(
    ("to", "expected"),
    [
        ("snake", "http_server_error_code"),
        ("kebab", "http-server-error-code"),
        ("camel", "httpServerErrorCode"),
        ("pascal", "HttpServerErrorCode"),
        ("constant", "HTTP_SERVER_ERROR_CODE"),
        ("upper", "HTTPSERVER ERROR-CODE"),
        ("lower", "httpserver error-code"),
    ],
)
async def test_case(ctx: FakeContext, to: str, expected: str) -> None:
    out = await run(ctx, "text-transform__case", {"text": "HTTPServer error-code", "to": to})
    assert out["text"] == expected


async def test_text_over_the_limit_is_refused(ctx: FakeContext) -> None:
    small = replace(ctx, config={"maxTextChars": 5})
    error = await fails(small, "text-transform__trim", {"text": "x" * 6})
    assert error.code == "E_TOOL_INVALID_ARGS"


# -- wait and self-restart -----------------------------------------------------------------


async def test_wait_is_bounded(ctx: FakeContext) -> None:
    out = await run(ctx, "wait__wait", {"seconds": 0})
    assert out["waitedMs"] >= 0
    tight = replace(ctx, config={"maxSeconds": 1})
    assert (await fails(tight, "wait__wait", {"seconds": 2})).code == "E_TOOL_INVALID_ARGS"


class RestartingRuntime:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def restart(self, reason: str) -> dict[str, Any]:
        self.reasons.append(reason)
        return {"scheduled": True}


async def test_self_restart_asks_the_runtime(ctx: FakeContext) -> None:
    runtime = RestartingRuntime()
    out = await run(replace(ctx, runtime=runtime), "self-restart__request", {"reason": "reload"})
    assert out == {"requested": True, "reason": "reload", "orchestrator": {"scheduled": True}}
    assert runtime.reasons == ["reload"]


async def test_self_restart_without_an_orchestrator(ctx: FakeContext) -> None:
    error = await fails(ctx, "self-restart__request", {})
    assert error.code == "E_AGENT_NOT_CONNECTED"
