"""Approvals from chat through a real daemon: Telegram inline buttons and Slack block actions.

The agent's `payments__transfer` needs a person's approval. A turn that came from a chat posts
the request there with Approve/Deny buttons; a press counts only from that chat and from a user
the Connection's `approvers` lists; the resumed turn's reply goes back to the chat, also when
the request is decided elsewhere (`goondan calls approve`, a webhook's `POST /rpc`). The fake
chat APIs are the ones of test_chat_connectors, taught the methods buttons need.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, run_cli
from tests.integration.test_chat_connectors import (
    SL,
    SLACK_SECRET,
    SLACK_TOKEN,
    TG,
    TG_TOKEN,
    FakeHttp,
    FakeSlack,
    FakeTelegram,
    free_port,
    message_event,
    slack_headers,
)
from tests.integration.test_deferred import HOOK_SECRET, signed

FIXTURE = REPO / "tests" / "fixtures" / "chat_approvals"
SWARM = "chatpay"
HOOK = "connector:hook:webhook"


class ButtonTelegram(FakeTelegram):
    """Also answers callback queries and message edits, and can push a button press."""

    def __init__(self) -> None:
        super().__init__()
        self.buttons: list[tuple[str, dict[str, Any]]] = []
        """(method, body) of answerCallbackQuery and editMessageText (`calls` is the base's)."""

    async def handle(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        method = path.rpartition("/")[2]
        if method == "sendChatAction":  # typing while the tool runs: not what these tests see
            return 200, {"ok": True, "result": True}
        if method in ("answerCallbackQuery", "editMessageText"):
            async with self.changed:
                self.buttons.append((method, body))
                self.changed.notify_all()
            return 200, {"ok": True, "result": True}
        return await super().handle(path, headers, body)

    async def press(self, update_id: int, chat_id: int, user_id: int, data: str) -> None:
        query = {
            "id": f"cq{update_id}",
            "from": {"id": user_id, "is_bot": False, "first_name": "U", "username": f"u{user_id}"},
            "message": {
                "message_id": 77,
                "date": int(time.time()),
                "chat": {"id": chat_id, "type": "private"},
            },
            "chat_instance": f"ci{chat_id}",
            "data": data,
        }
        async with self.changed:
            self.updates.append({"update_id": update_id, "callback_query": query})
            self.changed.notify_all()


class ButtonSlack(FakeSlack):
    """Also takes chat.update and chat.postEphemeral (recorded with their method)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def handle(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        method = path.rpartition("/")[2]
        async with self.changed:
            self.calls.append((method, body))
            self.changed.notify_all()
        if method in ("chat.update", "chat.postEphemeral"):
            return 200, {"ok": True}
        return await super().handle(path, headers, body)

    async def until_call(self, method: str, count: int = 1) -> list[dict[str, Any]]:
        async with self.changed:
            await self.changed.wait_for(lambda: sum(m == method for m, _ in self.calls) >= count)
        return [b for m, b in self.calls if m == method]


async def start_chat(
    start_daemon: StartDaemon, tg: FakeHttp, sl: FakeHttp, port: int, hook_port: int = 0
) -> Daemon:
    env = {"TG_API": tg.url, "TG_TOKEN": TG_TOKEN, "SLACK_API": f"{sl.url}/api",
           "SLACK_PORT": str(port), "SLACK_SECRET": SLACK_SECRET,
           "SLACK_TOKEN": SLACK_TOKEN, "HOOK_PORT": str(hook_port or free_port()),
           "HOOK_SECRET": HOOK_SECRET}  # fmt: skip
    daemon = await start_daemon(FIXTURE, swarm=SWARM, env=env)
    await daemon.wait_for("transition", process=f"{TG}:1", target="idle")
    await daemon.wait_for("transition", process=f"{SL}:1", target="idle")
    await daemon.wait_for("transition", process=f"{HOOK}:1", target="idle")
    return daemon


async def pending_approval() -> str:
    """The id of the one pending call (`goondan calls list --json`)."""
    code, out, err = await run_cli("calls", "list", "--json")
    assert code == 0, err
    [call] = json.loads(out)
    assert call["method"] == "goondan.approve"
    return str(call["id"])


def ran(key: str) -> list[str]:
    path = StateLayout.from_env().instance_paths(SWARM, key, "front").workdir / "ran.log"
    return path.read_text().splitlines() if path.exists() else []


def decisions(key: str) -> list[dict[str, Any]]:
    root = StateLayout.from_env().instance_paths(SWARM, key, "front").runtime_events_jsonl
    events = [json.loads(line) for line in Path(root).read_text().splitlines()]
    return [e["data"] for e in events if e["type"] == "tool.approval"]


async def test_telegram_buttons_from_the_right_chat_and_user(start_daemon: StartDaemon) -> None:
    fake = ButtonTelegram()
    async with asyncio.timeout(90), FakeHttp(fake.handle) as tg, FakeHttp(FakeSlack().handle) as sl:
        await start_chat(start_daemon, tg, sl, free_port())
        await fake.push(100, 42, "pay big")
        await fake.until(lambda: len(fake.sent) == 1)
        prompt = fake.sent[0]
        assert prompt["chat_id"] == 42 and "payments__transfer" in prompt["text"]
        [[approve, deny]] = prompt["reply_markup"]["inline_keyboard"]
        assert (approve["text"], deny["text"]) == ("Approve", "Deny")

        await fake.press(101, 43, 7, approve["callback_data"])  # another chat
        await fake.press(102, 42, 8, approve["callback_data"])  # not an approver
        await fake.until(lambda: len(fake.buttons) == 2)
        assert all(m == "answerCallbackQuery" and b["show_alert"] for m, b in fake.buttons)
        assert ran("telegram:42") == []

        await fake.press(103, 42, 7, approve["callback_data"])
        await fake.until(lambda: len(fake.sent) == 2)
        reply = fake.sent[1]
        assert reply["chat_id"] == 42 and reply["reply_parameters"]["message_id"] == 1000
        assert json.loads(reply["text"]) == {"status": "ok", "output": {"sent": 500}}
        assert ran("telegram:42") == ["transfer 500"]
        assert ("editMessageText", {"chat_id": 42, "message_id": 77,
                                    "text": "Approved by telegram:u7"}) in fake.buttons  # fmt: skip
        [record] = decisions("telegram:42")
        assert (record["decision"], record["by"], record["via"]) == (
            "approved", "7", "connector:tg",  # the entry of config.approvers that pressed
        )  # fmt: skip

        await fake.press(104, 42, 7, approve["callback_data"])  # decided already: refused
        await fake.until(lambda: len(fake.buttons) == 5)
        assert fake.buttons[-1][1]["text"] == "this request is no longer pending"


def action(user: str, value: str, channel: str = "C1") -> bytes:
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower()},
        "channel": {"id": channel},
        "container": {"channel_id": channel, "message_ts": "1700000000.999"},
        "actions": [{"action_id": "goondan_approval", "value": value}],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


async def test_slack_block_actions_deny_from_an_approver(start_daemon: StartDaemon) -> None:
    fake, port = ButtonSlack(), free_port()
    async with (
        asyncio.timeout(90),
        FakeHttp(fake.handle) as sl,
        FakeHttp(FakeTelegram().handle) as tg,
    ):
        await start_chat(start_daemon, tg, sl, port)
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(timeout=30) as client:
            body = message_event("Ev1", "pay big")
            answer = await client.post(f"{base}/slack/events", content=body,
                                       headers=slack_headers(body))  # fmt: skip
            assert answer.status_code == 200, answer.text
            [prompt] = await fake.until_call("chat.postMessage")
            assert prompt["thread_ts"] == "1700000000.000100"
            buttons = prompt["blocks"][1]["elements"]
            deny = next(b["value"] for b in buttons if b["text"]["text"] == "Deny")

            def signed(raw: bytes) -> dict[str, str]:
                headers = slack_headers(raw)
                headers["Content-Type"] = "application/x-www-form-urlencoded"
                return headers

            forged = action("U1", deny)
            bad = await client.post(f"{base}/slack/actions", content=forged,
                                    headers={**signed(b"x"), "X-Slack-Request-Timestamp":
                                             str(int(time.time()))})  # fmt: skip
            assert bad.status_code == 401
            odd = {**signed(forged), "X-Slack-Request-Timestamp": b"\xb2"}  # "²" in latin-1
            bad = await client.post(f"{base}/slack/actions", content=forged, headers=odd)
            assert bad.status_code == 401, bad.text  # was a 500
            assert bad.json()["error"]["code"] == "E_SLACK_SIGNATURE"
            stranger = action("U2", deny)
            answer = await client.post(f"{base}/slack/actions", content=stranger,
                                       headers=signed(stranger))  # fmt: skip
            assert answer.status_code == 200
            [ephemeral] = await fake.until_call("chat.postEphemeral")
            assert ephemeral["user"] == "U2"

            press = action("U1", deny)
            answer = await client.post(f"{base}/slack/actions", content=press,
                                       headers=signed(press))  # fmt: skip
            assert answer.status_code == 200
            [_, reply] = await fake.until_call("chat.postMessage", 2)
        assert reply["thread_ts"] == "1700000000.000100"
        assert json.loads(reply["text"])["error"]["code"] == "E_TOOL_PERMISSION_DENIED"
        [update] = [b for m, b in fake.calls if m == "chat.update"]
        assert update["text"] == "Denied by slack:U1"
        assert ran("slack:C1") == []
        [record] = decisions("slack:C1")
        assert (record["decision"], record["by"]) == ("denied", "U1")


async def test_telegram_turn_approved_with_goondan_calls_gets_its_reply_in_the_chat(
    start_daemon: StartDaemon,
) -> None:
    fake = ButtonTelegram()
    async with asyncio.timeout(90), FakeHttp(fake.handle) as tg, FakeHttp(FakeSlack().handle) as sl:
        daemon = await start_chat(start_daemon, tg, sl, free_port())
        await fake.push(100, 42, "pay big")
        await fake.until(lambda: len(fake.sent) == 1)  # the buttons
        code, _, err = await run_cli("calls", "approve", await pending_approval())
        assert code == 0, err
        await fake.until(lambda: len(fake.sent) == 2)
        reply = fake.sent[1]
        assert reply["chat_id"] == 42 and reply["reply_parameters"]["message_id"] == 1000
        assert json.loads(reply["text"]) == {"status": "ok", "output": {"sent": 500}}
        assert ran("telegram:42") == ["transfer 500"]
        [record] = decisions("telegram:42")
        assert (record["decision"], record["via"]) == ("approved", "cli")
        await daemon.wait_for("resumed_reply_to_origin", connector=f"{TG}")
        data = fake.sent[0]["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        await fake.press(101, 42, 7, data)  # its buttons were for a request decided elsewhere
        await fake.until(lambda: len(fake.buttons) == 1)
        assert fake.buttons[0][1]["text"] == "this request is no longer pending"


async def test_slack_turn_denied_with_goondan_calls_gets_its_reply_in_the_thread(
    start_daemon: StartDaemon,
) -> None:
    fake, port, hook_port = ButtonSlack(), free_port(), free_port()
    async with (
        asyncio.timeout(90),
        FakeHttp(fake.handle) as sl,
        FakeHttp(FakeTelegram().handle) as tg,
    ):
        await start_chat(start_daemon, tg, sl, port, hook_port)
        async with httpx.AsyncClient(timeout=30) as client:
            body = message_event("Ev1", "pay big")
            answer = await client.post(f"http://127.0.0.1:{port}/slack/events", content=body,
                                       headers=slack_headers(body))  # fmt: skip
            assert answer.status_code == 200, answer.text
            await fake.until_call("chat.postMessage")  # the buttons
            call_id = await pending_approval()
            # a webhook is no approver, whatever `by` its answer claims (issue 27 F1)
            error = {"code": -32001, "message": "no", "data": {"by": "auditor"}}
            content = json.dumps({"jsonrpc": "2.0", "id": call_id, "error": error}).encode()
            refused = await client.post(f"http://127.0.0.1:{hook_port}/rpc", content=content,
                                        headers=signed(content))  # fmt: skip
            assert refused.json()["error"]["code"] == "E_CALL_FORBIDDEN", refused.text
            code, _, err = await run_cli("calls", "deny", call_id)
            assert code == 0, err
            [_, reply] = await fake.until_call("chat.postMessage", 2)
        assert reply["channel"] == "C1" and reply["thread_ts"] == "1700000000.000100"
        assert json.loads(reply["text"])["error"]["code"] == "E_TOOL_PERMISSION_DENIED"
        assert ran("slack:C1") == []
        [record] = decisions("slack:C1")
        assert (record["decision"], record["by"], record["via"]) == (
            "denied", getpass.getuser(), "cli",
        )  # fmt: skip
