"""Finding 5 of the security review, secrets, performed against a real daemon the way it was
found (tests/fixtures/secrets): a chat token named by the telegram tool's `tokenEnv` showed up
in a bash tool's `env` output, the reply and base.jsonl; the model key could be read from
/proc/<agent pid>/environ; the model key written to stderr in pieces reached the agent's log;
and the webhook's port, read from the environment, was masked in every tool output as `***`.

Each test fails without its fix; the unit tests beside the code cover the mechanisms."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path

import psutil
import pytest

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon
from tests.integration.test_example_workspace import free_port
from tests.integration.test_supervision import MODES
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


def _environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode()


def _of_run(daemon: Daemon) -> dict[int, str]:
    """Every process of the run and its title, the daemon's included."""
    procs = {daemon.pid: _cmdline(daemon.pid)}
    for proc in daemon.descendants():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, psutil.NoSuchProcess):
            procs[proc.pid] = _cmdline(proc.pid)
    return procs


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
        # a subprocess any tool starts (not only bash, which scrubs) inherits neither
        inherited = str((await daemon.send("subenv")).result)
        assert "PATH=" in inherited
        for secret in SECRETS:
            assert secret not in inherited


@pytest.mark.parametrize("env", MODES)
async def test_no_process_of_the_run_shows_a_key_in_proc_environ(
    start_daemon: StartDaemon, env: dict[str, str]
) -> None:
    """/proc/<pid>/environ (the block a process was started with, readable by any process of
    the user, a tool included) of the daemon, the fork server, the agent and the connector held
    the model key and the chat token."""
    async with asyncio.timeout(60):
        daemon, _ = await _start(start_daemon, env)
        assert (await daemon.send("hello")).ok
        procs = _of_run(daemon)
        agent = (await daemon.process("main")).pid
        assert agent is not None and agent in procs
        assert len(procs) >= (4 if not env else 3)  # daemon, (fork server,) agent, connector
        for pid, title in procs.items():
            block = _environ(pid)
            for secret in SECRETS:
                assert secret.encode() not in block, f"{secret} in /proc/{pid}/environ ({title})"


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


async def test_a_token_written_to_stderr_in_pieces_is_masked_in_the_log(
    start_daemon: StartDaemon,
) -> None:
    """Two `sys.stderr.write` calls, two `os.write(2, ...)` calls that split the key, and a
    process that writes it after the agent exited: the log has `***`, never the key, and the
    port (no credential) as it is."""
    async with asyncio.timeout(60):
        daemon, port = await _start(start_daemon)
        reply = await daemon.send("leak")
        assert reply.ok, reply.error
        daemon.signal(signal.SIGTERM)  # the daemon drains every pipe before it exits
        assert await daemon.wait() == 0
    log = StateLayout.from_env().process_log("secrets", "main", "secrets").read_text()
    assert MODEL_KEY not in log and MODEL_KEY[: len(MODEL_KEY) // 2] not in log
    lines = {line.split(" ", 1)[0]: line for line in log.splitlines() if line.startswith("leak-")}
    assert set(lines) == {"leak-a", "leak-b", "leak-c"}
    assert sorted(lines.values()) == [f"leak-{c} *** port={port}" for c in "abc"]


async def test_each_process_of_a_run_says_what_it_is(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon, _ = await _start(start_daemon)
        assert (await daemon.send("hello")).ok
        titles = set(_of_run(daemon).values())
        assert {
            "goondan: orchestrator secrets",
            "goondan: fork server secrets",
            "goondan: agent main@secrets",
            "goondan: connector hook",
        } <= titles


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
