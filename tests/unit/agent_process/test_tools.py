"""Tools through the whole runtime: executor behaviour, ToolContext, toolsets, load errors."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent_process.loading import load_entry
from agent_process.runtime import AgentRuntime, StartFailure
from protocol.endpoints import StateLayout
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import (
    TIMEOUT,
    event,
    make_runtime,
    scripted,
    tool_results,
    turn,
)


def call_then_report(tool: str, args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [
        {"match": "go", "toolCalls": [{"name": tool, "args": args or {}}]},
        {"afterTool": "*", "reply": "{last_tool_result}"},
    ]


async def run_one(tool_res: Any, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    rt = await make_runtime(
        b.scripted(script=call_then_report(tool, args)), b.agent(tools=[tool_res.name]), tool_res
    )
    try:
        result = await turn(rt, "go")
        assert result.outcome is TurnOutcome.COMPLETED
        return tool_results(rt)[-1]
    finally:
        await rt.close()


async def test_sync_handler_blocking_a_second_runs_in_a_thread_while_the_loop_serves() -> None:
    module = load_entry("tools/basic.py", b.FIXTURES)
    module.BLOCK_STARTED.clear()
    tool = b.tool("t", "tools/basic.py", [{"name": "block"}])
    rt = await make_runtime(
        b.scripted(script=call_then_report("t__block", {"seconds": 1.0})),
        b.agent(tools=["t"]),
        tool,
    )
    try:
        async with asyncio.timeout(TIMEOUT):
            running = asyncio.create_task(rt.run_turn(event("go")))
            # Returning from this await needs the loop: the handler is blocking its own thread.
            assert await asyncio.to_thread(module.BLOCK_STARTED.wait, TIMEOUT)
            served_at = time.monotonic()
            result = await running
        output = tool_results(rt)[0]["output"]
        assert result.outcome is TurnOutcome.COMPLETED
        assert output["started"] <= served_at < output["ended"]
    finally:
        await rt.close()


async def test_timeout_ms_bounds_a_handler() -> None:
    tool = b.tool("t", "tools/basic.py", [{"name": "slow", "timeoutMs": 50}])
    error = (await run_one(tool, "t__slow"))["error"]
    assert error["code"] == "E_TOOL_TIMEOUT"
    assert "50 ms" in error["message"]


async def test_tool_failed_keeps_its_code_suggestion_and_help_url() -> None:
    tool = b.tool("t", "tools/basic.py", [{"name": "fail_coded"}])
    error = (await run_one(tool, "t__fail_coded"))["error"]
    assert error == {
        "code": "E_TOOL_PATH_ESCAPE",
        "message": "nope",
        "name": "ToolFailed",
        "suggestion": "stay inside",
        "helpUrl": "u",
    }


async def test_pending_result_and_non_json_result() -> None:
    tool = b.tool("t", "tools/basic.py", [{"name": "pending"}])
    assert await run_one(tool, "t__pending") == {
        "status": "pending",
        "output": {"message": "started"},
        "handle": "build-42",
    }
    tool = b.tool("t", "tools/basic.py", [{"name": "not_json"}])
    assert (await run_one(tool, "t__not_json"))["error"]["code"] == "E_TOOL_INVALID_RESULT"


async def test_deferred_export_reaches_the_deferred_hook() -> None:
    tool = b.tool("t", "tools/basic.py", [{"name": "cal", "deferred": {"method": "calendar.get"}}])
    error = (await run_one(tool, "t__cal"))["error"]
    assert error["code"] == "E_TOOL_DEFERRED_REJECTED"
    assert "calendar.get" in error["message"]


async def test_a_deferred_hook_can_complete_deferred_calls() -> None:
    from agent_process.middleware_contexts import ToolCallMwContext
    from agent_process.results import DeferredRequest, ToolResult, ok_result

    seen: list[tuple[str, DeferredRequest]] = []

    async def client(ctx: ToolCallMwContext, request: DeferredRequest) -> ToolResult:
        seen.append((ctx.tool_call_id, request))
        return ok_result({"events": []})

    tool = b.tool(
        "t",
        "tools/basic.py",
        [{"name": "cal", "deferred": {"method": "calendar.get", "message": "wait"}}],
    )
    rt = await make_runtime(
        b.scripted(script=call_then_report("t__cal", {"day": "mon"})), b.agent(tools=["t"]), tool
    )
    rt.set_deferred_hook(client)
    try:
        await turn(rt, "go")
        assert tool_results(rt)[0] == {"status": "ok", "output": {"events": []}}
    finally:
        await rt.close()
    assert seen[0][1] == DeferredRequest(
        method="calendar.get", params={"day": "mon"}, message="wait"
    )


async def test_tool_context_fields() -> None:
    tool = b.tool("t", "tools/basic.py", [{"name": "info"}], config={"root": "/r"})
    rt = await make_runtime(
        b.scripted(script=call_then_report("t__info")), b.agent(tools=["t"]), tool
    )
    try:
        await turn(rt, "go")
        output = tool_results(rt)[0]["output"]
    finally:
        await rt.close()
    paths = StateLayout.from_env().instance_paths("s", "k1", "a")
    assert output["workdir"] == str(paths.workdir)
    assert (output["agent"], output["instance"], output["messageRole"]) == ("a", "k1", "assistant")
    assert output["callId"].startswith("call_")
    sandbox = output["config"].pop("sandbox")  # the agent adds the Tool's sandbox
    assert output["config"] == {"root": "/r"}
    assert sandbox["mode"] == "auto" and str(StateLayout.from_env().root) in sandbox["hide"]
    assert output["runtime"] == "E_AGENT_NOT_CONNECTED"


async def test_python_toolset_entry_gets_schemas_from_type_hints(tmp_path: Any) -> None:
    tool = b.tool("files", "tools/files_toolset.py")
    script = [
        {
            "match": "write",
            "toolCalls": [{"name": "files__write", "args": {"path": "a.txt", "text": "1\n2\n3"}}],
        },
        {
            "afterTool": "files__write",
            "toolCalls": [{"name": "files__read", "args": {"path": "a.txt", "start": 2}}],
        },
        {"afterTool": "files__read", "toolCalls": [{"name": "files__read", "args": {"start": 0}}]},
        {"afterTool": "*", "reply": "done"},
    ]
    rt = await make_runtime(b.scripted(script=script), b.agent(tools=["files"]), tool)
    try:
        await turn(rt, "write")
        offered = {t.name: t for t in scripted(rt).requests[0].tools}
        results = tool_results(rt)
    finally:
        await rt.close()
    read = offered["files__read"]
    assert read.description == "Read a text file from the workdir."
    assert read.parameters["required"] == ["path"]
    assert read.parameters["properties"]["start"]["default"] == 1
    assert (
        read.parameters["properties"]["path"]["description"] == "File path relative to the workdir."
    )
    assert read.source_kind == "config" and read.source_name == "files"
    assert results[0]["output"] == {"written": 5}
    assert results[1]["output"] == {"lines": ["2", "3"]}
    assert results[2]["error"]["code"] == "E_TOOL_INVALID_ARGS"


@pytest.mark.parametrize(
    ("tool", "code", "words"),
    [
        (
            b.tool("t", "tools/missing_handler.py", [{"name": "present"}, {"name": "absent"}]),
            "E_TOOL_LOAD",
            ["'absent' has no handler", "handlers['absent']"],
        ),
        (
            b.tool("t", "tools/broken_import.py", [{"name": "x"}]),
            "E_TOOL_LOAD",
            ["this_module_does_not_exist", "broken_import.py"],
        ),
        (b.tool("t", "tools/nope.py", [{"name": "x"}]), "E_TOOL_LOAD", ["does not exist"]),
        (
            b.tool("t", "tools/basic.py", [{"name": "add", "parameters": {"type": "nonsense"}}]),
            "E_TOOL_LOAD",
            ["schema is invalid"],
        ),
        (
            b.tool("t", "tools/basic.py", [{"name": "bad__name"}]),
            "E_TOOL_LOAD",
            ["must not contain"],
        ),
        (
            b.tool("t", "tools/files_toolset.py", [{"name": "delete"}]),
            "E_TOOL_LOAD",
            ["read, write"],
        ),
    ],
)
async def test_tool_load_errors_stop_the_start_with_a_coded_reason(
    tool: Any, code: str, words: list[str]
) -> None:
    with pytest.raises(StartFailure) as caught:
        await make_runtime(b.scripted(), b.agent(tools=["t"]), tool)
    assert caught.value.error.code == code
    for word in words:
        assert word in caught.value.error.message


async def test_unknown_agent_and_bad_model_are_start_failures() -> None:
    with pytest.raises(StartFailure) as caught:
        await make_runtime(b.scripted(), b.agent(), agent="zzz")
    assert caught.value.error.code == "E_CONFIG_REF_NOT_FOUND"
    bad = b.scripted(script=[{"match": "(", "reply": "x"}])
    with pytest.raises(StartFailure) as caught:
        await make_runtime(bad, b.agent())
    assert caught.value.error.code == "E_MODEL_SCRIPT"


async def test_create_accepts_an_agents_runtime_and_a_workdir(tmp_path: Any) -> None:
    class Connected:
        async def list(self, **kw: Any) -> dict[str, Any]:
            return {"agents": []}

    tool = b.tool("t", "tools/basic.py", [{"name": "info"}])
    async with asyncio.timeout(TIMEOUT):
        rt = await AgentRuntime.create(
            bundle=b.bundle(
                b.scripted(script=call_then_report("t__info")), b.agent(tools=["t"]), tool
            ),
            agent="a",
            instance_key="k1",
            swarm="s",
            layout=StateLayout.from_env(),
            agents=Connected(),  # type: ignore[arg-type]
            workdir=tmp_path,
        )
    try:
        assert rt.tool_names == ["t__info"]
        await turn(rt, "go")
        output = tool_results(rt)[0]["output"]
        assert output["runtime"] == "connected" and output["workdir"] == str(tmp_path)
    finally:
        await rt.close()
