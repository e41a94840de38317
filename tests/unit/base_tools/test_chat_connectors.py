"""Unit tests of the telegram and slack connectors' pure parts and start checks, loaded BY PATH
as the connector host does: Slack v0 signatures, message filtering, Telegram update parsing,
the offset file, reply chunking, backoff, token handling and the start-time token check
against a fake Bot API on 127.0.0.1. The end-to-end paths are in
tests/integration/test_chat_connectors.py."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
import structlog

from .conftest import load_tool
from .fake_chat_api import FakeApi, ok

slack = load_tool("connectors/slack.py")
telegram = load_tool("connectors/telegram.py")
chatbot = telegram.chatbot  # the helper as the connectors load it (load_sibling)
SECRET = b"s3cret"
NOW = 1_700_000_000
TOKEN = "123456:SECRET-token"


@dataclass
class Ctx:
    """Enough of `bundles.sdk.ConnectorContext` for the connectors' constructors."""

    config: Mapping[str, Any] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    state_dir: Path | None = None
    state: dict[str, Any] = field(default_factory=dict)
    logger: Any = field(default_factory=structlog.get_logger)
    connection: str = "c"
    connector: str = "x"


def form(body: bytes) -> dict[str, Any]:
    """A Bot API call as python-telegram-bot sends it: a form whose non-string values are
    JSON (ids, `reply_parameters`)."""
    return {k: v if k == "text" else json.loads(v) for k, v in parse_qsl(body.decode())}


def signed(body: bytes, stamp: int = NOW, secret: bytes = SECRET) -> dict[str, str]:
    digest = hmac.new(secret, f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {"x-slack-request-timestamp": str(stamp), "x-slack-signature": f"v0={digest}"}


def test_slack_signature_accepts_a_fresh_correct_one() -> None:
    slack.check_signature(SECRET, signed(b"{}"), b"{}", 300, NOW + 299)


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        (signed(b"{}", secret=b"other"), "does not match"),
        (signed(b"{ }"), "does not match"),
        (signed(b"{}", stamp=NOW - 301), "too old"),
        (signed(b"{}", stamp=NOW + 301), "too old"),
        ({}, "missing"),
        ({"x-slack-request-timestamp": "abc", "x-slack-signature": "v0=00"}, "missing"),
        ({"x-slack-request-timestamp": str(NOW), "x-slack-signature": "sha256=00"}, "missing"),
        # a digit to str.isdigit, not to int(): was a ValueError (500 from /slack/actions)
        ({"x-slack-request-timestamp": "\u00b2", "x-slack-signature": "v0=00"}, "missing"),
    ],
)
def test_slack_signature_refuses(headers: dict[str, str], why: str) -> None:
    with pytest.raises(slack.guard.HttpError) as refused:
        slack.check_signature(SECRET, headers, b"{}", 300, NOW)
    assert refused.value.status == 401
    assert why in refused.value.message


def test_slack_signature_of_a_body_that_is_not_utf8_is_refused_not_a_crash() -> None:
    """Slack signs UTF-8 JSON or forms; slack_sdk signs text, so other bytes cannot match."""
    body = b'{"text": "\xff"}'
    with pytest.raises(slack.guard.HttpError) as refused:
        slack.check_signature(SECRET, signed(body), body, 300, NOW)
    assert (refused.value.status, refused.value.code) == (401, "E_SLACK_SIGNATURE")


def test_slack_signature_takes_upper_case_hex_and_a_string_secret() -> None:
    headers = signed(b"{}")
    headers["x-slack-signature"] = headers["x-slack-signature"].upper().replace("V0=", "v0=")
    slack.check_signature(SECRET.decode(), headers, b"{}", 300, NOW)


def _callback(**event: Any) -> dict[str, Any]:
    base = {"type": "message", "channel": "C1", "user": "U1", "text": "hi", "ts": "1.2"}
    return {"type": "event_callback", "team_id": "T1", "event_id": "Ev1",
            "event": {**base, **event}}  # fmt: skip


def test_slack_message_properties_and_what_is_ignored() -> None:
    types = frozenset({"message"})
    assert slack.message_properties(_callback(thread_ts="1.0"), types) == {
        "channel": "C1", "user": "U1", "ts": "1.2", "threadTs": "1.0", "text": "hi",
        "team": "T1", "channelType": None, "eventId": "Ev1",
    }  # fmt: skip
    for ignored in (
        _callback(bot_id="B1"),
        _callback(subtype="message_changed"),
        _callback(text="  "),
        _callback(type="app_mention"),
        {"type": "event_callback"},
    ):
        assert slack.message_properties(ignored, types) is None
    assert slack.message_properties(_callback(type="app_mention"), frozenset({"app_mention"}))


def test_slack_start_needs_a_signing_secret() -> None:
    with pytest.raises(RuntimeError, match="signingSecret"):
        slack.Slack(Ctx(secrets={"botToken": "xoxb-1"}))
    with pytest.raises(RuntimeError, match="signingSecret"):
        slack.Slack(Ctx(secrets={"botToken": "xoxb-1", "signingSecret": "  "}))


def update(update_id: int, **fields: Any) -> Any:
    """A Bot API update as python-telegram-bot reads it from getUpdates."""
    return telegram.Update.de_json({"update_id": update_id, **fields}, None)


def message(message_id: int, chat: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"message_id": message_id, "date": NOW, "chat": chat, **fields}


def test_telegram_message_properties() -> None:
    group = {"id": -9, "type": "group", "title": "team"}
    ann = {"id": 7, "is_bot": False, "username": "ann", "first_name": "Ann"}
    captioned = update(5, message=message(50, group, caption="a photo", **{"from": ann}))
    assert telegram.message_properties(captioned) == {
        "chatId": -9, "chatType": "group", "chatTitle": "team", "messageId": 50,
        "threadId": None, "text": "a photo", "updateId": 5,
        "from": {"id": 7, "username": "ann", "firstName": "Ann", "isBot": False},
    }  # fmt: skip
    private = {"id": 1, "type": "private"}
    edited = update(6, edited_message=message(60, private, text="edit"))
    assert telegram.message_properties(edited) is None
    assert telegram.message_properties(update(7, message=message(70, private))) is None
    assert telegram.message_properties(update(8, message=message(80, private, text=" "))) is None
    anonymous = telegram.message_properties(update(9, message=message(90, private, text="t")))
    assert anonymous is not None
    assert anonymous["from"] == {"id": None, "username": None, "firstName": None, "isBot": False}
    assert anonymous["chatType"] == "private" and type(anonymous["chatType"]) is str


def test_telegram_offset_survives_a_new_instance(tmp_path: Path) -> None:
    ctx = Ctx(secrets={"botToken": TOKEN}, state_dir=tmp_path / "st")
    first = telegram.Telegram(ctx)
    assert first.offset == 0
    first.accept(update(41, edited_message=message(1, {"id": 1, "type": "private"})))
    assert json.loads((tmp_path / "st" / "telegram.json").read_text()) == {"offset": 42}
    first.accept(update(3))  # older than the offset: ignored
    assert telegram.Telegram(ctx).offset == 42


def test_a_corrupt_offset_file_starts_from_zero(tmp_path: Path) -> None:
    (tmp_path / "telegram.json").write_text("{not json")
    assert telegram.Telegram(Ctx(secrets={"botToken": TOKEN}, state_dir=tmp_path)).offset == 0


def test_the_token_comes_from_secrets_config_or_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    with pytest.raises(RuntimeError, match=r"secrets\.botToken"):
        telegram.Telegram(Ctx())
    assert telegram.Telegram(Ctx(config={"botToken": "cfg"})).token == "cfg"
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "env")
    assert telegram.Telegram(Ctx()).token == "env"
    assert telegram.Telegram(Ctx(secrets={"botToken": "sec"})).token == "sec"


async def test_a_refused_token_is_a_start_error_without_the_token(api: FakeApi) -> None:
    api.on(f"/bot{TOKEN}/getMe", ok({"ok": False, "description": "Unauthorized"}, 401))
    ctx = Ctx(config={"apiBaseUrl": api.url}, secrets={"botToken": TOKEN})
    async with asyncio.timeout(10):
        with pytest.raises(RuntimeError) as failed:
            await telegram.start(ctx)
        await ctx.state["telegram"].aclose()
    assert "refused the bot token" in str(failed.value)
    assert TOKEN not in str(failed.value)


async def test_an_unreachable_api_is_left_to_the_poll_loop(api: FakeApi) -> None:
    api.on(f"/bot{TOKEN}/getMe", ok({"ok": False, "description": "Bad Gateway"}, 502))
    ctx = Ctx(config={"apiBaseUrl": api.url}, secrets={"botToken": TOKEN})
    async with asyncio.timeout(10):
        await telegram.start(ctx)  # no start error: run() retries with backoff
        await ctx.state["telegram"].aclose()
    assert api.paths() == [f"/bot{TOKEN}/getMe"]


async def test_api_errors_mask_the_token_and_carry_status_and_retry_after(api: FakeApi) -> None:
    body = {"ok": False, "description": f"Too Many Requests {TOKEN}",
            "parameters": {"retry_after": 7}}  # fmt: skip
    api.on("/m", ok(body, 429))
    async with asyncio.timeout(10), chatbot.httpx.AsyncClient() as client:
        with pytest.raises(chatbot.ApiError) as failed:
            await chatbot.call_json(client, f"{api.url}/m", "m", {}, secret=TOKEN)
    assert (failed.value.status, failed.value.retry_after) == (429, 7)
    assert TOKEN not in str(failed.value)


FLOOD = {"ok": False, "description": f"Too Many Requests {TOKEN}",
         "parameters": {"retry_after": 7}}  # fmt: skip


# python-telegram-bot 22.x warns, building its RetryAfter, that the int form of retry_after will
# become a timedelta; the connector reads either form
@pytest.mark.filterwarnings("ignore:.*retry_after.*:DeprecationWarning")
@pytest.mark.parametrize(
    ("reply", "status", "retry_after"),
    [
        (ok(FLOOD, 429), 429, 7),
        (ok({"ok": False, "description": f"Bad Gateway {TOKEN}"}, 502), 502, None),
        (ok({"ok": False, "description": f"Conflict {TOKEN}"}, 409), 409, None),
        (ok({"ok": True, "result": {"message_id": 1}}), 200, None),  # no date, no chat
    ],
)
async def test_telegram_call_errors_carry_status_and_retry_after_without_the_token(
    api: FakeApi, reply: Any, status: int, retry_after: int | None
) -> None:
    api.on(f"/bot{TOKEN}/sendMessage", reply)
    bot = telegram.Telegram(Ctx(config={"apiBaseUrl": api.url}, secrets={"botToken": TOKEN}))
    try:
        async with asyncio.timeout(10):
            with pytest.raises(chatbot.ApiError) as failed:
                await bot.call("sendMessage", bot.bot.send_message(1, "hi"))
    finally:
        await bot.aclose()
    assert (failed.value.method, failed.value.status) == ("sendMessage", status)
    assert failed.value.retry_after == retry_after
    assert TOKEN not in str(failed.value)


async def test_telegram_call_without_an_answer_is_status_0() -> None:
    bot = telegram.Telegram(Ctx(config={"apiBaseUrl": "http://127.0.0.1:9"},
                                secrets={"botToken": TOKEN}))  # fmt: skip
    try:
        async with asyncio.timeout(10):
            with pytest.raises(chatbot.ApiError) as failed:
                await bot.call("getMe", bot.bot.get_me())
    finally:
        await bot.aclose()
    assert failed.value.status == 0
    assert TOKEN not in str(failed.value)


async def test_an_update_the_library_cannot_read_fails_the_poll_not_the_connector(
    api: FakeApi,
) -> None:
    """A getUpdates answer python-telegram-bot cannot read is a failed poll (logged, retried
    with backoff by `serve`), not an exception that ends the connector."""
    api.on(f"/bot{TOKEN}/getUpdates", ok({"ok": True, "result": [
        {"update_id": 1, "message": {"message_id": 2, "chat": 5}}]}))  # fmt: skip
    bot = telegram.Telegram(Ctx(config={"apiBaseUrl": api.url}, secrets={"botToken": TOKEN}))
    try:
        async with asyncio.timeout(10):
            with pytest.raises(chatbot.ApiError) as failed:
                await bot.poll()
    finally:
        await bot.aclose()
    assert (failed.value.method, failed.value.status) == ("getUpdates", 200)
    assert "unreadable" in failed.value.reason


def test_backoff_doubles_up_to_the_cap_and_honours_retry_after() -> None:
    backoff = chatbot.Backoff(first=1, cap=4)
    assert [backoff.next() for _ in range(4)] == [1, 2, 4, 4]
    backoff.reset()
    assert backoff.next(3) == 3
    assert backoff.next(100) == 4


def test_chunks_and_settings_parsing() -> None:
    assert chatbot.chunks("ab\ncd\nef", 5) == ["ab\ncd", "ef"]
    assert chatbot.chunks("abcdefg", 3) == ["abc", "def", "g"]
    assert chatbot.chunks("", 3) == []
    assert [chatbot.flag(v) for v in ("false", "0", "no", "", "true", True, False)] == [
        False, False, False, False, True, True, False,
    ]  # fmt: skip
    assert chatbot.names("message, app_mention") == {"message", "app_mention"}
    assert chatbot.names(["message"]) == {"message"}


@dataclass(frozen=True)
class FakeReply:
    text: str
    event_id: str = "e1"
    accepted: bool = False
    error_code: str | None = None
    error_message: str | None = None
    deferred: dict[str, Any] | None = None


class RecordingLogger:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _log(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))

    debug = info = warning = error = _log


async def test_a_409_poll_is_logged_backed_off_and_polling_recovers(
    api: FakeApi, tmp_path: Path
) -> None:
    bot_path = f"/bot{TOKEN}"
    chat = {"id": 5, "type": "private"}
    update = {"update_id": 7, "message": message(70, chat, text="yo")}
    conflict = {"ok": False, "error_code": 409, "description": "Conflict: terminated by other"}
    api.on(f"{bot_path}/getUpdates", ok(conflict, 409), ok({"ok": True, "result": [update]}),
           ok({"ok": True, "result": []}))  # fmt: skip
    api.on(f"{bot_path}/sendMessage", ok({"ok": True, "result": message(71, chat, text="re")}))
    emitted: asyncio.Queue[tuple[str, Mapping[str, Any], str]] = asyncio.Queue()

    class EmitCtx(Ctx):
        async def emit(
            self,
            event: str,
            properties: Mapping[str, Any],
            text: str,
            *,
            reply: bool,
            idempotency_key: str | None = None,
            on_delta: Callable[[Any], None] | None = None,
        ) -> FakeReply:
            await emitted.put((event, properties, text))
            return FakeReply(text=f"re: {text}")

    logger = RecordingLogger()
    ctx = EmitCtx(config={"apiBaseUrl": api.url, "pollTimeoutSeconds": "0", "backoffMs": "1"},
                  secrets={"botToken": TOKEN}, state_dir=tmp_path, logger=logger)  # fmt: skip
    bot = telegram.Telegram(ctx)
    serving = asyncio.ensure_future(bot.serve())
    try:
        async with asyncio.timeout(10):
            event, props, text = await emitted.get()
            await asyncio.gather(*bot.tasks)  # the reply is sent
    finally:
        serving.cancel()
        await bot.aclose()
    assert (event, props["chatId"], text) == ("telegram_message", 5, "yo")
    failed = [kw for name, kw in logger.events if name == "telegram_poll_failed"]
    assert failed[0]["status"] == 409
    assert "another client" in failed[0]["hint"]
    sent = [form(r.body) for r in api.requests if r.path.endswith("/sendMessage")]
    reply = {"message_id": 70, "allow_sending_without_reply": True}
    assert sent == [{"chat_id": 5, "text": "re: yo", "reply_parameters": reply}]
    assert json.loads((tmp_path / "telegram.json").read_text()) == {"offset": 8}
