"""tool-search in a real agent runtime: the narrowed catalog, search and select through the
model, the catalog as allow-list, the selection persisted across a restart; ranking (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_process.runtime import AgentRuntime
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime, scripted, tool_results, turn

from .conftest import base_resource as base
from .conftest import load_tool

search_ext = load_tool("extensions/tool_search.py")
SEARCH = "tool-search__search"
WAIT = {"name": "wait__wait", "args": {"seconds": 0}}
SCRIPT: list[dict[str, Any]] = [
    {"afterTool": SEARCH, "toolCalls": [WAIT]},
    {"afterTool": "wait__wait", "reply": "waited"},
    {"match": "early", "toolCalls": [WAIT]},
    {
        "match": "find",
        "toolCalls": [{"name": SEARCH, "args": {"query": "pause for seconds", "select": ["wait"]}}],
    },
]


async def runtime(**config: Any) -> AgentRuntime:
    return await make_runtime(
        b.scripted(script=SCRIPT),
        b.agent(tools=["wait", "json-query", "text-transform"], extensions=["tool-search"]),
        base("Tool", "wait"),
        base("Tool", "json-query"),
        base("Tool", "text-transform"),
        base("Extension", "tool-search", **config),
    )


def offered(rt: AgentRuntime) -> list[list[str]]:
    return [[item.name for item in request.tools] for request in scripted(rt).requests]


async def test_search_selects_tools_for_the_next_steps_and_persists() -> None:
    rt = await runtime(alwaysInclude=["text-transform__trim"])
    try:
        early = await turn(rt, "early")
        found = await turn(rt, "find")
        catalogs = offered(rt)
        results = tool_results(rt)
        state = json.loads(rt.paths.extension_state("tool-search").read_text())
    finally:
        await rt.close()
    assert early.outcome is TurnOutcome.COMPLETED
    assert results[0]["error"]["code"] == "E_TOOL_NOT_IN_CATALOG"  # not selected yet
    assert catalogs[0] == ["text-transform__trim", SEARCH]
    search = results[1]["output"]
    assert search["results"][0]["name"] == "wait__wait"
    assert search["selected"] == ["wait__wait"]
    assert "json-query__query" not in search["selected"]
    assert catalogs[3] == ["wait__wait", "text-transform__trim", SEARCH]  # after the search
    assert results[2]["status"] == "ok"
    assert (found.outcome, found.text) == (TurnOutcome.COMPLETED, "waited")
    assert state == {"selected": ["wait__wait"]}

    again = await runtime(alwaysInclude=["text-transform__trim"])
    try:
        await turn(again, "hello")
        restarted = offered(again)
    finally:
        await again.close()
    assert "wait__wait" in restarted[0]  # the selection survived the restart


async def test_reset_each_turn_starts_from_no_selection() -> None:
    rt = await runtime(resetEachTurn=True)
    try:
        await turn(rt, "find")
        await turn(rt, "hello")
        catalogs = offered(rt)
    finally:
        await rt.close()
    assert "wait__wait" in catalogs[1]
    assert catalogs[-1] == [SEARCH]


def test_rank_prefers_name_matches_and_lists_all_with_star() -> None:
    tools = {
        "file-system__read": "Read a text file as numbered lines.",
        "http-fetch__get": "HTTP GET a public URL; the body is text.",
        "bash__exec": "Run a shell command and read its output.",
    }
    assert search_ext.rank("read file", tools, 10) == [
        ("file-system__read", 8),
        ("bash__exec", 1),
    ]
    assert [n for n, _ in search_ext.rank("*", tools, 2)] == ["bash__exec", "file-system__read"]
    assert search_ext.rank("nothing matches", tools, 10) == []


@pytest.mark.parametrize("config", [{"alwaysInclude": "bash"}, {"maxSelected": 0}])
def test_bad_settings_are_refused(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="config"):
        search_ext.Settings(config)
