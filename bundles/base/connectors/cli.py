"""The `cli` connector: lines from the daemon's stdin in, the agent's replies on its stdout.

Each non-empty line is the connector event `config.event` (default "message") with the line as
its text and `properties.conversation = "cli:<run id>"`: with the usual rule
`route: {instanceKeyProperty: conversation}` one `goondan run` is one conversation (the run id
is the daemon's, so a respawned connector keeps it); any other rule decides otherwise.

Input and output are the daemon's own stdin/stdout (`input`/`output` = "-", reopened through
/proc/<daemon pid>/fd/0 and /fd/1) or any path (a file, a FIFO). A supervised child runs in its
own process group, so it cannot read a terminal (job control stops it): pipe the input instead,
e.g. `printf 'hi\n' | goondan run`, or use `goondan send`. On a terminal the connector says so
in its log and stays idle. At end of input it stays up, idle, until the daemon stops.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import IO

from bundles.sdk import ConnectorContext


def _path(ctx: ConnectorContext, key: str, fd: int) -> str | None:
    value = str(ctx.config.get(key, "-"))
    if value != "-":
        return value
    pid = ctx.orchestrator_pid
    return f"/proc/{pid}/fd/{fd}" if pid is not None else None


def _open_input(path: str | None) -> IO[bytes] | None:
    if path is None:
        return None
    stream = open(path, "rb", buffering=0)  # noqa: SIM115 - lives as long as the connector
    if os.isatty(stream.fileno()):
        stream.close()
        return None
    return stream


def _open_output(path: str | None) -> IO[str]:
    if path is None:
        return sys.stdout
    return open(path, "a", encoding="utf-8")  # lives as long as the connector


async def _idle() -> None:
    await asyncio.Event().wait()


async def lines(stream: IO[bytes]) -> AsyncIterator[str]:
    """Lines of a file (read at once) or of a pipe/FIFO (without blocking the loop)."""
    if stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
        for raw in stream:
            yield raw.decode(errors="replace")
        return
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), stream
    )
    try:
        while raw := await reader.readline():
            yield raw.decode(errors="replace")
    finally:
        transport.close()


def format_reply(text: str, error_code: str | None, error_message: str | None) -> str:
    if error_code is not None:
        return f"error {error_code}: {error_message or ''}\n"
    return text if text.endswith("\n") else text + "\n"


async def run(ctx: ConnectorContext) -> None:
    event = str(ctx.config.get("event", "message"))
    conversation = f"cli:{ctx.run_id}"
    source = _open_input(_path(ctx, "input", 0))
    if source is None:
        ctx.logger.warning("cli_no_input", hint="pipe lines into `goondan run`; a terminal "
                           "cannot be read from a supervised child")  # fmt: skip
        await _idle()
    assert source is not None
    out_path = _path(ctx, "output", 1)
    out = _open_output(out_path)
    try:
        async for line in lines(source):
            text = line.strip()
            if not text:
                continue
            reply = await ctx.emit(event, {"conversation": conversation}, text, reply=True)
            if reply is not None and not reply.accepted:
                out.write(format_reply(reply.text, reply.error_code, reply.error_message))
                out.flush()
    finally:
        source.close()
    ctx.logger.info("cli_input_closed", conversation=conversation)
    await _idle()
