"""The connector host's pieces without a daemon: loading, the context's emit/deliver/close,
and the base webhook connector served in-process to a recording context."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import structlog

from agent_process import connector_context
from agent_process.connector_context import (
    ConnectorStartFailed,
    HostContext,
    Reply,
    load_connector,
)
from agent_process.loading import load_entry
from bundles.loader import load_bundle
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import AgentEvent, Source, SourceKind, response_to
from protocol.ids import ProcessId, ProcessKind
from protocol.messages import Event, Message
from protocol.stream import DeltaKind, StreamDelta

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests" / "fixtures" / "connectors"
BASE = REPO / "bundles" / "base"
webhook: Any = load_entry("./connectors/webhook.py", BASE)
cli: Any = load_entry("./connectors/cli.py", BASE)
PID = ProcessId(kind=ProcessKind.CONNECTOR, name="hook", instance_key="webhook", generation=3)


@pytest.fixture
def ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_PORT", "0")
    monkeypatch.setenv("SIGNED_PORT", "0")
    monkeypatch.setenv("SIGNED_SECRET", "s3cret")


# -- loading -------------------------------------------------------------------------------


def test_load_connector_merges_config_and_resolves_secrets(ports: None, tmp_path: Path) -> None:
    bundle = load_bundle(FIXTURE, state_root=tmp_path)
    loaded = load_connector(bundle, "signed", tmp_path)
    assert loaded.connector.name == "webhook"
    assert loaded.config["port"] == "0"  # the Connection's value wins over the Connector's
    assert loaded.config["host"] == "127.0.0.1"  # the Connector's default stays
    assert loaded.secrets == {"signingSecret": "s3cret"}
    assert loaded.start is not None


def test_a_list_of_value_sources_resolves_each_and_masks_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The api connector's `tokens: [{valueFrom: {env: ...}}, "literal"]`; its swarm summary."""
    monkeypatch.setenv("API_PORT", "0")
    monkeypatch.setenv("API_TOKEN", "token-from-env")
    bundle = load_bundle(REPO / "tests" / "fixtures" / "api", state_root=tmp_path)
    loaded = load_connector(bundle, "api", tmp_path)
    assert loaded.config["tokens"] == ["token-from-env", "second-token-for-rotation"]
    assert "token-from-env" in bundle.secret_values  # masked in every log
    assert [a.name for a in loaded.swarm.agents] == ["front", "back", "capped"]
    front = loaded.swarm.agents[0]
    assert front.description.startswith("Answers questions")
    assert [t.name for t in front.tools] == ["client__calendar", "clock__now"]
    assert loaded.swarm.instance_key == "main"


def test_a_missing_value_source_is_a_coded_start_failure(
    ports: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = load_bundle(FIXTURE, state_root=tmp_path)
    monkeypatch.delenv("SIGNED_SECRET")
    with pytest.raises(ConnectorStartFailed) as info:
        load_connector(bundle, "signed", tmp_path)
    assert info.value.error.code == ErrorCode.E_CONNECTOR_START_FAILED
    assert "SIGNED_SECRET" in info.value.error.message


def test_an_unknown_connection_is_a_coded_start_failure(ports: None, tmp_path: Path) -> None:
    bundle = load_bundle(FIXTURE, state_root=tmp_path)
    with pytest.raises(ConnectorStartFailed) as info:
        load_connector(bundle, "nope", tmp_path)
    assert "nope" in info.value.error.message


# -- the context ---------------------------------------------------------------------------


def host_context() -> tuple[HostContext, asyncio.Queue[Message]]:
    sent: asyncio.Queue[Message] = asyncio.Queue()

    async def send(msg: Message) -> None:
        sent.put_nowait(msg)

    ctx = HostContext(process_id=PID, send=send, config={}, secrets={}, connector="webhook")
    return ctx, sent


def answer(request: AgentEvent, text: str = "", **kw: Any) -> AgentEvent:
    agent = Source(kind=SourceKind.AGENT, name="front", instance_key="k")
    return response_to(request, source=agent, text=text, **kw)


async def test_emit_sends_a_connector_event_and_waits_for_its_answer() -> None:
    ctx, sent = host_context()
    async with asyncio.timeout(5):
        waiting = asyncio.ensure_future(ctx.emit("ticket", {"user": "ann"}, "hello"))
        frame = await sent.get()
        assert isinstance(frame, Event)
        assert frame.to == "orchestrator"
        assert frame.from_ == str(PID)
        event = frame.payload
        assert event.type == "ticket"
        assert event.metadata == {"user": "ann"}
        assert event.source.kind is SourceKind.CONNECTOR
        assert event.reply_to is not None
        assert event.reply_to.target == "connector:hook:webhook"  # the address, no generation
        assert ctx.deliver(answer(event, "hi ann"))
        reply = await waiting
    assert reply == Reply(event_id=event.id, text="hi ann")
    assert ctx.answered == 1  # reported to the supervisor as a completed turn
    assert not ctx.deliver(answer(event, "again"))  # answered once


async def test_an_error_answer_and_an_acceptance() -> None:
    ctx, sent = host_context()
    async with asyncio.timeout(5):
        first = asyncio.ensure_future(ctx.emit("x"))
        second = asyncio.ensure_future(ctx.emit("y"))
        events = [m.payload for m in [await sent.get(), await sent.get()] if isinstance(m, Event)]
        error = ErrorInfo(code=ErrorCode.E_CONNECTOR_NO_ROUTE, message="no rule")
        ctx.deliver(answer(events[0], error=error))
        ctx.deliver(answer(events[1], metadata={"accepted": True}))
        rejected, accepted = await first, await second
    assert rejected is not None
    assert rejected.error_code == "E_CONNECTOR_NO_ROUTE"
    assert ctx.answered == 1  # the acceptance counts, the error does not
    assert accepted is not None
    assert accepted.accepted


async def test_emit_without_reply_returns_at_once_and_close_fails_the_waiting() -> None:
    ctx, sent = host_context()
    async with asyncio.timeout(5):
        assert await ctx.emit("fire", reply=False) is None
        fired = await sent.get()
        assert isinstance(fired, Event)
        assert fired.payload.reply_to is None
        waiting = asyncio.ensure_future(ctx.emit("slow"))
        await sent.get()
        ctx.close()
        closed = await waiting
        after = await ctx.emit("late")
    assert closed is not None
    assert closed.error_code == ErrorCode.E_CONNECTOR_CLOSED
    assert after is not None
    assert after.error_code == ErrorCode.E_CONNECTOR_CLOSED


# -- the webhook connector, in-process ----------------------------------------------------


@dataclass
class EchoReply:
    event_id: str
    text: str
    accepted: bool = False
    error_code: str | None = None
    error_message: str | None = None


@dataclass
class RecordingContext:
    """A ConnectorContext whose emit answers like the orchestrator would."""

    config: Mapping[str, Any]
    secrets: Mapping[str, str] = field(default_factory=dict)
    connection: str = "hook"
    connector: str = "webhook"
    state: dict[str, Any] = field(default_factory=dict)
    run_id: str = "run"
    orchestrator_pid: int | None = None
    state_dir: Path | None = None
    logger: Any = field(default_factory=lambda: structlog.get_logger("test"))
    emitted: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)

    async def emit(
        self, event: str, properties: Mapping[str, Any] | None = None, text: str = "",
        *, reply: bool = True, idempotency_key: str | None = None,
    ) -> EchoReply | None:  # fmt: skip
        self.emitted.append((event, dict(properties or {}), text))
        if event == "unrouted":
            return EchoReply("e1", "", error_code="E_CONNECTOR_NO_ROUTE", error_message="none")
        if event == "later":
            return EchoReply("e2", "", accepted=True)
        return EchoReply("e3", f"echo {text}")


async def serve(ctx: RecordingContext) -> tuple[asyncio.Task[None], str]:
    await webhook.start(ctx)
    port = ctx.state["http"].address[1]
    return asyncio.ensure_future(webhook.run(ctx)), f"http://127.0.0.1:{port}"


async def test_webhook_answers_by_the_reply_kind() -> None:
    ctx = RecordingContext(config={"port": 0, "maxBodyBytes": 64})
    async with asyncio.timeout(10):
        task, url = await serve(ctx)
        try:
            async with httpx.AsyncClient() as client:
                ok = await client.post(url, json={"text": "hi", "instanceKey": "k1"})
                later = await client.post(f"{url}/events", json={"event": "later", "text": "x"})
                unrouted = await client.post(url, json={"event": "unrouted", "text": "x"})
                big = await client.post(url, content=b"x" * 65)
                wrong_type = await client.post(url, json={"text": 3})
                get = await client.get(url)
                health = await client.get(f"{url}/healthz")
                missing = await client.post(f"{url}/nowhere", json={})
        finally:
            task.cancel()
    assert ok.status_code == 200
    assert ok.json() == {"reply": "echo hi", "eventId": "e3"}
    assert ctx.emitted[0] == ("message", {"instanceKey": "k1"}, "hi")
    assert (later.status_code, later.json()) == (202, {"accepted": True, "eventId": "e2"})
    assert unrouted.status_code == 422
    assert unrouted.json()["error"]["code"] == "E_CONNECTOR_NO_ROUTE"
    assert big.status_code == 413
    assert wrong_type.status_code == 400
    assert get.status_code == 405
    assert health.json() == {"ok": True}
    assert missing.status_code == 404


async def test_webhook_answers_a_stalled_request_with_408() -> None:
    ctx = RecordingContext(config={"port": 0, "readTimeoutMs": 50})
    async with asyncio.timeout(10):
        task, url = await serve(ctx)
        try:
            port = int(url.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n{")
            await writer.drain()
            answer = await reader.read()
            writer.close()
        finally:
            task.cancel()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"E_WEBHOOK_TIMEOUT" in answer
    assert ctx.emitted == []


def _headers(secret: bytes | None, body: bytes, stamp: int, **extra: str) -> dict[str, str]:
    headers = {"Content-Type": "application/json", **extra}
    if secret is not None:
        headers["X-Goondan-Timestamp"] = str(stamp)
        headers["X-Goondan-Signature"] = webhook.guard.sign(secret, str(stamp), body)
    return headers


async def test_requests_a_web_page_can_make_are_refused() -> None:
    """A no-cors POST (text/plain, with the page's Origin) ran shell commands through the
    workspace example; a rebinding page's Host is its own name."""
    ctx = RecordingContext(config={"port": 0, "allowedOrigins": ["https://ops.example"]})
    body = b'{"text": "run id"}'
    async with asyncio.timeout(10):
        task, url = await serve(ctx)
        try:
            async with httpx.AsyncClient() as client:

                async def post(**headers: str) -> httpx.Response:
                    return await client.post(url, content=body, headers=headers)

                json_type = "application/json"
                page = await post(**{"Content-Type": "text/plain", "Origin": "http://evil.example"})
                plain = await post(**{"Content-Type": "text/plain"})
                origin = await post(**{"Content-Type": json_type, "Origin": "http://evil.example"})
                rebound = await post(**{"Content-Type": json_type, "Host": "evil.example"})
                allowed = await post(**{"Content-Type": json_type, "Origin": "https://ops.example"})
        finally:
            task.cancel()
    assert [r.status_code for r in (page, plain, origin, rebound)] == [403, 415, 403, 421]
    codes = [r.json()["error"]["code"] for r in (page, plain, origin, rebound)]
    assert codes == ["E_HTTP_ORIGIN", "E_HTTP_CONTENT_TYPE", "E_HTTP_ORIGIN", "E_HTTP_HOST"]
    assert allowed.status_code == 200
    assert ctx.emitted == [("message", {}, "run id")]  # only the allowed origin's request


async def test_a_signed_request_is_fresh_and_used_once(tmp_path: Path) -> None:
    """The same signed body started two turns: the signature covered only the body."""
    secret = b"k"
    ctx = RecordingContext(config={"port": 0}, secrets={"signingSecret": "k"}, state_dir=tmp_path)
    body = b'{"text": "once"}'
    now = int(time.time())
    async with asyncio.timeout(10):
        task, url = await serve(ctx)
        try:
            async with httpx.AsyncClient() as client:
                unsigned = await client.post(url, content=body, headers=_headers(None, body, now))
                first = await client.post(url, content=body, headers=_headers(secret, body, now))
                replay = await client.post(url, content=body, headers=_headers(secret, body, now))
                stale = await client.post(
                    url, content=body, headers=_headers(secret, body, now - 3600)
                )
                forged = _headers(secret, body, now + 1)
                forged["X-Goondan-Timestamp"] = str(now + 2)  # a signature of another time
                moved = await client.post(url, content=body, headers=forged)
        finally:
            task.cancel()
        restarted, url = await serve(ctx)  # a new server on the same state directory
        try:
            async with httpx.AsyncClient() as client:
                again = await client.post(url, content=body, headers=_headers(secret, body, now))
                fresh = await client.post(
                    url, content=body, headers=_headers(secret, body, now + 1)
                )
        finally:
            restarted.cancel()
    assert (unsigned.status_code, first.status_code, replay.status_code) == (401, 200, 409)
    assert replay.json()["error"]["code"] == "E_WEBHOOK_REPLAY"
    assert stale.json()["error"]["code"] == "E_WEBHOOK_STALE"
    assert moved.status_code == 401
    assert (again.status_code, fresh.status_code) == (409, 200)
    assert [text for _, _, text in ctx.emitted] == ["once", "once"]  # first, then fresh


async def test_an_unsigned_webhook_beyond_loopback_does_not_start() -> None:
    ctx = RecordingContext(config={"port": 0, "host": "0.0.0.0"})
    with pytest.raises(RuntimeError, match="signingSecret"):
        await webhook.start(ctx)
    opted_in = RecordingContext(config={"port": 0, "host": "0.0.0.0", "allowUnsigned": True})
    await webhook.start(opted_in)
    opted_in.state["http"].socket.close()


@pytest.mark.parametrize("value", ["no", "0", "off"])
async def test_allow_unsigned_is_true_or_false_never_a_guess(value: str) -> None:
    """`allowUnsigned: "no"` was truthy (`bool("no")`): it opened the server to unsigned
    requests. A value that is not true or false stops the start, naming the setting."""
    ctx = RecordingContext(config={"port": 0, "host": "0.0.0.0", "allowUnsigned": value})
    with pytest.raises(RuntimeError, match="allowUnsigned"):
        await webhook.start(ctx)


async def test_allow_unsigned_does_not_open_rpc_and_no_event_poses_as_an_answer() -> None:
    """An answer decides a pending call (an approval too): only a signed `/rpc` takes one."""
    ctx = RecordingContext(config={"port": 0, "allowUnsigned": True})
    answer = {"jsonrpc": "2.0", "id": "c1", "result": {"approved": True}}
    posing = {"event": "deferred.answer", "properties": {"rpc": answer}}
    async with asyncio.timeout(10):
        task, url = await serve(ctx)
        try:
            async with httpx.AsyncClient() as client:
                rpc = await client.post(f"{url}/rpc", json=answer)
                posed = await client.post(f"{url}/events", json=posing)
        finally:
            task.cancel()
    assert (rpc.status_code, rpc.json()["error"]["code"]) == (403, "E_CONNECTOR_UNSIGNED")
    assert "signingSecret" in rpc.json()["error"]["message"]
    assert (posed.status_code, posed.json()["error"]["code"]) == (400, "E_WEBHOOK_BAD_BODY")
    assert ctx.emitted == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"text": "a"}', ("message", {}, "a")),
        (b'{"input": "b", "event": "e"}', ("e", {}, "b")),
        (b'{"properties": {"u": 1}, "instanceKey": "k"}',
         ("message", {"u": 1, "instanceKey": "k"}, "")),
        (b'{"properties": {"instanceKey": "p"}, "instanceKey": "k"}',
         ("message", {"instanceKey": "p"}, "")),
    ],
)  # fmt: skip
def test_parse_body(body: bytes, expected: tuple[str, dict[str, Any], str]) -> None:
    assert webhook.parse_body(body, "message") == expected


@pytest.mark.parametrize(
    "body", [b"{", b"\xff", b"[]", b'{"event": ""}', b'{"properties": []}', b'{"instanceKey": 1}']
)
def test_parse_body_refuses(body: bytes) -> None:
    with pytest.raises(webhook.HttpError) as info:
        webhook.parse_body(body, "message")
    assert info.value.status == 400


def test_cli_reply_format() -> None:
    assert cli.format_reply("hi", None, None) == "hi\n"
    assert cli.format_reply("", "E_X", "bad") == "error E_X: bad\n"


async def test_cli_lines_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "input"
    path.write_bytes(b"one\ntwo\n")
    async with asyncio.timeout(5):
        with path.open("rb") as stream:
            got = [line async for line in cli.lines(stream)]
    assert got == ["one\n", "two\n"]


def test_the_base_package_declares_both_connectors() -> None:
    doc = (BASE / "goondan.yaml").read_text()
    assert "entry: ./connectors/webhook.py" in doc
    assert "entry: ./connectors/cli.py" in doc


async def test_an_emit_with_on_delta_asks_for_the_stream_and_gets_its_deltas() -> None:
    ctx, sent = host_context()
    seen: list[StreamDelta] = []

    def broken(delta: StreamDelta) -> None:
        raise RuntimeError("a connector bug")

    async with asyncio.timeout(5):
        waiting = asyncio.ensure_future(ctx.emit("chat", text="hi", on_delta=seen.append))
        other = asyncio.ensure_future(ctx.emit("chat", text="plain"))
        bad = asyncio.ensure_future(ctx.emit("chat", text="bad", on_delta=broken))
        frames = [await sent.get() for _ in range(3)]
        streamed, plain, buggy = [m.payload for m in frames if isinstance(m, Event)]
        assert streamed.reply_to is not None and streamed.reply_to.stream
        assert plain.reply_to is not None and not plain.reply_to.stream
        assert buggy.reply_to is not None
        piece = StreamDelta(correlation_id=streamed.reply_to.correlation_id, seq=0,
                            kind=DeltaKind.TEXT, step=1, text="h")  # fmt: skip
        assert ctx.deliver_delta(piece)
        stray = msgspec.structs.replace(piece, correlation_id=plain.reply_to.correlation_id)
        assert not ctx.deliver_delta(stray)  # nobody asked for that one
        failing = msgspec.structs.replace(piece, correlation_id=buggy.reply_to.correlation_id)
        assert ctx.deliver_delta(failing)  # the callback's failure is logged, not raised
        for event, text in ((streamed, "hi!"), (plain, "ok"), (buggy, "b")):
            ctx.deliver(answer(event, text))
        reply, _, _ = await waiting, await other, await bad
    assert seen == [piece] and reply is not None and reply.text == "hi!"
    assert not ctx.deliver_delta(piece)  # the emit is over


async def test_an_answer_that_streams_hears_the_resumed_turn_under_its_first_emits_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx, sent = host_context()
    seen: list[StreamDelta] = []
    async with asyncio.timeout(5):
        asking = asyncio.ensure_future(ctx.emit("chat", text="calendar", on_delta=seen.append))
        first = (await sent.get()).payload
        assert isinstance(first, AgentEvent) and first.reply_to is not None
        turn = first.reply_to.correlation_id
        ctx.deliver(answer(first, "[pending call c1]", metadata={"pendingCall": "c1"}))
        await asking

        rpc = {"jsonrpc": "2.0", "id": "c1", "result": "ok"}
        resolving = asyncio.ensure_future(
            ctx.emit("deferred.answer", {"rpc": rpc}, on_delta=seen.append)
        )
        second = (await sent.get()).payload
        assert isinstance(second, AgentEvent) and second.reply_to is not None
        piece = StreamDelta(correlation_id=turn, seq=0, kind=DeltaKind.TEXT, step=1, text="c")
        assert ctx.deliver_delta(piece)  # the resumed turn streams under the first emit's id
        ctx.deliver(answer(second, "calendar says ok"))
        await resolving
        ctx._remember_call(answer(first, metadata={"pendingCall": "c2"}), turn)
        rpc2 = {"jsonrpc": "2.0", "id": "c2", "result": "ok"}
        waiting = asyncio.ensure_future(ctx.emit("deferred.answer", {"rpc": rpc2}))  # whole
        third = (await sent.get()).payload
        assert isinstance(third, AgentEvent)
        ctx.deliver(answer(third, "calendar says ok again"))
        whole = await waiting
    assert seen == [piece]
    assert whole is not None and whole.text == "calendar says ok again"
    assert not ctx.deliver_delta(piece)  # the answers' waits are over

    monkeypatch.setattr(connector_context, "CALL_TURNS_KEPT", 2)
    for i in range(5):  # a client that never answers does not grow the connector
        ctx._remember_call(answer(first, metadata={"pendingCall": f"x{i}"}), turn)
    assert list(ctx._call_turns) == ["x3", "x4"]
