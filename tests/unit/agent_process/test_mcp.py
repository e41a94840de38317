"""MCP servers as tools, through the real AgentRuntime and the scripted model, against the stdio
server of tests/fixtures/mcp/server.py (real processes, the official `mcp` SDK on both sides)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent_process.runtime import AgentRuntime
from bundles.model import Resource
from protocol.errors import ErrorCode
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import TIMEOUT, make_runtime, scripted, tool_results, turn

SERVER = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp" / "server.py")

SCRIPT: list[dict[str, Any]] = [
    {"match": "^add", "toolCalls": [{"name": "calc__add", "args": {"a": 2, "b": 3}}]},
    {"match": "^echo", "toolCalls": [{"name": "calc__echo", "args": {"text": "hello"}}]},
    {"match": "^fail", "toolCalls": [{"name": "calc__fail", "args": {"reason": "no luck"}}]},
    {"match": "^slow", "toolCalls": [{"name": "calc__slow", "args": {"seconds": 30}}]},
    {"match": "^pid", "toolCalls": [{"name": "calc__pid"}]},
    {"match": "^crash", "toolCalls": [{"name": "calc__crash"}]},
    {"match": "^greet", "toolCalls": [{"name": "calc__greeting"}]},
    {"match": "^dotted", "toolCalls": [{"name": "calc__dotted_name"}]},
    {"match": "^bad", "toolCalls": [{"name": "calc__add", "args": {"a": "x"}}]},
    {"afterTool": "*", "reply": "{last_tool_result}"},
]


def mcp_tool(name: str = "calc", **mcp: Any) -> Resource[Any]:
    spec: dict[str, Any] = {"mcp": {"command": sys.executable, "args": [SERVER], **mcp}}
    exports = spec["mcp"].pop("exports", None)
    if exports is not None:
        spec["exports"] = exports
    return b.resource("Tool", name, spec)


async def start(*resources: Resource[Any], tools: list[str] | None = None) -> AgentRuntime:
    return await make_runtime(
        b.scripted(script=SCRIPT), b.agent(tools=tools or ["calc"]), *resources
    )


@pytest.fixture
async def runtime() -> AsyncIterator[AgentRuntime]:
    rt = await start(mcp_tool())
    try:
        yield rt
    finally:
        async with asyncio.timeout(TIMEOUT):
            await rt.close()


async def call(rt: AgentRuntime, word: str) -> dict[str, Any]:
    result = await turn(rt, word)
    assert result.outcome is TurnOutcome.COMPLETED
    return tool_results(rt)[-1]


def server_pids() -> set[int]:
    me = psutil.Process()
    return {p.pid for p in me.children(recursive=True) if SERVER in " ".join(_cmdline(p))}


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        cmdline: list[str] = p.cmdline()
    except psutil.Error:
        return []
    return cmdline


def alive(pid: int) -> bool:
    try:
        status: str = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return False
    return status != psutil.STATUS_ZOMBIE


async def test_server_tools_are_in_the_catalog_with_source_mcp_and_their_schemas(
    runtime: AgentRuntime,
) -> None:
    assert await call(runtime, "add") == {"status": "ok", "output": {"sum": 5}}
    offered = {t.name: t for t in scripted(runtime).requests[0].tools}
    assert {"calc__add", "calc__echo", "calc__fail", "calc__dotted_name"} <= set(offered)
    add = offered["calc__add"]
    assert add.source_kind == "mcp" and add.source_name == "calc"
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"]
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert runtime.tool_names == list(offered)


async def test_text_content_and_a_sanitised_name(runtime: AgentRuntime) -> None:
    assert await call(runtime, "echo") == {"status": "ok", "output": "hello"}
    assert await call(runtime, "dotted") == {"status": "ok", "output": "dotted"}


async def test_an_is_error_result_is_E_TOOL_MCP_with_the_servers_text(
    runtime: AgentRuntime,
) -> None:
    result = await call(runtime, "fail")
    assert result["status"] == "error"
    assert result["error"]["code"] == ErrorCode.E_TOOL_MCP
    assert "fail tool: no luck" in result["error"]["message"]


async def test_arguments_are_checked_against_the_servers_input_schema(
    runtime: AgentRuntime,
) -> None:
    result = await call(runtime, "bad")
    assert result["error"]["code"] == ErrorCode.E_TOOL_INVALID_ARGS


async def test_a_call_over_timeout_ms_is_E_TOOL_TIMEOUT_and_the_session_keeps_working() -> None:
    rt = await start(mcp_tool(timeoutMs=300))
    try:
        result = await call(rt, "slow")
        assert result["error"]["code"] == ErrorCode.E_TOOL_TIMEOUT
        assert await call(rt, "echo") == {"status": "ok", "output": "hello"}
    finally:
        await rt.close()


async def test_exports_are_an_allow_list_and_may_set_the_description() -> None:
    exports = [{"name": "add"}, {"name": "dotted.name", "description": "Say dotted."}]
    rt = await start(mcp_tool(exports=exports))
    try:
        assert rt.tool_names == ["calc__add", "calc__dotted_name"]
        assert rt.registry.get("calc__dotted_name").description == "Say dotted."  # type: ignore[union-attr]
        result = await call(rt, "echo")
        assert result["error"]["code"] == ErrorCode.E_TOOL_NOT_IN_CATALOG
    finally:
        await rt.close()


async def test_a_killed_server_is_restarted_and_the_next_call_works(
    runtime: AgentRuntime,
) -> None:
    conn = runtime.mcp.connection("Tool", "calc")
    generation = conn.generation
    old_pid = int((await call(runtime, "pid"))["output"])
    os.kill(old_pid, signal.SIGKILL)
    during = await call(runtime, "echo")  # lost mid-call, or refused while restarting
    assert during["status"] == "error"
    assert during["error"]["code"] == ErrorCode.E_TOOL_MCP
    async with asyncio.timeout(TIMEOUT):
        await conn.wait_connected(after=generation)
    new_pid = int((await call(runtime, "pid"))["output"])
    assert new_pid != old_pid and not alive(old_pid)
    assert await call(runtime, "add") == {"status": "ok", "output": {"sum": 5}}


async def test_a_server_that_exits_during_a_call_is_a_coded_error_then_recovers(
    runtime: AgentRuntime,
) -> None:
    conn = runtime.mcp.connection("Tool", "calc")
    generation = conn.generation
    result = await call(runtime, "crash")
    assert result["error"]["code"] == ErrorCode.E_TOOL_MCP
    async with asyncio.timeout(TIMEOUT):
        await conn.wait_connected(after=generation)
    assert await call(runtime, "echo") == {"status": "ok", "output": "hello"}


async def test_close_leaves_no_server_process() -> None:
    rt = await start(mcp_tool(), mcp_tool("calc2"), tools=["calc", "calc2"])
    pids = server_pids()
    assert len(pids) == 2
    async with asyncio.timeout(TIMEOUT):
        await rt.close()
    assert not [pid for pid in pids if alive(pid)]
    assert server_pids() == set()


async def test_env_value_sources_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIXTURE_SECRET", "hi from a secret")
    rt = await start(
        mcp_tool(env={"MCP_FIXTURE_GREETING": {"valueFrom": {"env": "FIXTURE_SECRET"}}})
    )
    try:
        assert await call(rt, "greet") == {"status": "ok", "output": "hi from a secret"}
    finally:
        await rt.close()


async def test_an_extension_with_mcp_registers_the_servers_tools() -> None:
    ext = b.resource("Extension", "kb", {"mcp": {"command": sys.executable, "args": [SERVER]}})
    rt = await make_runtime(b.scripted(), b.agent(extensions=["kb"]), ext)
    try:
        assert "kb__add" in rt.tool_names
        entry = rt.registry.get("kb__add")
        assert entry is not None and entry.origin.kind == "mcp" and entry.origin.name == "kb"
    finally:
        await rt.close()
