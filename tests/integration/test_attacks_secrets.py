"""Finding 5 of the security review, secrets, performed against a real daemon the way it was
found (tests/fixtures/secrets): a chat token named by the telegram tool's `tokenEnv` showed up
in a bash tool's `env` output, the reply and base.jsonl; and the webhook's port, read from the
environment, was masked in every tool output as `***`.

Each test fails without its fix; the unit tests beside the code cover the mechanisms."""

from __future__ import annotations

import asyncio
import json

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon
from tests.integration.test_example_workspace import free_port
from tests.unit.base_tools import fake_chat_api

BUNDLE = REPO / "tests" / "fixtures" / "secrets"
CHAT_TOKEN = "123456:chat-token-from-tokenEnv"
MODEL_KEY = "sk-model-key-from-the-environment"
SECRETS = (CHAT_TOKEN, MODEL_KEY)


async def _start(
    start_daemon: StartDaemon, env: dict[str, str] | None = None, tg_api: str = ""
) -> tuple[Daemon, str]:
    """The daemon, once its webhook listens on the port from HOOK_PORT (also returned)."""
    port = str(free_port())
    daemon = await start_daemon(BUNDLE, swarm="secrets", env={
        "CHAT_BOT": CHAT_TOKEN, "SECRETS_TEST_MODEL_KEY": MODEL_KEY, "HOOK_PORT": port,
        "TG_API": tg_api or "http://127.0.0.1:9", **(env or {}),
    })  # fmt: skip
    await daemon.wait_for("transition", process="connector:hook:webhook:1", target="idle")
    return daemon, port


async def test_a_chat_token_named_by_token_env_is_kept_from_tools(
    start_daemon: StartDaemon,
) -> None:
    """`env` in bash showed the telegram tool's token (`tokenEnv: CHAT_BOT`), and so did the
    reply and base.jsonl: it was not a secret, and the variable stayed in the agent."""
    async with asyncio.timeout(60):
        daemon, _ = await _start(start_daemon)
        reply = await daemon.send("env")
        assert reply.ok, reply.error
        text = str(reply.result)
        for secret in SECRETS:
            assert secret not in text
        assert "PATH=" in text  # the command ran and printed the environment
        history = StateLayout.from_env().instance_paths("secrets", "secrets", "main").base_jsonl
        for secret in SECRETS:
            assert secret not in history.read_text()


async def test_an_environment_value_that_is_no_credential_is_not_masked(
    start_daemon: StartDaemon,
) -> None:
    """The webhook's port came from `valueFrom.env`: every `8794` in tool output was `***`."""
    async with asyncio.timeout(60):
        daemon, port = await _start(start_daemon)
        reply = await daemon.send("env")
        assert reply.ok, reply.error
        text = str(reply.result)
        assert f"HOOK_PORT={port}" in text and f"port={port}" in text
        assert "***" not in text


async def test_a_chat_tool_keeps_its_token_once_the_variable_is_gone(
    start_daemon: StartDaemon,
) -> None:
    """The agent reads `tokenEnv` when it loads the tool and then removes the variable from
    its environment: the tool still sends with the token."""
    with fake_chat_api.serve() as api:
        api.on(f"/bot{CHAT_TOKEN}/sendMessage", fake_chat_api.ok({"ok": True, "result": {
            "message_id": 7, "chat": {"id": 42}, "date": 1}}))  # fmt: skip
        async with asyncio.timeout(60):
            daemon, _ = await _start(start_daemon, tg_api=api.url)
            reply = await daemon.send("tg")
            assert reply.ok, reply.error
            assert '"messageId":7' in str(reply.result)
            assert daemon.find("secret_variables_removed") == []  # not in the daemon's log
        assert api.paths() == [f"/bot{CHAT_TOKEN}/sendMessage"]
    log = StateLayout.from_env().process_log("secrets", "main", "secrets").read_text()
    removed = [json.loads(line) for line in log.splitlines() if "secret_variables_removed" in line]
    assert removed and {"CHAT_BOT", "SECRETS_TEST_MODEL_KEY"} <= set(removed[0]["names"])
