"""The telegram and slack connectors through a real daemon, against fake chat APIs.

The fakes are asyncio HTTP servers on 127.0.0.1 in this test process: the Telegram one serves
getMe / getUpdates (long polling: it holds the request until an update at or after the
offset exists, and never forgets an update, so a connector that lost its offset would see old
ones again) / sendMessage / editMessageText / sendChatAction; the Slack one serves
chat.postMessage and chat.update. Both note when each call came. The scripted agent answers
"bot says: <input>", streams "streamed: <input>" in 3-character pieces for an input that
starts with "stream", and runs a half-second tool for one that starts with "tool".
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import os
import signal
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, free_port

FIXTURE = REPO / "tests" / "fixtures" / "chat_connectors"
TG_TOKEN = "123456:fake-telegram-token"
SLACK_TOKEN = "xoxb-fake-slack-token"
SLACK_SECRET = "slack-signing-secret"
TG = "connector:tg:telegram"
SL = "connector:sl:slack"

Handler = Callable[[str, dict[str, str], Any], Awaitable[tuple[int, Any]]]


TEXT_FIELDS = frozenset({"text", "action", "callback_query_id"})
"""The Bot API parameters the connector sends as strings (the others are numbers or JSON)."""


def decode(headers: dict[str, str], raw: bytes) -> Any:
    """A request body: Slack's calls are JSON; python-telegram-bot posts a form whose
    non-string values are JSON (`reply_parameters`, `reply_markup`, ids)."""
    if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        fields = urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True)
        return {k: v if k in TEXT_FIELDS else json.loads(v) for k, v in fields}
    return json.loads(raw or b"{}")


class FakeHttp:
    """A minimal JSON-over-HTTP server: every request is (path, headers, decoded body)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> FakeHttp:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # httpx keeps connections alive
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                status, payload = await self.handler(path, headers, decode(headers, raw))
                body = json.dumps(payload).encode()
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class FakeTelegram:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.calls: list[tuple[float, str, dict[str, Any]]] = []
        """(when, method, body) of every sendMessage, editMessageText and sendChatAction."""
        self.offsets: list[int] = []
        self.get_me = 0
        self.changed = asyncio.Condition()

    async def handle(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        prefix = f"/bot{TG_TOKEN}/"
        if not path.startswith(prefix):
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        method = path.removeprefix(prefix)
        async with self.changed:
            if method == "getMe":
                self.get_me += 1
                self.changed.notify_all()
                return 200, {"ok": True, "result": {"id": 1, "is_bot": True, "username": "fake"}}
            if method in ("sendMessage", "editMessageText", "sendChatAction"):
                self.calls.append((time.monotonic(), method, body))
                self.changed.notify_all()
            if method == "sendMessage":
                self.sent.append(body)
                return 200, {"ok": True, "result": sent(9000 + len(self.sent), body)}
            if method == "editMessageText":
                return 200, {"ok": True, "result": sent(body["message_id"], body)}
            if method == "sendChatAction":
                return 200, {"ok": True, "result": True}
            if method == "getUpdates":
                return 200, {"ok": True, "result": await self._poll(body)}
        return 404, {"ok": False, "description": f"no method {method}"}

    async def _poll(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(body.get("offset", 0))
        self.offsets.append(offset)
        self.changed.notify_all()

        def fresh() -> list[dict[str, Any]]:
            return [u for u in self.updates if u["update_id"] >= offset]

        try:  # long polling: hold until an update exists, at most the asked timeout
            async with asyncio.timeout(float(body.get("timeout", 0))):
                await self.changed.wait_for(lambda: bool(fresh()))
        except TimeoutError:
            pass
        return fresh()

    async def push(self, update_id: int, chat_id: int, text: str) -> None:
        message = {
            "message_id": update_id * 10,
            "from": {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"},
            "chat": {"id": chat_id, "type": "private"},
            "date": int(time.time()),
            "text": text,
        }
        async with self.changed:
            self.updates.append({"update_id": update_id, "message": message})
            self.changed.notify_all()

    async def until(self, check: Callable[[], bool]) -> None:
        async with self.changed:
            await self.changed.wait_for(check)


def sent(message_id: int, body: dict[str, Any]) -> dict[str, Any]:
    """The Message the Bot API answers a send or an edit with."""
    return {"message_id": message_id, "date": int(time.time()), "text": body["text"],
            "chat": {"id": body["chat_id"], "type": "private"}}  # fmt: skip


def offset_file(swarm: str, connection: str) -> Path:
    return StateLayout.from_env().connector_state_dir(swarm, connection) / "telegram.json"


class FakeSlack:
    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.updates: list[tuple[float, dict[str, Any]]] = []
        self.changed = asyncio.Condition()

    async def handle(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        if path == "/api/chat.update":
            async with self.changed:
                self.updates.append((time.monotonic(), body))
                self.changed.notify_all()
            return 200, {"ok": True, "ts": body["ts"]}
        if path != "/api/chat.postMessage":
            return 404, {"ok": False, "error": "unknown_method"}
        async with self.changed:
            self.posts.append((headers, body))
            self.changed.notify_all()
        return 200, {"ok": True, "ts": f"1700000000.{len(self.posts):03d}"}

    async def until(self, count: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: len(self.posts) >= count)

    async def until_text(self, text: str) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: any(b["text"] == text for _, b in self.updates))


async def start_chat(
    start_daemon: StartDaemon, telegram: FakeHttp, slack: FakeHttp, slack_port: int
) -> Daemon:
    env = {"TG_API": telegram.url, "TG_TOKEN": TG_TOKEN, "SLACK_API": f"{slack.url}/api",
           "SLACK_PORT": str(slack_port), "SLACK_SECRET": SLACK_SECRET,
           "SLACK_TOKEN": SLACK_TOKEN}  # fmt: skip
    daemon = await start_daemon(FIXTURE, swarm="chat", env=env)
    await daemon.wait_for("transition", process=f"{TG}:1", target="idle")
    await daemon.wait_for("transition", process=f"{SL}:1", target="idle")
    return daemon


async def test_telegram_polls_replies_and_keeps_its_offset_across_a_kill(
    start_daemon: StartDaemon,
) -> None:
    fake = FakeTelegram()
    async with asyncio.timeout(90), FakeHttp(fake.handle) as tg, FakeHttp(FakeSlack().handle) as sl:
        daemon = await start_chat(start_daemon, tg, sl, free_port())
        await fake.push(100, 42, "hello bot")
        await fake.until(lambda: len(fake.sent) == 1)
        assert fake.sent[0] == {
            "chat_id": 42, "text": "bot says: hello bot",
            "reply_parameters": {"message_id": 1000, "allow_sending_without_reply": True},
        }  # fmt: skip
        await fake.until(lambda: 101 in fake.offsets)  # the next poll confirms update 100
        assert json.loads(offset_file("chat", "tg").read_text()) == {"offset": 101}
        agent = await daemon.process("front")
        assert agent.instance_key == "telegram:42"

        first = await daemon.process("tg")
        assert first.pid is not None
        polls = len(fake.offsets)
        os.kill(first.pid, signal.SIGKILL)
        await daemon.wait_for("transition", process=f"{TG}:2", target="idle")
        await fake.until(lambda: fake.get_me == 2 and len(fake.offsets) > polls)
        assert fake.offsets[polls:] and set(fake.offsets[polls:]) == {101}  # resumed, not 0
        await fake.push(101, 43, "second chat")
        await fake.until(lambda: len(fake.sent) == 2)
        assert [(m["chat_id"], m["text"]) for m in fake.sent] == [
            (42, "bot says: hello bot"),
            (43, "bot says: second chat"),
        ]  # fmt: skip: update 100 was not delivered again
        keys = {p.instance_key for p in (await daemon.status()).processes if p.name == "front"}
        assert keys == {"telegram:42", "telegram:43"}


def slack_headers(body: bytes, secret: str = SLACK_SECRET, at: int | None = None) -> dict[str, str]:
    stamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest.hexdigest()}",
            "Content-Type": "application/json"}  # fmt: skip


def message_event(event_id: str, text: str, **extra: Any) -> bytes:
    event = {"type": "message", "channel": "C1", "user": "U1", "text": text,
             "ts": "1700000000.000100", "channel_type": "channel", **extra}  # fmt: skip
    body = {"type": "event_callback", "team_id": "T1", "event_id": event_id, "event": event}
    return json.dumps(body).encode()


async def test_slack_verifies_signatures_and_replies_in_thread(
    start_daemon: StartDaemon,
) -> None:
    fake, port = FakeSlack(), free_port()
    async with (
        asyncio.timeout(90),
        FakeHttp(fake.handle) as sl,
        FakeHttp(FakeTelegram().handle) as tg,
    ):
        daemon = await start_chat(start_daemon, tg, sl, port)
        url = f"http://127.0.0.1:{port}/slack/events"
        async with httpx.AsyncClient(timeout=30) as client:
            challenge = json.dumps({"type": "url_verification", "challenge": "c-123"}).encode()
            answer = await client.post(url, content=challenge, headers=slack_headers(challenge))
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"challenge": "c-123"}

            body = message_event("Ev1", "hi slack")
            answer = await client.post(url, content=body, headers=slack_headers(body))
            assert answer.status_code == 200, answer.text
            await fake.until(1)
            headers, posted = fake.posts[0]
            assert headers["authorization"] == f"Bearer {SLACK_TOKEN}"
            assert posted == {"channel": "C1", "text": "bot says: hi slack",
                              "thread_ts": "1700000000.000100"}  # fmt: skip
            assert (await daemon.process("front")).instance_key == "slack:C1"

            refused = [
                (message_event("Ev2", "forged"), slack_headers(b"other body")),
                (message_event("Ev3", "wrong key"), None),
                (message_event("Ev4", "stale"), None),
                (message_event("Ev5", "unsigned"), {}),
            ]
            refused[1] = (refused[1][0], slack_headers(refused[1][0], "not-the-secret"))
            stale = int(time.time()) - 600
            refused[2] = (refused[2][0], slack_headers(refused[2][0], at=stale))
            for raw, signed in refused:
                answer = await client.post(url, content=raw, headers=signed)
                assert answer.status_code == 401, answer.text
                assert answer.json()["error"]["code"] == "E_SLACK_SIGNATURE"

            bot = message_event("Ev6", "from a bot", bot_id="B1")
            retry = message_event("Ev1", "hi slack")  # Slack retrying Ev1: acked, dropped
            last = message_event("Ev7", "in a thread", thread_ts="1699999999.000001")
            for raw in (bot, retry, last):
                answer = await client.post(url, content=raw, headers=slack_headers(raw))
                assert answer.status_code == 200, answer.text
            await fake.until(2)
        assert fake.posts[1][1] == {"channel": "C1", "text": "bot says: in a thread",
                                    "thread_ts": "1699999999.000001"}  # fmt: skip
        routed = daemon.find("ingress_routed", connection="sl")
        assert len(routed) == 2  # only Ev1 and Ev7 were emitted
        assert len(fake.posts) == 2


def prefixes(texts: list[str]) -> bool:
    return all(b.startswith(a) for a, b in itertools.pairwise(texts))


async def test_telegram_edits_a_draft_while_the_reply_is_written(
    start_daemon: StartDaemon,
) -> None:
    """A streamed turn: a draft message with the first text, editMessageText no more than once
    per editIntervalMs (300 here), the last edit the whole reply; typing while a tool runs."""
    fake = FakeTelegram()
    async with asyncio.timeout(90), FakeHttp(fake.handle) as tg, FakeHttp(FakeSlack().handle) as sl:
        await start_chat(start_daemon, tg, sl, free_port())
        text = "stream alpha beta gamma delta epsilon"
        reply = f"streamed: {text}"  # 47 characters: 16 pieces, 60 ms apart

        def shown(what: str, since: int = 0) -> bool:
            return any(b.get("text") == what for _, _, b in fake.calls[since:])

        await fake.push(100, 42, text)
        await fake.until(lambda: shown(reply))
        writes = [(at, m, b) for at, m, b in fake.calls if m != "sendChatAction"]
        (_, method, draft), *edits = writes
        assert method == "sendMessage" and draft["reply_parameters"]["message_id"] == 1000
        assert reply.startswith(draft["text"]) and draft["text"] != reply
        assert len(edits) >= 2 and {m for _, m, _ in edits} == {"editMessageText"}
        assert {(b["chat_id"], b["message_id"]) for _, _, b in edits} == {(42, 9001)}
        assert edits[-1][2]["text"] == reply
        assert prefixes([b["text"] for _, _, b in writes])
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(writes)]
        assert min(gaps) >= 0.25, gaps  # the throttle (0.3 s, less the fake's own jitter)

        mark = len(fake.calls)
        await fake.push(101, 42, "tool please")
        await fake.until(lambda: shown("waited", mark))
        (_, first, action), *rest = fake.calls[mark:]
        assert (first, action) == ("sendChatAction", {"chat_id": 42, "action": "typing"})
        assert [(m, b["text"]) for _, m, b in rest if m != "sendChatAction"] == [
            ("sendMessage", "waited")
        ]


async def test_slack_updates_its_message_while_the_reply_is_written(
    start_daemon: StartDaemon,
) -> None:
    """chat.postMessage with the first text, chat.update as more comes (at most once per
    300 ms here), the last update the whole reply; a status line names a running tool."""
    fake, port = FakeSlack(), free_port()
    async with (
        asyncio.timeout(90),
        FakeHttp(fake.handle) as sl,
        FakeHttp(FakeTelegram().handle) as tg,
    ):
        await start_chat(start_daemon, tg, sl, port)
        url = f"http://127.0.0.1:{port}/slack/events"
        text = "stream one two three four five six"
        reply = f"streamed: {text}"
        async with httpx.AsyncClient(timeout=30) as client:
            body = message_event("Ev1", text)
            answer = await client.post(url, content=body, headers=slack_headers(body))
            assert answer.status_code == 200, answer.text
            await fake.until_text(reply)
            [(_, draft)] = fake.posts
            assert reply.startswith(draft["text"]) and draft["text"] != reply
            assert draft["thread_ts"] == "1700000000.000100"
            assert {(b["channel"], b["ts"]) for _, b in fake.updates} == {("C1", "1700000000.001")}
            assert fake.updates[-1][1]["text"] == reply
            assert prefixes([draft["text"], *(b["text"] for _, b in fake.updates)])
            gaps = [b[0] - a[0] for a, b in itertools.pairwise(fake.updates)]
            assert not gaps or min(gaps) >= 0.25, gaps

            body = message_event("Ev2", "tool please")
            answer = await client.post(url, content=body, headers=slack_headers(body))
            assert answer.status_code == 200, answer.text
            await fake.until_text("waited")
        _, status = fake.posts[1]
        assert status["text"] == "_chores__wait…_"  # Slack has no typing API: a status line
        assert fake.updates[-1][1] == {"channel": "C1", "ts": "1700000000.002", "text": "waited"}
