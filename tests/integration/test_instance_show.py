"""`goondan instance show`: an instance's conversation from the files, through the real CLI, with
a real daemon and after it stopped; `--follow` streams a message written while it runs."""

from __future__ import annotations

import asyncio
import json
import signal

from tests.integration.conftest import StartDaemon
from tests.integration.harness import PYTHON, child_env, run_cli


async def test_show_prints_roles_tool_calls_and_the_trace_with_and_without_a_daemon(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        daemon = await start_daemon()
        assert (await daemon.send("hello there", "alpha", key="k1")).ok
        assert (await daemon.send("pid", "alpha", key="k1")).ok  # one probe__pid tool call
        code, out, err = await run_cli("instance", "show", "k1", "--json")
        assert code == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert [r["role"] for r in rows] == ["user", "assistant", "user", "assistant", "tool",
                                             "assistant"]  # fmt: skip
        assert rows[0]["content"] == "hello there" and rows[0]["agent"] == "alpha"
        assert rows[3]["toolCalls"][0]["name"] == "probe__pid"
        assert rows[4]["toolName"] == "probe__pid" and rows[4]["metadata"]["status"] == "ok"
        traces = {r["turnId"]: r["traceId"] for r in rows}
        assert len(traces) == 2 and all(len(t) == 32 for t in traces.values())
        assert all(r["createdAt"] > 0 for r in rows)
        code, text, _ = await run_cli("instance", "show", "k1")
        assert code == 0
        for trace in traces.values():
            assert f"trace {trace[:8]}" in text
        assert "→ probe__pid {}" in text and "probe__pid [ok]" in text

        await run_cli("stop")
        assert await daemon.wait() == 0
        code, after, _ = await run_cli("instance", "show", "k1", "--json")  # files only now
        assert code == 0 and after == out


async def test_unknown_instance_or_agent_exits_1_naming_what_exists(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        assert (await daemon.send("hi", "alpha", key="k1")).ok
        code, _, err = await run_cli("instance", "show", "nope")
        assert code == 1 and "E_INSTANCE_NOT_FOUND" in err and "k1" in err
        code, _, err = await run_cli("instance", "show", "k1", "--agent", "beta")
        assert code == 1 and "E_INSTANCE_NOT_FOUND" in err and "alpha" in err


async def test_follow_streams_a_message_written_while_it_runs(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(90):
        daemon = await start_daemon()
        assert (await daemon.send("first", "alpha", key="f")).ok
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator", "instance", "show", "f", "--follow", "--json",
            env=child_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            first = [json.loads(await proc.stdout.readline()) for _ in range(2)]
            assert [r["content"] for r in first] == ["first", "first"]
            assert (await daemon.send("second", "alpha", key="f")).ok
            later = [json.loads(await proc.stdout.readline()) for _ in range(2)]
            assert [(r["role"], r["content"]) for r in later] == [
                ("user", "second"),
                ("assistant", "second"),
            ]
            assert later[0]["traceId"] != first[0]["traceId"]
        finally:
            proc.send_signal(signal.SIGINT)
            assert await proc.wait() == 0
