"""Finding 13 of the security review, per-agent resource limits, performed against a real
daemon the way it was found (tests/fixtures/limits): a tool could take all the memory, CPU or
processes of the machine. With Agent.spec.limits each breach is coded and the daemon serves on.

Each test fails without its fix; the unit tests beside the code cover the mechanisms."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, run_cli

BUNDLE = REPO / "tests" / "fixtures" / "limits"


def tool_result(reply_result: Any) -> Any:
    """The tool result a reply carries (the scripted model echoes it)."""
    assert isinstance(reply_result, dict)
    return json.loads(reply_result["input"])


async def test_a_tool_that_allocates_past_the_memory_limit_gets_a_coded_error(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon(BUNDLE, swarm="limits")
        before = tool_result((await daemon.send("pid", "hungry")).result)["output"]
        reply = await daemon.send("alloc", "hungry")
        assert reply.ok, reply.error
        result = tool_result(reply.result)
        assert result["status"] == "error", result
        assert result["error"]["code"] == ErrorCode.E_AGENT_LIMIT
        # the same process goes on serving, and so does the daemon
        after = tool_result((await daemon.send("pid", "hungry")).result)["output"]
        assert after == before
        hungry = await daemon.process("hungry")
        assert (hungry.pid, hungry.restarts) == (before, 0)


async def test_a_tool_that_burns_cpu_past_the_limit_ends_its_process_coded(
    start_daemon: StartDaemon,
) -> None:
    """RLIMIT_CPU: SIGXCPU ends the process; the supervisor records it as a crash with the
    reason `cpu_limit`, the cut turn resumes once in a new process (its idempotent tool runs
    again and ends that one too: E_AGENT_CRASHED) and the next event gets a new process."""
    async with asyncio.timeout(90):
        daemon = await start_daemon(BUNDLE, swarm="limits")
        reply = await daemon.send("spin", "busy")
        assert not reply.ok and reply.error is not None, reply.result
        assert reply.error.code == ErrorCode.E_AGENT_CRASHED
        seen = await daemon.wait_for("agent_limit", process="agent:busy:limits:1")
        assert seen["code"] == ErrorCode.E_AGENT_LIMIT
        again = await daemon.send("pid", "busy")
        assert again.ok, again.error
        busy = await daemon.process("busy")
        assert busy.generation == 3  # its cut turn resumed once, and the limit ended it again
        assert busy.last_exit is not None
        assert (busy.last_exit.reason, busy.last_exit.signal) == ("cpu_limit", signal.SIGXCPU)
        assert (await daemon.status()).orchestrator.pid == daemon.pid


def _tasks_of(uid: int) -> int:
    """Processes and threads whose real uid is `uid` (what RLIMIT_NPROC counts)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue  # gone meanwhile
    return count


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="RLIMIT_NPROC does not bind root, and a test daemon's cgroup is not delegated",
)
async def test_a_tool_that_forks_past_the_process_limit_fails_coded(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    # room for the daemon, the fork server and the agent's threads, not for 2000 processes
    allowed = _tasks_of(os.getuid()) + 64
    text = (bundle / "goondan.yaml").read_text()
    (bundle / "goondan.yaml").write_text(
        text.replace("limits: {memory: 256Mi}", f"limits: {{processes: {allowed}}}")
    )
    async with asyncio.timeout(60):
        daemon = await start_daemon(bundle, swarm="limits")
        reply = await daemon.send("fork", "hungry")
        assert reply.ok, reply.error
        result = tool_result(reply.result)
        assert result["status"] == "error", result
        assert result["error"]["code"] == ErrorCode.E_AGENT_LIMIT
        assert (await daemon.send("pid", "hungry")).ok


async def test_validate_rejects_bad_limits_with_a_coded_diagnostic(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    text = (bundle / "goondan.yaml").read_text()
    (bundle / "goondan.yaml").write_text(text.replace("{memory: 256Mi}", "{memory: lots}"))
    async with asyncio.timeout(30):
        code, out, _ = await run_cli("validate", str(bundle), "--json")
    assert code == 2
    errors = json.loads(out)["errors"]
    assert [(e["code"], e["path"].split(" ")[1]) for e in errors] == [
        (ErrorCode.E_CONFIG_SCHEMA_INVALID, "spec.limits.memory")
    ]
