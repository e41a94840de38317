"""Connectors through a real daemon: webhook HTTP in -> ingress rules -> agent -> HTTP reply.

The fixture (tests/fixtures/connectors) has two webhook Connections on ports chosen here and
passed through the environment (ValueSources): `hook` with ingress rules, `signed` with an
HMAC signing secret. The scripted model echoes the input, so a reply is the text sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, free_port

FIXTURE = REPO / "tests" / "fixtures" / "connectors"
JSON = {"Content-Type": "application/json"}
SECRET = "integration-secret"
HOOK = "connector:hook:webhook"
SIGNED = "connector:signed:webhook"


async def start_hooks(
    start_daemon: StartDaemon, extra: dict[str, str] | None = None
) -> tuple[Daemon, str, str]:
    hook, signed = free_port(), free_port()
    env = {"HOOK_PORT": str(hook), "SIGNED_PORT": str(signed), "SIGNED_SECRET": SECRET}
    env.update(extra or {})
    daemon = await start_daemon(FIXTURE, swarm="hooks", env=env)
    await daemon.wait_for("transition", process=f"{HOOK}:1", target="idle")
    await daemon.wait_for("transition", process=f"{SIGNED}:1", target="idle")
    return daemon, f"http://127.0.0.1:{hook}", f"http://127.0.0.1:{signed}"


async def post(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, content=raw, headers=JSON | (headers or {}))


def sign(body: bytes, secret: str = SECRET, stamp: int | None = None) -> dict[str, str]:
    """The webhook's signature headers: HMAC-SHA256 of "<timestamp>.<body>"."""
    when = str(int(time.time()) if stamp is None else stamp)
    digest = hmac.new(secret.encode(), when.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Goondan-Timestamp": when, "X-Goondan-Signature": f"sha256={digest}"}


async def test_webhook_replies_and_routes_by_instance_key_property(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon, hook, _ = await start_hooks(start_daemon)
        alice = await post(f"{hook}/events", {"event": "ticket", "text": "hi from alice",
                                              "properties": {"user": "alice"}})  # fmt: skip
        bob = await post(hook, {"event": "ticket", "input": "hi from bob",
                                "properties": {"user": "bob"}})  # fmt: skip
        assert alice.status_code == 200, alice.text
        assert alice.json()["reply"] == "hi from alice"
        assert bob.json()["reply"] == "hi from bob"
        plain = await post(hook, {"text": "default route"})  # event "message", swarm key
        assert plain.json()["reply"] == "default route"
        processes = {(p.kind, p.name, p.instance_key) for p in (await daemon.status()).processes}
        assert {("agent", "front", "user:alice"), ("agent", "front", "user:bob"),
                ("agent", "front", "hooks"), ("connector", "hook", "webhook"),
                ("connector", "signed", "webhook")} <= processes  # fmt: skip


async def test_reply_false_no_match_and_bad_json(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon, hook, _ = await start_hooks(start_daemon)
        accepted = await post(hook, {"event": "notify", "text": "disk full"})
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["accepted"] is True
        event_id = accepted.json()["eventId"]
        await daemon.wait_for("ingress_routed", event_id=event_id, target="agent:ops:notices")
        await daemon.wait_for("transition", process="agent:ops:notices:1", target="processing")

        nomatch = await post(hook, {"event": "unknown", "text": "x"})
        assert nomatch.status_code == 422
        assert nomatch.json()["error"]["code"] == "E_CONNECTOR_NO_ROUTE"
        await daemon.wait_for("ingress_rejected", event_type="unknown")

        bad = await post(hook, b"{not json")
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "E_WEBHOOK_BAD_JSON"
        not_object = await post(hook, [1, 2])
        assert not_object.status_code == 400
        again = await post(hook, {"text": "still serving"})
        assert again.json()["reply"] == "still serving"


async def test_a_repeated_idempotency_key_is_answered_with_the_first_event(
    start_daemon: StartDaemon,
) -> None:
    """A client that sends again with the same Idempotency-Key hears of the event it sent
    first (its id, and its reply), not of the repeat, which the daemon never accepted."""
    async with asyncio.timeout(60):
        _, hook, _ = await start_hooks(start_daemon)
        for body in ({"event": "notify", "text": "disk full"},
                     {"event": "message", "text": "pay order 7"}):  # fmt: skip
            key = {"Idempotency-Key": f"once-{body['event']}"}
            first = await post(hook, body, key)
            again = await post(hook, body, key)
            assert first.status_code == again.status_code, (first.text, again.text)
            assert first.status_code in (200, 202), first.text
            assert again.json() == first.json()


async def test_hmac_signature(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        _, _, signed = await start_hooks(start_daemon)
        body = json.dumps({"text": "signed hello"}).encode()
        good = await post(signed, body, sign(body))
        assert good.status_code == 200, good.text
        assert good.json()["reply"] == "signed hello"
        wrong = await post(signed, body, sign(body, "another-secret"))
        assert wrong.status_code == 401
        assert wrong.json()["error"]["code"] == "E_WEBHOOK_SIGNATURE"
        tampered = await post(signed, body + b" ", sign(body))
        assert tampered.status_code == 401
        unsigned = await post(signed, body)
        assert unsigned.status_code == 401


@pytest.mark.parametrize("mode", ["forkserver", "cold"])
async def test_a_killed_connector_is_respawned_and_serves_again(
    start_daemon: StartDaemon, mode: str
) -> None:
    async with asyncio.timeout(60):
        daemon, hook, _ = await start_hooks(start_daemon, {"GOONDAN_SPAWN_MODE": mode})
        first = await daemon.process("hook")
        assert first.kind == "connector"
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        await daemon.wait_for("transition", process=f"{HOOK}:2", target="idle")
        second = await daemon.process("hook")
        assert second.generation == 2
        assert second.pid != first.pid
        answer = await post(hook, {"text": "after the crash"})
        assert answer.json()["reply"] == "after the crash"
        # under load the other connector may still be starting: only a ready one acks
        await daemon.wait_for("transition", process=f"{SIGNED}:1", target="idle")
        daemon.signal(signal.SIGTERM)  # connectors drain like agents: ack, exit 0
        assert await daemon.wait() == 0
        assert daemon.find("shutdown_ack", process=f"{HOOK}:2")
        assert daemon.find("shutdown_ack", process=f"{SIGNED}:1")


async def test_cli_connector_reads_lines_and_writes_replies(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    lines_in, replies_out = tmp_path / "in", tmp_path / "out"
    os.mkfifo(lines_in)
    os.mkfifo(replies_out)
    # O_RDWR never blocks on a FIFO, and keeps each end open for the connector's open()
    writer = os.open(lines_in, os.O_RDWR)
    reader_fd = os.open(replies_out, os.O_RDWR | os.O_NONBLOCK)
    loop = asyncio.get_running_loop()
    replies = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(replies), os.fdopen(reader_fd, "rb", buffering=0)
    )
    try:
        async with asyncio.timeout(60):
            env = {"CLI_INPUT": str(lines_in), "CLI_OUTPUT": str(replies_out)}
            daemon = await start_daemon(FIXTURE / "cli", swarm="terminal", env=env)
            os.write(writer, b"first line\n\nsecond line\n")
            assert await replies.readline() == b"first line\n"
            assert await replies.readline() == b"second line\n"
            front = await daemon.process("front")
            assert front.instance_key.startswith("cli:")
    finally:
        transport.close()
        os.close(writer)
