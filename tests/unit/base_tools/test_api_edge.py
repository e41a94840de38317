"""The `api` connector's pure parts, loaded by path as the connector host does: coded errors
to HTTP statuses, the reply seam, OpenAI request parsing, A2A answers, and the start checks.
The protocols themselves are driven with their real clients in tests/integration/test_api_*."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog

from agent_process.connector_context import AgentInfo, SwarmInfo
from agent_process.loading import load_entry
from protocol.stream import DeltaKind, StreamDelta

from .conftest import BASE

api: Any = load_entry("./connectors/api.py", BASE)
edge, openai, a2a = api.edge, api.openai, api.a2a


SWARM = SwarmInfo("s", "a", "main", (AgentInfo("a"), AgentInfo("b")))


@dataclass
class Reply:
    event_id: str = "e1"
    text: str = ""
    accepted: bool = False
    error_code: str | None = None
    error_message: str | None = None
    deferred: Mapping[str, Any] | None = None
    usage: Mapping[str, int] = field(default_factory=dict)


@dataclass
class Ctx:
    config: Mapping[str, Any] = field(default_factory=dict)
    connection: str = "api"
    swarm: SwarmInfo = field(default_factory=lambda: SWARM)
    logger: Any = field(default_factory=structlog.get_logger)
    answer: Reply = field(default_factory=Reply)
    emitted: list[dict[str, Any]] = field(default_factory=list)

    async def emit(self, event: str, properties: Any = None, text: str = "", **kw: Any) -> Reply:
        self.emitted.append({"event": event, "properties": properties, "text": text, **kw})
        return self.answer


@pytest.mark.parametrize(
    ("code", "status"),
    [("E_AGENT_NOT_FOUND", 404), ("E_AGENT_CAPACITY", 429), ("E_MODEL_RATE_LIMIT", 429),
     ("E_AGENT_BACKOFF", 503), ("E_AGENT_TIMEOUT", 504), ("E_AGENT_TURN_FAILED", 502)],
)  # fmt: skip
def test_a_coded_error_has_its_http_status(code: str, status: int) -> None:
    done = edge.done_of(Reply(error_code=code, error_message="why"))
    assert (done.error.status, done.error.code, done.error.message) == (status, code, "why")


async def test_the_seam_yields_the_reply_and_addresses_the_agent() -> None:
    ctx = Ctx(answer=Reply(text="hi", usage={"inputTokens": 3, "outputTokens": 2}))
    seam = edge.Edge(ctx, 5.0, frozenset({"a"}))
    async with asyncio.timeout(5):
        pieces = [p async for p in seam.pieces("a", "k", "hello", idempotency_key="i1")]
    assert [(p.text, p.done.text) for p in pieces] == [("hi", "hi")]
    assert edge.usage_tokens(pieces[0].done.usage) == (3, 2)
    sent = ctx.emitted[0]
    assert (sent["agent"], sent["instance_key"], sent["idempotency_key"]) == ("a", "k", "i1")
    with pytest.raises(edge.Refusal) as unknown:
        seam.check_agent("b")  # in the swarm, not served by this Connection
    assert unknown.value.status == 404
    # a client's instance and idempotency key are its token's own, in the Connection's namespace
    assert seam.key("t1", None, "", "h") == "api:api:t1:h" and seam.key("t1") == "api:api:t1:main"
    assert seam.idempotency("t1", "i1") == "t1:i1" and seam.idempotency("t1", None) is None
    shared = edge.Edge(ctx, 5.0, frozenset({"a"}), shared=True)
    assert shared.key("t1", "h") == shared.key("t2", "h") == "api:api:h"
    assert shared.idempotency("t1", "i1") != shared.idempotency("t2", "i1")
    with pytest.raises(edge.Refusal) as anonymous:
        seam.key("", "h")  # only the gate's header names the token
    assert anonymous.value.status == 401


def _delta(seq: int, step: int, text: str = "", **tool: Any) -> StreamDelta:
    kind = DeltaKind.TEXT if not tool else tool.pop("kind")
    return StreamDelta(correlation_id="c", seq=seq, kind=kind, step=step, text=text, **tool)


@dataclass
class StreamingCtx(Ctx):
    deltas: list[StreamDelta] = field(default_factory=list)

    async def emit(self, event: str, properties: Any = None, text: str = "", **kw: Any) -> Reply:
        on_delta = kw["on_delta"]
        for delta in self.deltas:  # as the connector host hands them over, then the reply
            on_delta(delta)
            await asyncio.sleep(0)
        return await super().emit(event, properties, text, **kw)


async def test_a_streamed_reply_is_a_piece_per_delta_then_the_rest() -> None:
    started = {"kind": DeltaKind.TOOL_STARTED, "tool": "t", "tool_call_id": "k"}
    finished = {"kind": DeltaKind.TOOL_FINISHED, "tool": "t", "tool_call_id": "k", "status": "ok"}
    ctx = StreamingCtx(answer=Reply(text="it is noon now"), deltas=[
        _delta(0, 1, "let me"), _delta(1, 1, " look"), _delta(2, 1, **started),
        _delta(3, 1, **finished), _delta(4, 2, "it is "), _delta(5, 2, "noon"),
    ])  # fmt: skip
    seam = edge.Edge(ctx, 5.0, frozenset({"a"}))
    async with asyncio.timeout(5):
        pieces = [p async for p in seam.pieces("a", "k", "what time", stream=True)]
    assert [(p.text, p.fresh) for p in pieces if p.tool is None] == [
        ("let me", False),
        (" look", False),
        ("it is ", True),
        ("noon", False),
        (" now", False),
    ]
    assert [(p.tool.name, p.tool.status) for p in pieces if p.tool] == [("t", None), ("t", "ok")]
    assert pieces[-1].done.text == "it is noon now" and ctx.emitted[0]["on_delta"] is not None


@pytest.mark.skipif(not edge.EAGER, reason="tasks start eagerly on Python 3.12+")
async def test_a_streamed_request_emits_before_its_task_first_waits() -> None:
    """The event leaves in the step that asks for the stream, not after a turn of the event
    loop: the first piece's wait starts with the emit already made."""
    ctx = Ctx(answer=Reply(text="hi"))
    seam = edge.Edge(ctx, 5.0, frozenset({"a"}))
    pieces = seam.pieces("a", "k", "hello", stream=True)
    step = anext(pieces).__await__()
    next(step)  # one step of the request's task, up to its first wait
    assert [e["text"] for e in ctx.emitted] == ["hello"]
    step.close()
    await pieces.aclose()


async def test_a_reader_behind_gets_a_steps_waiting_text_as_one_delta() -> None:
    backlog = edge.Backlog()
    started = {"kind": DeltaKind.TOOL_STARTED, "tool": "t", "tool_call_id": "k"}
    for delta in (_delta(0, 1, "a"), _delta(1, 1, "b"), _delta(2, 1, **started),
                  _delta(3, 2, "c"), _delta(4, 2, "d"), _delta(5, 3, "e")):  # fmt: skip
        backlog.put(delta)
    backlog.put(None)
    async with asyncio.timeout(5):
        taken = [await backlog.get() for _ in range(5)]
    assert [(d.kind, d.step, d.text, d.seq) for d in taken[:4]] == [
        (DeltaKind.TEXT, 1, "ab", 1), (DeltaKind.TOOL_STARTED, 1, "", 2),
        (DeltaKind.TEXT, 2, "cd", 4), (DeltaKind.TEXT, 3, "e", 5)]  # fmt: skip
    assert taken[4] is None
    backlog.put(_delta(6, 3, "f"))  # a reader that keeps up: one delta each
    async with asyncio.timeout(5):
        assert (await backlog.get()).text == "f"


async def test_after_a_lost_delta_the_text_waits_for_the_reply_and_nothing_repeats() -> None:
    """A delta dropped on the way (seq 2 is missing): the text after it is held back, tool
    deltas still pass, and the reply finishes what was shown (the client's chunks add up to
    the reply, with no part of it twice)."""
    started = {"kind": DeltaKind.TOOL_STARTED, "tool": "t", "tool_call_id": "k"}
    ctx = StreamingCtx(answer=Reply(text="abcdef"), deltas=[
        _delta(0, 1, "ab"), _delta(1, 1, "c"), _delta(3, 1, "e"), _delta(4, 1, **started),
        _delta(5, 1, "f"),
    ])  # fmt: skip
    seam = edge.Edge(ctx, 5.0, frozenset({"a"}))
    async with asyncio.timeout(5):
        pieces = [p async for p in seam.pieces("a", "k", "x", stream=True)]
    assert "".join(p.text for p in pieces) == "abcdef"
    assert [p.text for p in pieces if p.tool is None] == ["ab", "c", "def"]
    assert [p.tool.name for p in pieces if p.tool] == ["t"]


@pytest.mark.parametrize(
    ("streamed", "reply", "last"),
    [([], "whole", ("whole", False)),  # nothing streamed: all of it
     (["wh", "o"], "whole", ("le", False)),  # the rest
     (["wh", "le"], "whole", ("whole", True)),  # a delta lost on the way: start over
     (["whole"], "whole", ("", False))],
)  # fmt: skip
def test_the_last_piece_holds_what_the_deltas_did_not(
    streamed: list[str], reply: str, last: tuple[str, bool]
) -> None:
    shown = edge.Shown()
    for seq, text in enumerate(streamed):
        shown.piece(_delta(seq, 1, text))
    piece = shown.last(edge.Done("e", reply))
    assert (piece.text, piece.fresh) == last and piece.done.text == reply


async def test_an_answer_is_a_json_rpc_response_and_a_call_ends_the_reply() -> None:
    call = {"jsonrpc": "2.0", "id": "c1", "method": "m", "params": {}}
    ctx = Ctx(answer=Reply(deferred=call))
    seam = edge.Edge(ctx, 5.0, frozenset({"a"}))
    async with asyncio.timeout(5):
        done = await edge.whole(seam.answer("c0", result={"x": 1}))
    assert done.call == call and done.text == ""
    assert ctx.emitted[0]["properties"] == {"rpc": {"jsonrpc": "2.0", "id": "c0",
                                                    "result": {"x": 1}}}  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [b"{", b"[]", b'{"model": "a"}', b'{"model": "a", "messages": []}',
     b'{"model": "a", "messages": [{"role": "user", "content": 3}]}'],
)  # fmt: skip
def test_bad_chat_requests_are_400(body: bytes) -> None:
    with pytest.raises(edge.Refusal) as refused:
        openai.parse(body)
    assert refused.value.status == 400


def test_the_input_is_the_last_user_message_and_tool_messages_are_answers() -> None:
    chat = openai.parse(
        b'{"model": "a", "messages": [{"role": "user", "content": "one"},'
        b'{"role": "assistant", "content": "x"}, {"role": "user", "content":'
        b'[{"type": "text", "text": "tw"}, {"type": "text", "text": "o"}]}]}'
    )
    assert openai.user_input(chat) == "two" and openai.tool_answers(chat) == []
    answered = openai.parse(
        b'{"model": "a", "messages": [{"role": "user", "content": "q"},'
        b'{"role": "tool", "tool_call_id": "c1", "content": "{}"}]}'
    )
    assert [m.tool_call_id for m in openai.tool_answers(answered)] == ["c1"]
    nameless = openai.parse(b'{"model": "a", "messages": [{"role": "tool", "content": "{}"}]}')
    with pytest.raises(edge.Refusal):
        openai.tool_answers(nameless)
    assert openai.error_body(429, "E_X", "m")["error"]["type"] == "rate_limit_error"


def test_an_a2a_answer_is_a_json_rpc_response_or_the_result_itself() -> None:
    from a2a.helpers.proto_helpers import new_data_part, new_text_part

    assert a2a.answer_of([new_data_part({"result": {"n": 1}})]) == {"result": {"n": 1.0}}
    error = {"code": -32001, "message": "no"}
    assert a2a.answer_of([new_data_part({"error": error})]) == {"error": error}
    assert a2a.answer_of([new_data_part({"events": []})]) == {"result": {"events": []}}
    assert a2a.answer_of([new_text_part('{"ok": true}')]) == {"result": {"ok": True}}
    assert a2a.answer_of([new_text_part("yes")]) == {"result": "yes"}


def test_the_api_connector_will_not_start_open_or_with_strangers() -> None:
    with pytest.raises(RuntimeError, match="tokens"):
        api.Api(Ctx(config={}))
    with pytest.raises(RuntimeError, match="nobody"):
        api.Api(Ctx(config={"tokens": ["t"], "agents": ["a", "nobody"]}))
    assert api.Api(Ctx(config={"tokens": "t1, t2", "agents": "b"})).edge.agents == {"b"}


@pytest.mark.parametrize(
    ("delta", "finish"),
    [({"role": "assistant", "content": ""}, None), ({"content": 'a "quoted"\nline ✓'}, None),
     ({}, "stop"), ({"tool_calls": [{"index": 0, "id": "c1", "type": "function"}]}, None),
     ({}, "tool_calls")],
)  # fmt: skip
def test_a_chunk_from_the_template_is_the_bytes_of_the_whole_chunk_encoded(
    delta: dict[str, Any], finish: str | None
) -> None:
    import msgspec

    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 7, "model": "a"}
    whole = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    assert (
        openai.ChunkTemplate(head)(delta, finish)
        == b"data: " + msgspec.json.encode(whole) + b"\n\n"
    )


def test_completion_ids_are_32_hex_digits_and_never_repeat_in_a_server() -> None:
    ids, other = openai.CompletionIds(), openai.CompletionIds()
    taken = [ids.next() for _ in range(1000)] + [other.next() for _ in range(1000)]
    assert len(set(taken)) == 2000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in taken)


def test_the_host_check_answers_the_same_when_asked_again() -> None:
    """Its IP parse is remembered per name: a name refused once is refused every time."""
    policy = api.guard.BrowserPolicy.of({})
    for _ in range(2):
        api.guard.check_browser({"host": "127.0.0.1:8790"}, policy)
        api.guard.check_browser({"host": "[::1]:8790"}, policy)
        with pytest.raises(api.guard.HttpError) as foreign:
            api.guard.check_browser({"host": "evil.example:8790"}, policy)
        assert (foreign.value.status, foreign.value.code) == (421, "E_HTTP_HOST")
