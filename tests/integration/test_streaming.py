"""Streaming through the real daemon: a scripted model that writes its reply in pieces, the
agent's `delta` frames, the router, the control socket and `goondan send` (ARCHITECTURE.md §4).
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from orchestrator.control.client import call
from orchestrator.control.rundir import read_active
from protocol.codec import decode_control_reply, encode
from protocol.control import STREAM_WINDOW, ControlReply, OrchestratorInfo, SendText
from protocol.endpoints import StateLayout
from protocol.stream import DeltaKind, StreamDelta
from tests.integration.conftest import StartDaemon
from tests.integration.harness import PYTHON, REPO, Daemon, child_env, run_cli, with_token

FIXTURE = REPO / "tests" / "fixtures" / "streaming"
WRITER = "agent:writer:main"


def info_of(daemon: Daemon) -> OrchestratorInfo:
    info = read_active(StateLayout.from_env().run_paths(daemon.swarm).active_json)
    assert info is not None
    return info


@asynccontextmanager
async def control(daemon: Daemon) -> AsyncIterator[tuple[zmq.asyncio.Socket, str]]:
    """A raw control connection (what `goondan send` opens), and its endpoint."""
    endpoint = info_of(daemon).endpoints["control"]
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        yield sock, endpoint
    finally:
        sock.close()
        ctx.term()


def streaming(text: str, **fields: Any) -> SendText:
    return SendText(request_id=os.urandom(4).hex(), text=text, stream=True, timeout_ms=60_000,
                    **fields)  # fmt: skip


def lines_of(out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`send --json` output: the delta lines, then the response event's line."""
    *deltas, final = [json.loads(line) for line in out.splitlines()]
    return deltas, final


def assistant_texts() -> list[str]:
    paths = StateLayout.from_env().instance_paths("stream", "main", "writer")
    messages = [json.loads(line) for line in paths.base_jsonl.read_text().splitlines()]
    return [m["content"] for m in messages if m["role"] == "assistant"]


async def test_send_json_prints_ordered_deltas_and_tool_progress(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        await start_daemon(FIXTURE, swarm="stream")
        code, out, err = await run_cli("send", "--json", "hello streaming world")
        assert code == 0, err
        deltas, final = lines_of(out)
        assert final["type"] == "agent.response" and final["input"] == "echo: hello streaming world"
        assert [d["seq"] for d in deltas] == list(range(len(deltas))) and len(deltas) == 7
        assert {d["type"] for d in deltas} == {"text.delta"}
        assert "".join(d["text"] for d in deltas) == final["input"]
        assert all(len(d["text"]) <= 4 for d in deltas)  # streamChunkChars: 4

        code, out, err = await run_cli("send", "--json", "tool please")
        assert code == 0, err
        deltas, final = lines_of(out)
        kinds = [(d["type"], d["step"]) for d in deltas]
        first_tool = kinds.index(("tool.started", 1))
        assert kinds[first_tool + 1] == ("tool.finished", 1)
        assert set(kinds[:first_tool]) == {("text.delta", 1)}
        assert set(kinds[first_tool + 2 :]) == {("text.delta", 2)}
        started, finished = deltas[first_tool : first_tool + 2]
        assert started["tool"] == finished["tool"] == "clock__now"
        assert started["toolCallId"] == finished["toolCallId"] and finished["status"] == "ok"
        step_two = "".join(d["text"] for d in deltas if d["step"] == 2)
        assert step_two == final["input"] == "it is noon now"

        code, out, _ = await run_cli("send", "hello plain")  # stdout is a pipe: the reply only
        assert (code, out) == (0, "echo: hello plain\n")
        # what the conversation holds is the same whether the turn was streamed or not
        assert assistant_texts() == ["echo: hello streaming world", "let me look",
                                     "it is noon now", "echo: hello plain"]  # fmt: skip


async def test_a_terminal_shows_the_reply_while_it_is_written(start_daemon: StartDaemon) -> None:
    """`goondan send` on a pseudo-terminal: the first piece is on screen while the model is
    still writing the rest (the scripted model waits 0.7 s between pieces)."""
    async with asyncio.timeout(90):
        await start_daemon(FIXTURE, swarm="stream")
        leader, follower = pty.openpty()
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator", "send", "slow", stdin=subprocess.DEVNULL,
            stdout=follower, stderr=subprocess.PIPE, env=child_env(),
        )  # fmt: skip
        os.close(follower)
        seen = b""
        try:
            while b"one " not in seen:
                seen += await asyncio.to_thread(os.read, leader, 1024)
            assert proc.returncode is None, "the first piece came only at the end"
            assert b"three" not in seen
            while True:
                try:
                    chunk = await asyncio.to_thread(os.read, leader, 1024)
                except OSError:  # EIO: the writer closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
        finally:
            os.close(leader)
            _, err = await proc.communicate()
        assert proc.returncode == 0, err
        assert seen.replace(b"\r\n", b"\n") == b"one two three\n"

        code, out, _ = await run_cli("send", "--no-stream", "slow")
        assert (code, out) == (0, "one two three\n")


async def test_a_client_gone_mid_stream_leaves_the_turn_to_finish(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        daemon = await start_daemon(FIXTURE, swarm="stream")
        mark = daemon.mark()
        async with control(daemon) as (sock, endpoint):
            await sock.send(encode(with_token(streaming("slow"), endpoint)))
            first = decode_control_reply(await sock.recv())
            assert first.delta is not None and first.delta.text == "one "
        # the client is gone; the turn goes on, ends and is recorded
        await daemon.wait_for(
            "transition", since=mark, process=f"{WRITER}:1", source="processing", target="idle"
        )
        assert assistant_texts() == ["one two three"]
        async with control(daemon) as (sock, endpoint):  # a client that does not ask: no deltas
            plain = msgspec.structs.replace(streaming("after"), stream=False)
            await sock.send(encode(with_token(plain, endpoint)))
            reply = decode_control_reply(await sock.recv())
        assert not reply.interim and reply.ok and reply.result["input"] == "echo: after"

        async with control(daemon) as (sock, endpoint):  # a stream needs a waiting client
            await sock.send(encode(with_token(streaming("x", wait=False), endpoint)))
            refused = decode_control_reply(await sock.recv())
        assert not refused.ok and refused.error is not None
        assert refused.error.code == "E_CONTROL_BAD_REQUEST" and "wait" in refused.error.message


async def test_a_reader_that_does_not_read_costs_a_window_and_still_gets_the_reply(
    start_daemon: StartDaemon,
) -> None:
    """20,000 deltas for a client that reads nothing until the turn is over: the daemon sends
    at most its window, holds a bounded merge of the rest, and the reply still arrives whole."""
    big = "big " + "x" * 399_996
    async with asyncio.timeout(120):
        daemon = await start_daemon(FIXTURE, swarm="stream")
        mark = daemon.mark()
        async with control(daemon) as (sock, endpoint):
            await sock.send(encode(with_token(streaming(big), endpoint)))
            await daemon.wait_for(
                "transition", since=mark, process=f"{WRITER}:1", source="processing", target="idle"
            )
            replies: list[ControlReply] = []
            while not replies or replies[-1].interim:
                replies.append(decode_control_reply(await sock.recv()))
        *interim, final = replies
        assert final.ok and final.result["input"] == big
        text = "".join(r.delta.text for r in interim if r.delta is not None)
        assert big.startswith(text) and len(text) >= STREAM_WINDOW * 20
        assert len(interim) <= STREAM_WINDOW + 2, len(interim)


async def test_a_reader_that_keeps_up_gets_more_than_a_window(start_daemon: StartDaemon) -> None:
    """The CLI's own client acknowledges what it read, so a long stream keeps flowing."""
    big = "big " + "y" * 199_996
    async with asyncio.timeout(120):
        daemon = await start_daemon(FIXTURE, swarm="stream")
        deltas: list[StreamDelta] = []
        reply = await asyncio.to_thread(call, info_of(daemon), streaming(big), 60.0,
                                        deltas.append)  # fmt: skip
        assert reply.ok and reply.result["input"] == big
        assert len(deltas) > STREAM_WINDOW and {d.kind for d in deltas} == {DeltaKind.TEXT}
        assert big.startswith("".join(d.text for d in deltas))
        assert [d.seq for d in deltas] == sorted(d.seq for d in deltas)
