"""What the sandbox tests share: the bubblewrap requirement and two local HTTP servers.

`needs_bubblewrap()` skips with the install command where bwrap is missing, except under
`CI=true`, where a missing service fails the run. `local_servers()` serves two HTTP servers on
127.0.0.1 answering every request with `BODY`, one for a bundle to list and one it leaves out
(the `local_servers` fixture of tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator

import pytest

INSTALL = "apt-get install bubblewrap (or make install)"
BODY = "hello-from-the-listed-server"


def needs_bubblewrap() -> None:
    if shutil.which("bwrap") is None:
        message = f"bubblewrap is not installed: {INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    body = BODY.encode()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
    writer.write(body)
    await writer.drain()
    writer.close()


async def local_servers() -> AsyncIterator[tuple[int, int]]:
    """Two HTTP servers on 127.0.0.1: (the port to list, one left out)."""
    started = [await asyncio.start_server(_answer, "127.0.0.1", 0) for _ in range(2)]
    yield tuple(s.sockets[0].getsockname()[1] for s in started)  # type: ignore[misc]
    for server in started:
        server.close()
