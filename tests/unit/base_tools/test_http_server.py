"""The connectors' HTTP server (`bundles/base/connectors/_http.py`, loaded by path as the
connector host does) against hostile clients on 127.0.0.1: headers too big or too slow, a
chunked body over the limit, a body that never ends, a client that never reads, and the
ordinary things it must still do (keep-alive, chunked bodies within the limit)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agent_process.loading import load_entry

from .conftest import BASE

http: Any = load_entry("./connectors/_http.py", BASE)


async def echo(request: Request) -> Response:
    return JSONResponse({"size": len(await request.body())})


async def firehose(request: Request) -> Response:
    ended: asyncio.Event = request.app.state.ended

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"x" * 65536
                await asyncio.sleep(0)  # a real stream waits for its data somewhere
        finally:
            ended.set()

    return StreamingResponse(chunks())


async def whoami(request: Request) -> Response:
    client = request.client.host if request.client else None
    return JSONResponse({"client": client, "scheme": request.url.scheme})


APP = Starlette(routes=[Route("/", echo, methods=["POST"]), Route("/big", firehose),
                        Route("/whoami", whoami)])  # fmt: skip


@pytest.fixture
async def server() -> AsyncIterator[tuple[Any, int]]:
    limits = http.Limits(max_body_bytes=1000, max_header_bytes=2000, read_timeout=0.3,
                         write_timeout=0.3, code_prefix="E_T")  # fmt: skip
    srv = http.HttpServer(limits)
    await srv.bind("127.0.0.1", 0)
    srv.mount(APP)
    task = asyncio.ensure_future(srv.serve())
    yield srv, srv.address[1]
    task.cancel()
    async with asyncio.timeout(10):
        await asyncio.gather(task, return_exceptions=True)


async def _raw(port: int, data: bytes, *, then_wait: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await reader.read() if then_wait else b""
    writer.close()
    return answer


async def _chunks(count: int) -> AsyncIterator[bytes]:
    """A chunked body: `count` pieces of 100 bytes."""
    for _ in range(count):
        yield b"y" * 100


def _status_and_code(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)["error"]["code"]


async def test_oversized_headers_are_431_before_the_app(server: tuple[Any, int]) -> None:
    _, port = server
    async with asyncio.timeout(10):
        answer = await _raw(
            port, b"POST / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 3000 + b"\r\n\r\n"
        )
    assert _status_and_code(answer) == (431, "E_T_HEADERS_TOO_LARGE")


async def test_headers_that_never_end_are_408(server: tuple[Any, int]) -> None:
    _, port = server
    async with asyncio.timeout(10):
        silent = await _raw(port, b"")
        trickled = await _raw(port, b"POST / HTTP/1.1\r\nHost: x\r\n")
    assert _status_and_code(silent) == (408, "E_T_TIMEOUT")
    assert _status_and_code(trickled) == (408, "E_T_TIMEOUT")


async def test_a_body_that_never_ends_is_408(server: tuple[Any, int]) -> None:
    _, port = server
    async with asyncio.timeout(10):
        answer = await _raw(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")
    assert _status_and_code(answer) == (408, "E_T_TIMEOUT")


async def test_bodies_over_the_limit_are_413_declared_or_chunked(
    server: tuple[Any, int],
) -> None:
    _, port = server

    async with asyncio.timeout(10), httpx.AsyncClient() as client:
        declared = await client.post(f"http://127.0.0.1:{port}/", content=b"z" * 1001)
        chunked = await client.post(f"http://127.0.0.1:{port}/", content=_chunks(20))
        bad = await _raw(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
    assert (declared.status_code, declared.json()["error"]["code"]) == (413, "E_T_TOO_LARGE")
    assert (chunked.status_code, chunked.json()["error"]["code"]) == (413, "E_T_TOO_LARGE")
    assert bad.startswith(b"HTTP/1.1 400 ")  # httptools refuses it while parsing


async def test_keep_alive_and_chunked_bodies_within_the_limit(server: tuple[Any, int]) -> None:
    _, port = server

    async with asyncio.timeout(10), httpx.AsyncClient() as client:
        first = await client.post(f"http://127.0.0.1:{port}/", content=b"a" * 10)
        second = await client.post(f"http://127.0.0.1:{port}/", content=_chunks(5))
    assert first.json() == {"size": 10}
    assert second.json() == {"size": 500}


async def test_a_client_that_never_reads_is_dropped(server: tuple[Any, int]) -> None:
    """An endless answer to a reader that stopped: writes wait (bounded buffers), the server
    serves others meanwhile, and cuts the stalled connection after writeTimeoutMs."""
    _, port = server
    APP.state.ended = ended = asyncio.Event()
    async with asyncio.timeout(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await reader.read(100)  # the answer started; never read again
        async with httpx.AsyncClient() as client:
            others = await client.post(f"http://127.0.0.1:{port}/", content=b"{}")
        await ended.wait()  # the server cut the connection: the answer's stream was stopped
        with contextlib.suppress(ConnectionError):
            while await reader.read(1 << 20):  # what the kernel had buffered, then the end
                pass
        writer.close()
    assert others.json() == {"size": 2}


async def test_a_port_in_use_is_an_error_naming_it(server: tuple[Any, int]) -> None:
    _, port = server
    other = http.HttpServer(http.Limits())
    with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
        await other.bind("127.0.0.1", port)


class _Transport:
    """What JoinedWrites passes on."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_the_writes_of_one_loop_step_go_out_as_one() -> None:
    raw = _Transport()
    joined = http.JoinedWrites(raw, asyncio.get_running_loop())
    joined.write(b"HTTP/1.1 200 OK\r\n\r\n")
    joined.write(b"5\r\nhello\r\n")
    assert raw.writes == []
    await asyncio.sleep(0)  # the step ends
    assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\n5\r\nhello\r\n"]
    assert joined.get_extra_info("peername") == "info:peername"  # the rest is the transport's


async def test_a_big_write_goes_out_at_once_so_flow_control_sees_it() -> None:
    raw = _Transport()
    joined = http.JoinedWrites(raw, asyncio.get_running_loop())
    joined.write(b"head")
    joined.write(b"x" * http.JOIN_BYTES)
    assert raw.writes == [b"head" + b"x" * http.JOIN_BYTES]
    await asyncio.sleep(0)
    assert len(raw.writes) == 1


async def test_a_close_sends_what_is_joined_and_an_abort_drops_it() -> None:
    loop = asyncio.get_running_loop()
    closing, aborting = _Transport(), _Transport()
    first, second = http.JoinedWrites(closing, loop), http.JoinedWrites(aborting, loop)
    first.write(b"last words")
    first.close()
    second.write(b"never sent")
    second.abort()
    await asyncio.sleep(0)
    assert (closing.writes, closing.closed) == ([b"last words"], True)
    assert (aborting.writes, aborting.aborted) == ([], True)


async def test_forwarded_headers_from_a_local_process_are_not_believed(
    server: tuple[Any, int],
) -> None:
    """uvicorn trusts X-Forwarded-* from loopback by default; here nothing is a proxy."""
    _, port = server
    forged = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    async with asyncio.timeout(10), httpx.AsyncClient() as client:
        answer = await client.get(f"http://127.0.0.1:{port}/whoami", headers=forged)
    assert answer.json() == {"client": "127.0.0.1", "scheme": "http"}
