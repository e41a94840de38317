"""The connectors' HTTP server at the connection level (`bundles/base/connectors/_connection.py`
around uvicorn's protocol, `_http.py`), loaded by path as the connector host does, served on
uvloop as the connector host serves it: the request head counted on the raw stream, requests
told to their connection by the `Requests` middleware, admission and the head gate's linger;
and that nothing of uvicorn's insides is imported or subclassed."""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_process.loading import load_entry

from .conftest import BASE

http: Any = load_entry("./connectors/_http.py", BASE)
connection: Any = http.connection
T = TypeVar("T")
LIMITS = http.Limits(max_body_bytes=300_000, max_header_bytes=2000, read_timeout=0.3,
                     code_prefix="E_T")  # fmt: skip


async def echo(request: Request) -> Response:
    return JSONResponse({"size": len(await request.body())})


async def hold(request: Request) -> Response:
    state = request.app.state
    state.holding += 1
    if state.holding == 2:
        state.both.set()
    await state.release.wait()
    return JSONResponse({"held": True})


APP = Starlette(routes=[Route("/", echo, methods=["POST"]), Route("/hold", hold)])


class Deny:
    """A head gate (`mount(head=)`): a request with `x-deny` is refused before its body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if any(name == b"x-deny" for name, _ in scope["headers"]):
            refusal = {"error": {"code": "E_T_DENIED", "message": "no"}}
            await JSONResponse(refusal, 401, headers={"connection": "close"})(scope, receive, send)
            return
        await self.app(scope, receive, send)


def on_uvloop(
    scenario: Callable[[int], Awaitable[T]],
    limits: Any = LIMITS,
    head: Callable[[ASGIApp], ASGIApp] | None = None,
) -> T:
    """Serve APP on uvloop (the connector host's loop) and run `scenario(port)` against it."""

    async def main() -> T:
        APP.state.release, APP.state.both, APP.state.holding = asyncio.Event(), asyncio.Event(), 0
        server = http.HttpServer(limits)
        await server.bind("127.0.0.1", 0)
        server.mount(APP, head=head)
        serving = asyncio.ensure_future(server.serve())
        try:
            async with asyncio.timeout(10):
                return await scenario(server.address[1])
        finally:
            serving.cancel()
            async with asyncio.timeout(10):
                await asyncio.gather(serving, return_exceptions=True)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


async def _exchange(port: int, data: bytes) -> bytes:
    """Send `data`, then read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


def _answers(raw: bytes) -> list[tuple[int, Any]]:
    """(status, JSON body) of each answer in `raw` (answers with a Content-Length)."""
    found = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        size = next(int(line.split(b":")[1]) for line in lines
                    if line.lower().startswith(b"content-length:"))  # fmt: skip
        found.append((int(lines[0].split(b" ")[1]), json.loads(rest[:size])))
        raw = rest[size:]
    return found


def _post(body: bytes, *headers: bytes) -> bytes:
    head = b"".join(h + b"\r\n" for h in headers)
    return (b"POST / HTTP/1.1\r\nHost: x\r\n" + head
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip


def test_nothing_of_uvicorns_insides_is_imported_or_subclassed() -> None:
    """A uvicorn release may reshape its protocols' insides: the connectors use `uvicorn`'s
    `Config` and `Server` only."""
    for path in sorted((BASE / "connectors").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names if a.name.startswith("uvicorn")]
                assert set(named) <= {"uvicorn"}, f"{path.name}:{node.lineno} imports {named}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("uvicorn"):
                names = {a.name for a in node.names}
                assert node.module == "uvicorn" and names <= {"Config", "Server"}, (
                    f"{path.name}:{node.lineno} imports {node.module}: {sorted(names)}"
                )


def test_a_header_line_that_never_ends_is_431_as_soon_as_it_passes_the_limit() -> None:
    """Counted on the raw stream: the parser would hold a line until its end (or the
    deadline, here 10 s) however long it grows."""
    patient = http.Limits(max_header_bytes=2000, read_timeout=10, code_prefix="E_T")

    async def scenario(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 3000)
        await writer.drain()
        async with asyncio.timeout(3):  # well before the head's deadline
            answer = await reader.read()
        writer.close()
        return answer

    status, body = _answers(on_uvloop(scenario, patient))[0]
    assert (status, body["error"]["code"]) == (431, "E_T_HEADERS_TOO_LARGE")


def test_blank_lines_before_a_request_do_not_end_its_head() -> None:
    async def scenario(port: int) -> tuple[bytes, bytes]:
        served = await _exchange(port, b"\r\n\r\n" + _post(b"{}", b"Connection: close"))
        padded = await _exchange(port, b"\r\n\r\n\r\nPOST / HTTP/1.1\r\nX-Pad: " + b"a" * 3000)
        return served, padded

    served, padded = on_uvloop(scenario)
    assert _answers(served) == [(200, {"size": 2})]
    assert [(s, b["error"]["code"]) for s, b in _answers(padded)] == [
        (431, "E_T_HEADERS_TOO_LARGE")
    ]


def test_each_request_on_a_connection_has_its_own_head_limit_and_deadline() -> None:
    """Three requests of 1,500 header bytes each under a 2,000-byte limit, one after the
    other on one connection; then a fourth that never ends its head: 408 after readTimeoutMs
    from its first byte (the connection was idle before it, under keep-alive's own limit)."""

    async def scenario(port: int) -> list[tuple[int, Any]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answers = []
        for size in (1, 2, 3):
            writer.write(_post(b"x" * size, b"X-Pad: " + b"p" * 1500))
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            answers.append((int(head.split(b" ")[1]), json.loads(await reader.readexactly(length))))
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\n")
        answers += _answers(await reader.read())
        writer.close()
        return answers

    answers = on_uvloop(scenario)
    assert answers[:3] == [(200, {"size": 1}), (200, {"size": 2}), (200, {"size": 3})]
    assert [(s, b["error"]["code"]) for s, b in answers[3:]] == [(408, "E_T_TIMEOUT")]


def test_pipelined_requests_are_answered_in_order() -> None:
    async def scenario(port: int) -> bytes:
        return await _exchange(port, _post(b"a") + _post(b"bb") + _post(b"", b"Connection: close"))

    assert _answers(on_uvloop(scenario)) == [(200, {"size": 1}), (200, {"size": 2}),
                                             (200, {"size": 0})]  # fmt: skip


def test_a_request_refused_on_its_head_is_answered_then_its_body_discarded() -> None:
    """The answer comes before the body is read; the body the client still sends is taken
    and dropped (a close with unread data would reset the connection under the answer), and
    the connection ends with the client's own close."""

    async def scenario(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_post(b"z" * 200_000, b"X-Deny: 1"))
        await writer.drain()
        answer = await reader.read()  # the answer, then the server's half-close
        writer.close()
        return answer

    [(status, body)] = _answers(on_uvloop(scenario, head=Deny))
    assert (status, body["error"]["code"]) == (401, "E_T_DENIED")


def test_idle_connections_make_room_and_a_request_in_progress_keeps_its_place() -> None:
    """maxConnections 2: an idle connection is closed for a new one; when both have a request
    in progress, the next connection is 503 until one ends."""
    two = http.Limits(max_connections=2, read_timeout=5, code_prefix="E_T")
    held = b"GET /hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

    async def scenario(port: int) -> tuple[bytes, bytes, list[bytes]]:
        idle = await asyncio.open_connection("127.0.0.1", port)
        busy = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        for _, writer in busy:  # the second one took the idle connection's place
            writer.write(held)
        try:
            evicted = await idle[0].read()
        except ConnectionResetError:  # cut: what it had (nothing) is dropped
            evicted = b""
        await APP.state.both.wait()
        refused = await _exchange(port, _post(b"{}"))
        APP.state.release.set()
        answers = [await reader.read() for reader, _ in busy]
        for _, writer in (idle, *busy):
            writer.close()
        return evicted, refused, answers

    evicted, refused, answers = on_uvloop(scenario, two)
    assert evicted == b""
    assert [(s, b["error"]["code"]) for s, b in _answers(refused)] == [(503, "E_T_BUSY")]
    assert [_answers(a) for a in answers] == [[(200, {"held": True})]] * 2


class _Transport:
    """The transport side of a connection, as asyncio gives it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5000) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True


class _Parser(asyncio.Protocol):
    """Stands in for uvicorn's protocol: what it is handed."""

    def __init__(self, **_: Any) -> None:
        self.data = b""

    def data_received(self, data: bytes) -> None:
        self.data += data


def _connection(max_header_bytes: int) -> tuple[Any, _Transport, _Parser]:
    limits = http.Limits(max_header_bytes=max_header_bytes, code_prefix="E_T")
    parser = _Parser()
    admission = http.Admission(10, 10)
    shared = connection.Shared(limits, http.plain_error, admission, lambda **_: parser)
    conn = type("Conn", (connection.Connection,), {"shared": shared})(app_state={})
    transport = _Transport()
    conn.connection_made(transport)
    return conn, transport, parser


HEAD = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_a_heads_end_split_between_reads_is_found_and_its_bytes_counted_once() -> None:
    for cut in range(1, len(HEAD)):
        exact, transport, parser = _connection(len(HEAD))
        exact.data_received(HEAD[:cut])
        exact.data_received(HEAD[cut:] + b"GET")  # the next request's start is not this head's
        assert (parser.data, transport.writes) == (HEAD + b"GET", []), cut
        assert not exact.idle()  # a request in progress
        over, transport, parser = _connection(len(HEAD) - 1)
        over.data_received(HEAD[:cut])
        over.data_received(HEAD[cut:])
        assert transport.closed, cut
        assert transport.writes[0].startswith(b"HTTP/1.1 431 "), cut
        assert parser.data == HEAD[:cut], cut  # refused bytes are not parsed


async def test_a_pipelined_head_that_came_with_a_request_without_body_is_counted() -> None:
    """Bytes after a head in the same read go to the parser at once; once the request's app
    starts without a body to read, they are the next head's, and count."""
    two, transport, _ = _connection(2000)
    two.data_received(HEAD + HEAD)
    two.app_started(False)
    assert not transport.closed
    assert not two.idle()  # the second head ended: its request is in progress too
    endless, transport, _ = _connection(2000)
    endless.data_received(HEAD + b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 3000)
    endless.app_started(False)
    assert transport.aborted  # an answer is being written: a 431 would land inside it
