"""Server processes that behave badly, and the streamable HTTP transport.

- A server that ignores the end of its stdin is still stopped by `close()` (the SDK's SIGTERM),
  and dies with the agent process when that is SIGKILLed (the PR_SET_PDEATHSIG launcher).
- A Tool with `mcp.url` talks streamable HTTP, with `headers` resolved from ValueSources.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent_process.mcp import connection
from agent_process.mcp.config import ServerConfig
from agent_process.mcp.connection import Backoff, McpConnection
from agent_process.mcp.tools import content_text
from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import TIMEOUT, make_runtime, tool_results, turn

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mcp"
SERVER = str(FIXTURES / "server.py")
REPO = Path(__file__).resolve().parents[3]


async def wait_gone(pid: int, limit: float = 10) -> bool:
    """True once the process is gone (psutil waits; a bounded wait, not a sleep)."""
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    _, alive = await asyncio.to_thread(psutil.wait_procs, [proc], limit)
    return not alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
async def test_a_lingering_server_dies_with_a_sigkilled_agent_process() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = await asyncio.create_subprocess_exec(
        sys.executable, str(FIXTURES / "hold.py"), env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(TIMEOUT):
            assert holder.stdout is not None
            pid = int(await holder.stdout.readline())
            assert psutil.Process(pid).ppid() == holder.pid
            holder.send_signal(signal.SIGKILL)
            await holder.wait()
            # The server would linger for 60 s after its stdin closed without the launcher.
            assert await wait_gone(pid)
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()


async def test_close_stops_a_server_that_ignores_the_end_of_its_stdin() -> None:
    cfg = ServerConfig(
        owner="calc", kind="Tool", where="test", command=sys.executable, args=(SERVER, "--linger")
    )
    conn = McpConnection(cfg)
    async with asyncio.timeout(TIMEOUT):
        await conn.start()
        pid = int(content_text((await conn.call("pid", {})).content))
        await conn.close()
    assert await wait_gone(pid, limit=1)


@pytest.fixture
async def http_server() -> AsyncIterator[int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, SERVER, "--http", stdout=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(TIMEOUT):
            assert proc.stdout is not None
            yield int(await proc.stdout.readline())
    finally:
        proc.terminate()
        async with asyncio.timeout(TIMEOUT):
            await proc.wait()


async def test_streamable_http_with_headers_from_a_value_source(
    http_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIXTURE_API_KEY", "k-123")
    spec: dict[str, Any] = {
        "mcp": {
            "url": f"http://127.0.0.1:{http_server}/mcp",
            "headers": {"X-Api-Key": {"valueFrom": {"env": "FIXTURE_API_KEY"}}},
        }
    }
    script = [
        {"match": "^key", "toolCalls": [{"name": "remote__header"}]},
        {"match": "^add", "toolCalls": [{"name": "remote__add", "args": {"a": 1, "b": 2}}]},
        {"afterTool": "*", "reply": "{last_tool_result}"},
    ]
    rt = await make_runtime(
        b.scripted(script=script), b.agent(tools=["remote"]), b.resource("Tool", "remote", spec)
    )
    try:
        for word in ("key", "add"):
            assert (await turn(rt, word)).outcome is TurnOutcome.COMPLETED
        assert tool_results(rt) == [
            {"status": "ok", "output": "k-123"},
            {"status": "ok", "output": {"sum": 3}},
        ]
        assert rt.registry.get("remote__add").origin.kind == "mcp"  # type: ignore[union-attr]
    finally:
        async with asyncio.timeout(TIMEOUT):
            await rt.close()


async def test_a_start_cancelled_during_the_handshake_leaves_no_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spawned = asyncio.Event()
    real_open = connection.open_transport

    @asynccontextmanager
    async def observed(*args: Any) -> AsyncIterator[Any]:
        async with real_open(*args) as streams:
            spawned.set()  # the server process exists; its handshake has not been answered
            yield streams

    monkeypatch.setattr(connection, "open_transport", observed)
    cfg = ServerConfig(
        owner="calc", kind="Tool", where="test", command=sys.executable, args=(SERVER,)
    )
    conn = McpConnection(cfg)
    starting = asyncio.create_task(conn.start())
    async with asyncio.timeout(TIMEOUT):
        await spawned.wait()
        pids = server_children()
        assert len(pids) == 1
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
    assert await wait_gone(pids[0], limit=5)


def server_children() -> list[int]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if SERVER in proc.cmdline():
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


async def test_during_the_restart_backoff_a_call_fails_at_once_and_close_does_not_wait() -> None:
    cfg = ServerConfig(
        owner="calc", kind="Tool", where="test", command=sys.executable, args=(SERVER,)
    )
    conn = McpConnection(cfg, Backoff(first=3600))
    async with asyncio.timeout(TIMEOUT):
        await conn.start()
        pid = int(content_text((await conn.call("pid", {})).content))
        os.kill(pid, signal.SIGKILL)
        await conn.wait_disconnected()
        with pytest.raises(ToolFailed) as caught:
            await conn.call("echo", {"text": "x"})
        assert caught.value.code == ErrorCode.E_TOOL_MCP
        assert "being restarted" in caught.value.message
        await conn.close()  # the hour-long backoff wait ends with close
    assert not conn.connected
