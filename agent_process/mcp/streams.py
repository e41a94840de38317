"""Transports for one MCP session: stdio (spawned server) or streamable HTTP, plus a read-stream
wrapper that reports the end of the connection.

The SDK's session keeps running after its transport's read stream ends (requests then fail with
CONNECTION_CLOSED), so the supervisor learns that a server died by watching the stream itself.

A stdio server is started through a tiny launcher that arms PR_SET_PDEATHSIG on Linux before it
execs the command: the SDK starts servers in their own session, so if the agent process is
SIGKILLed the server would otherwise outlive it whenever it ignores the end of its stdin.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self

from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from agent_process.mcp.config import ServerConfig

Streams = tuple["WatchedReadStream", Any]

_LAUNCHER = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None).prctl(1,signal.SIGKILL,0,0,0)\n"  # 1 = PR_SET_PDEATHSIG
    "sys.exit(0) if os.getppid()!=int(sys.argv[1]) else os.execvp(sys.argv[2],sys.argv[2:])\n"
)


class WatchedReadStream:
    """Forwards the SDK's ReadStream protocol and calls `on_end` once the stream ends."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except BaseException:
            self._on_end()
            raise
        return item

    async def aclose(self) -> None:
        self._on_end()
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.__anext__()
        except BaseException:
            self._on_end()
            raise
        return item

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


def stdio_parameters(cfg: ServerConfig, parent_pid: int) -> StdioServerParameters:
    assert cfg.command is not None
    command, args = cfg.command, list(cfg.args)
    if sys.platform.startswith("linux"):
        command, args = sys.executable, ["-S", "-c", _LAUNCHER, str(parent_pid), command, *args]
    return StdioServerParameters(command=command, args=args, env=cfg.env, cwd=cfg.cwd)


@asynccontextmanager
async def open_transport(
    cfg: ServerConfig, parent_pid: int, on_end: Callable[[], None]
) -> AsyncIterator[Streams]:
    if cfg.command is not None:
        async with stdio_client(stdio_parameters(cfg, parent_pid)) as (read, write):
            yield WatchedReadStream(read, on_end), write
        return
    assert cfg.url is not None
    async with (
        create_mcp_http_client(headers=cfg.headers or None) as http,
        streamable_http_client(cfg.url, http_client=http) as (read, write),
    ):
        yield WatchedReadStream(read, on_end), write
