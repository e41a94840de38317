"""One supervised MCP session: connect, list tools, forward calls, restart with backoff.

A single supervisor task owns the transport and the `ClientSession` (the SDK's anyio scopes must
be entered and left by the same task); tool calls from turns use the live session from their own
tasks. When the connection ends (a crashed stdio server, a dropped HTTP session) the supervisor
reconnects after 0.5 s, 1 s, 2 s ... capped at 30 s, re-listing the tools each time; the delay
goes back to the start once a session has stayed up for `STABLE_SECONDS`. A call made while no
session is live fails at once with E_TOOL_MCP (it never waits for the restart).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as mt
import structlog
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from agent_process.mcp.config import McpStartError, ServerConfig
from agent_process.mcp.streams import open_transport
from bundles.sdk import ToolFailed
from protocol import backoff
from protocol.errors import ErrorCode

_log = structlog.get_logger("goondan.mcp")

STABLE_SECONDS = 30.0
CLOSE_TIMEOUT_SECONDS = 10.0
HANDSHAKE_SECONDS = 30.0
CLIENT_INFO = mt.Implementation(name="goondan", version="1")


@dataclass(frozen=True, slots=True)
class Backoff:
    first: float = 0.5
    cap: float = 30.0

    def delay(self, attempt: int) -> float:
        return backoff.delay(attempt, first=self.first, cap=self.cap)


class McpConnection:
    """The live view of one server: `tools` from the latest listing, `call`, `close`."""

    def __init__(self, cfg: ServerConfig, backoff: Backoff | None = None) -> None:
        self.cfg = cfg
        self.tools: list[mt.Tool] = []
        self.generation = 0
        """How many sessions have come up; a test or a probe can wait for the next one."""
        self.last_error: str | None = None
        self._backoff = backoff or Backoff()
        self._session: ClientSession | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._up = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        return self._session is not None

    async def start(self) -> None:
        """Connect and list tools; raises McpStartError (E_TOOL_MCP) when the first try fails."""
        self._check_command()
        first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._supervise(first), name=f"mcp:{self.cfg.owner}")
        try:
            await first
        except BaseException:  # a failed start, or the agent's start cancelled: no orphan
            await self.close()
            raise

    async def call(self, name: str, args: dict[str, Any]) -> mt.CallToolResult:
        session = self._session
        if session is None:
            raise ToolFailed(
                f"the MCP server of {self.cfg.kind} {self.cfg.owner!r} is not connected; it is "
                f"being restarted (last error: {self.last_error or 'connection closed'})",
                code=ErrorCode.E_TOOL_MCP,
                suggestion="retry in a few seconds",
            )
        try:
            return await session.call_tool(name, args)
        except MCPError as exc:
            raise ToolFailed(
                f"MCP server of {self.cfg.kind} {self.cfg.owner!r}: {exc.message} "
                f"(MCP error {exc.code})",
                code=ErrorCode.E_TOOL_MCP,
                suggestion="check the arguments; if the connection was lost, retry shortly",
            ) from exc
        except Exception as exc:  # the SDK's result checks, a transport closed under the call
            raise ToolFailed(
                f"MCP server of {self.cfg.kind} {self.cfg.owner!r}: {describe_exception(exc)}",
                code=ErrorCode.E_TOOL_MCP,
            ) from exc

    async def wait_connected(self, *, after: int = 0) -> None:
        """Until a session newer than generation `after` is live (tests, health probes)."""
        async with self._up:
            await self._up.wait_for(lambda: self.generation > after and self.connected)

    async def wait_disconnected(self) -> None:
        """Until no session is live (tests, health probes)."""
        async with self._up:
            await self._up.wait_for(lambda: not self.connected)

    async def close(self) -> None:
        """Stop the server (the SDK closes stdin, then SIGTERM/SIGKILL); idempotent."""
        self._stop.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            _log.error("mcp_close_timeout", server=self.cfg.describe())

    def _check_command(self) -> None:
        command = self.cfg.command
        if command is None:
            return
        found = shutil.which(command, path=self.cfg.env.get("PATH", os.environ.get("PATH")))
        if found is None:
            raise McpStartError(
                f"{self.cfg.describe()}: command {command!r} was not found or is not executable",
                ErrorCode.E_TOOL_MCP,
                "install the server or fix spec.mcp.command (a name on PATH or a path "
                "relative to the bundle), or set spec.mcp.required: false",
            )

    async def _supervise(self, first: asyncio.Future[None]) -> None:
        attempt = 0
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            started = loop.time()
            try:
                await self._one_session(first)
                self.last_error = "the server closed the connection"
            except Exception as exc:
                self.last_error = describe_exception(exc)
                if not first.done():
                    first.set_exception(self._start_error())
                    return
            if self._stop.is_set():
                return
            attempt = 0 if loop.time() - started > STABLE_SECONDS else attempt
            delay = self._backoff.delay(attempt)
            attempt += 1
            _log.warning(
                "mcp_server_lost", server=self.cfg.describe(), error=self.last_error, retry_in=delay
            )
            with suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()

    async def _one_session(self, first: asyncio.Future[None]) -> None:
        self._wake.clear()
        async with (
            open_transport(self.cfg, os.getpid(), self._wake.set) as (read, write),
            ClientSession(read, write, client_info=CLIENT_INFO) as session,
        ):
            # A short per-call timeout must not fail the start of a server that imports slowly.
            with anyio.fail_after(max(self.cfg.timeout_ms / 1000, HANDSHAKE_SECONDS)):
                await session.initialize()
                tools = await list_tools(session)
            await self._adopt(session, tools)
            if not first.done():
                first.set_result(None)
            try:
                await self._wake.wait()
            finally:
                async with self._up:
                    self._session = None
                    self._up.notify_all()

    async def _adopt(self, session: ClientSession, tools: list[mt.Tool]) -> None:
        before = {t.name for t in self.tools}
        self.tools = tools
        if self.generation and before != {t.name for t in tools}:
            _log.warning(
                "mcp_tools_changed",
                server=self.cfg.describe(),
                before=sorted(before),
                now=sorted(t.name for t in tools),
                note="the catalog keeps the tools listed at start until the agent restarts",
            )
        async with self._up:
            self._session = session
            self.generation += 1
            self._up.notify_all()
        _log.info("mcp_server_connected", server=self.cfg.describe(), tools=len(tools))

    def _start_error(self) -> McpStartError:
        return McpStartError(
            f"{self.cfg.describe()} could not be started: {self.last_error}",
            ErrorCode.E_TOOL_MCP,
            "run the command by hand to see its error, or set spec.mcp.required: false to "
            "start the agent without these tools",
        )


async def list_tools(session: ClientSession) -> list[mt.Tool]:
    """Every page of tools/list."""
    tools: list[mt.Tool] = []
    cursor: str | None = None
    while True:
        params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def describe_exception(exc: BaseException) -> str:
    """The innermost meaningful message of a (possibly grouped) exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer to the MCP handshake within the timeout"
    if isinstance(exc, MCPError):
        return f"{exc.message} (MCP error {exc.code})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
