"""Extensions: register(api, config), the three onions, tools, state across restarts, events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_process.registry import (
    SourceKind,
    ToolEntry,
    ToolOrigin,
    ToolRegistry,
    ToolRegistryError,
)
from agent_process.runtime import StartFailure
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime, scripted, tool_results, turn

CALC = b.tool("calc", "tools/basic.py", [{"name": "echo"}, {"name": "add"}])


def call(tool: str, args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [
        {"match": "go", "toolCalls": [{"name": tool, "args": args or {}}]},
        {"afterTool": "*", "reply": "{last_tool_result}"},
    ]


async def test_three_extensions_wrap_tool_calls_as_an_onion_in_declaration_order() -> None:
    exts = [b.extension(n, "extensions/onion.py", {"label": n}) for n in ("A", "B", "C")]
    rt = await make_runtime(
        b.scripted(script=call("calc__echo", {"x": 1})),
        b.agent(tools=["calc"], extensions=["A", "B", "C"]),
        CALC,
        *exts,
    )
    try:
        await turn(rt, "go")
        output = tool_results(rt)[0]["output"]
    finally:
        await rt.close()
    # way in: A, then B, then C edit args; way out: C wraps first, A last (outermost)
    assert output == {
        "by": "A",
        "inner": {"by": "B", "inner": {"by": "C", "inner": {"x": 1, "trail": ["A", "B", "C"]}}},
    }


async def test_step_middleware_hides_a_tool_from_the_model_and_from_calls() -> None:
    hide = b.extension("hide", "extensions/hide.py", {"hide": ["calc__add"]})
    rt = await make_runtime(
        b.scripted(script=call("calc__add", {"a": 1, "b": 2})),
        b.agent(tools=["calc"], extensions=["hide"]),
        CALC,
        hide,
    )
    try:
        await turn(rt, "go")
        offered = [t.name for t in scripted(rt).requests[0].tools]
        error = tool_results(rt)[0]["error"]
    finally:
        await rt.close()
    assert offered == ["calc__echo"]
    assert error["code"] == "E_TOOL_NOT_IN_CATALOG"
    assert rt.tool_names == ["calc__echo", "calc__add"]  # still in the registry


async def test_extension_tools_are_registered_and_hidden_ones_can_be_added_by_step_middleware() -> (
    None
):
    tools_ext = b.extension("tools_ext", "extensions/tools_ext.py")
    show = b.extension("show", "extensions/hide.py", {"show": ["tools_ext__secret"]})
    script = [
        {
            "match": "go",
            "toolCalls": [
                {"name": "tools_ext__shout", "args": {"text": "hi"}},
                {"name": "tools_ext__secret", "args": {"text": "psst"}},
            ],
        },
        {"afterTool": "*", "reply": "ok"},
    ]
    rt = await make_runtime(
        b.scripted(script=script), b.agent(extensions=["tools_ext", "show"]), tools_ext, show
    )
    try:
        await turn(rt, "go")
        offered = {t.name: t for t in scripted(rt).requests[0].tools}
        results = tool_results(rt)
    finally:
        await rt.close()
    assert list(offered) == ["tools_ext__shout", "tools_ext__secret"]
    assert offered["tools_ext__shout"].source_kind == "extension"
    assert offered["tools_ext__shout"].source_name == "tools_ext"
    assert [r["output"]["text"] for r in results] == ["HI", "PSST"]


def test_tool_name_clash_names_both_sources_and_the_fix() -> None:
    registry = ToolRegistry()
    origin_a = ToolOrigin(SourceKind.CONFIG, "tools_ext", "goondan.yaml:3")
    origin_b = ToolOrigin(SourceKind.EXTENSION, "tools_ext", "goondan.yaml:9")
    registry.add(ToolEntry(name="tools_ext__shout", handler=print, is_async=False, origin=origin_a))
    with pytest.raises(ToolRegistryError) as caught:
        registry.add(
            ToolEntry(name="tools_ext__shout", handler=print, is_async=False, origin=origin_b)
        )
    message = caught.value.message
    assert "Tool 'tools_ext' (goondan.yaml:3)" in message
    assert "Extension 'tools_ext' (goondan.yaml:9)" in message
    assert "rename one of them" in message
    assert caught.value.code == "E_TOOL_NAME_CONFLICT"


async def test_runtime_refuses_to_start_on_a_name_clash() -> None:
    shout_tool = b.tool("tools_ext", "tools/files_toolset.py", [{"name": "read"}])
    tools_ext = b.extension("tools_ext", "extensions/tools_ext.py")
    clash_ext = b.extension("other", "extensions/tools_ext.py")
    # 1) Tool resource and extension share the prefix but not the names: fine
    rt = await make_runtime(
        b.scripted(), b.agent(tools=["tools_ext"], extensions=["tools_ext"]), shout_tool, tools_ext
    )
    await rt.close()
    assert rt.tool_names == ["tools_ext__read", "tools_ext__shout", "tools_ext__secret"]
    # 2) same full name from two sources: coded start failure
    dup = b.tool("other", "tools/basic.py", [{"name": "shout", "deferred": {"method": "m"}}])
    with pytest.raises(StartFailure) as caught:
        await make_runtime(
            b.scripted(), b.agent(tools=["other"], extensions=["other"]), dup, clash_ext
        )
    assert caught.value.error.code == "E_TOOL_NAME_CONFLICT"


async def test_middleware_error_short_circuits_and_a_crash_is_reported_with_the_extension() -> None:
    deny = b.extension(
        "guard", "extensions/deny.py", {"deny": ["calc__add"], "crash": ["calc__echo"]}
    )
    script = [
        {
            "match": "go",
            "toolCalls": [
                {"name": "calc__add", "args": {"a": 1, "b": 1}},
                {"name": "calc__echo", "args": {}},
            ],
        },
        {"afterTool": "*", "reply": "ok"},
    ]
    rt = await make_runtime(
        b.scripted(script=script), b.agent(tools=["calc"], extensions=["guard"]), CALC, deny
    )
    try:
        result = await turn(rt, "go")
        denied, crashed = (r["error"] for r in tool_results(rt))
    finally:
        await rt.close()
    assert result.outcome is TurnOutcome.COMPLETED
    assert denied == {
        "code": "E_TOOL",
        "message": "calc__add is not allowed",
        "name": "MiddlewareError",
        "suggestion": "ask",
    }
    assert crashed["code"] == "E_TOOL_MIDDLEWARE"
    assert "extension 'guard'" in crashed["message"] and "ZeroDivisionError" in crashed["message"]


async def test_extension_state_survives_a_restart_and_events_reach_subscribers() -> None:
    resources = [
        b.scripted(script=call("calc__echo")),
        b.agent(tools=["calc"], extensions=["counter"]),
        CALC,
        b.extension("counter", "extensions/counter.py"),
    ]
    rt = await make_runtime(*resources)
    try:
        await turn(rt, "go")
        await turn(rt, "hello")
        state_file = rt.paths.extension_state("counter")
        saved = json.loads(state_file.read_text())  # written at turn end, before close
        assert saved["turns"] == 2
        assert saved["toolEvents"] == ["tool.called", "tool.completed"]
    finally:
        await rt.close()
    again = await make_runtime(*resources)
    try:
        assert again.extensions[0].state.get()["turns"] == 2
        await turn(again, "third")
    finally:
        await again.close()
    assert json.loads(state_file.read_text())["turns"] == 3
    custom = [json.loads(line) for line in rt.paths.runtime_events_jsonl.read_text().splitlines()]
    ready = [e for e in custom if e["type"] == "counter.ready"]
    assert ready and ready[0]["data"] == {"extension": "counter", "ok": True}


@pytest.mark.parametrize(
    ("entry", "code", "words"),
    [
        ("extensions/bad_init.py", "E_EXT_INIT", ["register() raised ValueError", "token"]),
        ("extensions/no_register.py", "E_EXT_LOAD", ["does not define register"]),
        ("extensions/missing.py", "E_EXT_LOAD", ["does not exist"]),
    ],
)
async def test_extension_load_errors_are_coded(entry: str, code: str, words: list[str]) -> None:
    with pytest.raises(StartFailure) as caught:
        await make_runtime(b.scripted(), b.agent(extensions=["e"]), b.extension("e", entry))
    assert caught.value.error.code == code
    assert "Extension 'e'" in caught.value.error.message
    for word in words:
        assert word in caught.value.error.message
