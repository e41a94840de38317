"""Budgets and shared rate limits through a real daemon, against the fake model server.

The fake server (tests/unit/agent_process/fake_llm.py) records every request with the time it
arrived; each test scripts its replies. The bundle is tests/fixtures/costs, written with the
server's address.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import signal
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from protocol.control import StatusResult
from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, run_cli
from tests.unit.agent_process.fake_llm import FakeLLMServer, chat_completion

FIXTURE = REPO / "tests" / "fixtures" / "costs"
SWARM = "costs"
INTERVAL = 60 / 120  # Model/limited: requestsPerMinute 120


def bundle(tmp_path: Path, server: FakeLLMServer) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True)
    text = (root / "goondan.yaml").read_text()
    (root / "goondan.yaml").write_text(text.replace("__LLM__", f"http://127.0.0.1:{server.port}"))
    return root


async def start(start_daemon: StartDaemon, tmp_path: Path, server: FakeLLMServer) -> Daemon:
    return await start_daemon(bundle(tmp_path, server), swarm=SWARM)


def runtime_events(agent: str) -> list[dict[str, Any]]:
    paths = StateLayout.from_env().instance_paths(SWARM, SWARM, agent)
    return [json.loads(line) for line in paths.runtime_events_jsonl.read_text().splitlines()]


def usage_of(status: StatusResult, name: str) -> Any:
    return next(u for u in status.usage if u.name == name)


async def usage_reported(daemon: Daemon, agent: str) -> Any:
    """`agent`'s usage row once its last model call is counted. The agent reports a turn's last
    call right after the reply (so the reply does not wait behind it) and the daemon says
    nothing when it counts it: poll."""
    while True:
        usage = usage_of(await daemon.status(), agent)
        if usage.input_tokens or usage.output_tokens:
            return usage
        await asyncio.sleep(0.05)


async def test_turns_budget_answers_without_calling_the_model_across_restarts(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(90), FakeLLMServer() as server:
        server.replies = [(200, chat_completion("first answer"))]
        daemon = await start(start_daemon, tmp_path, server)
        first = await daemon.send("hello", "capped")
        assert first.ok and first.result["input"] == "first answer"
        refused = await daemon.send("again", "capped")
        assert not refused.ok and refused.error is not None
        assert refused.error.code == "E_AGENT_BUDGET_EXCEEDED"
        assert "turnsPerDay" in refused.error.message
        assert len(server.requests) == 1  # the model was not called for the refused event
        usage = await usage_reported(daemon, "capped")
        assert (usage.turns, usage.turns_per_day, usage.exceeded) == (1, 1, "turnsPerDay")
        assert (usage.input_tokens, usage.output_tokens) == (11, 7)
        assert usage.cost_usd == round((11 * 2 + 7 * 10) / 1e6, 6)

        code, out, err = await run_cli("stop")
        assert code == 0, err
        assert await daemon.wait() == 0
        again = await start(start_daemon, tmp_path, server)  # the tallies are on disk
        refused = await again.send("after the restart", "capped")
        assert refused.error is not None and refused.error.code == "E_AGENT_BUDGET_EXCEEDED"
        assert len(server.requests) == 1
        code, out, err = await run_cli("status")
        assert code == 0, err
        assert "usage today" in out and "1/1" in out and "turnsPerDay" in out


async def test_a_turn_crossing_its_budget_finishes_the_step_and_stops(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60), FakeLLMServer() as server:
        call = {"id": "call_1", "name": "ledger__note", "args": {"text": "paid"}}
        server.replies = [
            (200, chat_completion(tool_calls=[call])),  # 18 tokens: over tokensPerDay 10
            (200, chat_completion("never asked for")),
        ]
        daemon = await start(start_daemon, tmp_path, server)
        reply = await daemon.send("note it", "spender")
        assert reply.error is not None and reply.error.code == "E_AGENT_BUDGET_EXCEEDED"
        assert len(server.requests) == 1
        workdir = StateLayout.from_env().instance_paths(SWARM, SWARM, "spender").workdir
        assert (workdir / "ledger.txt").read_text() == "paid\n"  # the step's tool call ran
        usage = usage_of(await daemon.status(), "spender")
        assert (usage.turns, usage.exceeded) == (1, "tokensPerDay")


async def test_one_rate_limit_bucket_for_three_agent_processes(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60), FakeLLMServer() as server:
        server.replies = [(200, chat_completion(f"answer {i}")) for i in range(12)]
        daemon = await start(start_daemon, tmp_path, server)
        agents = ["r1", "r2", "r3"]
        # warm up: each process starts and opens its HTTP connection (their first requests'
        # start-up time would blur the spacing measured below)
        assert all(r.ok for r in await asyncio.gather(*(daemon.send("hi", a) for a in agents)))
        replies = await asyncio.gather(
            *(daemon.send(f"q{i}", agent) for i in range(3) for agent in agents)
        )
        assert all(r.ok for r in replies), [r.error for r in replies]
        pids = {(await daemon.process(a)).pid for a in agents}
        assert len(pids) == 3  # three processes, one bucket
        arrivals = sorted(r.at for r in server.requests[3:])
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        assert len(arrivals) == 9
        # spaced by one bucket (60 / requestsPerMinute apart), not by each process on its
        # own (three buckets would let three requests through at once, 0.4 s in all); the
        # slack allows for the time from a permit to its request reaching the server
        assert min(gaps) >= INTERVAL * 0.5, gaps
        assert all(
            b - a >= 2 * INTERVAL * 0.8 for a, b in zip(arrivals, arrivals[2:], strict=False)
        ), gaps
        assert arrivals[-1] - arrivals[0] >= 8 * INTERVAL * 0.95
        [limit] = (await daemon.status()).models
        assert (limit.name, limit.requests_per_minute, limit.granted) == ("limited", 120, 12)


async def test_a_provider_429_drains_the_bucket_for_everyone(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60), FakeLLMServer() as server:
        limited = {"error": {"message": "slow down", "type": "rate_limit_error"}}
        server.replies = [
            (429, limited, {"retry-after": "2"}),
            (200, chat_completion("r2 answer")),
            (200, chat_completion("r3 answer")),
        ]
        daemon = await start(start_daemon, tmp_path, server)
        first = await daemon.send("go", "r1")
        assert first.error is not None and first.error.code == "E_MODEL_RATE_LIMIT"
        refused_at = server.requests[0].at
        mark = daemon.mark()
        others = asyncio.gather(daemon.send("go", "r2"), daemon.send("go", "r3"))
        await daemon.wait_for("rate_limit_waiting", mark, model="limited")
        status = await daemon.status()
        [limit] = status.models
        assert limit.waiting >= 1 and limit.blocked_for_seconds > 0  # visible while it waits
        assert all(r.ok for r in await others)
        assert min(r.at for r in server.requests[1:]) >= refused_at + 2 - 0.1
        code, out, err = await run_cli("status")
        assert code == 0, err
        assert "model rate limits" in out


def test_status_json_round_trips() -> None:
    """`usage` and `models` are optional in a StatusResult (an older daemon sends neither)."""
    raw = {"orchestrator": {"pid": 1, "swarm": "s", "bundle": "b", "startedAt": "t",
                            "version": "v", "stateRoot": "r"}}  # fmt: skip
    status = msgspec.convert(raw, StatusResult)
    assert status.usage == [] and status.models == []


async def test_a_corrupt_usage_file_holds_the_budgets_instead_of_starting_at_zero(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    usage = StateLayout.from_env().usage_file(SWARM)
    usage.parent.mkdir(parents=True)
    usage.write_bytes(b"\x00garbage, not JSON")
    async with asyncio.timeout(60), FakeLLMServer() as server:
        server.replies = [(200, chat_completion("an agent without a budget still runs"))]
        daemon = await start(start_daemon, tmp_path, server)
        line = await daemon.wait_for("usage_file_corrupt", code="E_USAGE_FILE_CORRUPT")
        kept = Path(line["kept"])
        content = await asyncio.to_thread(kept.read_bytes)
        assert content == b"\x00garbage, not JSON"  # kept aside, never deleted
        refused = await daemon.send("hello", "capped")
        assert refused.error is not None and refused.error.code == "E_AGENT_BUDGET_EXCEEDED"
        assert kept.name in refused.error.message
        assert server.requests == []  # no fresh budget: the model was not called
        assert usage_of(await daemon.status(), "capped").exceeded == "usageUnknown"
        free = await daemon.send("hello", "r1")  # no budget of its own, none for the swarm
        assert free.ok, free.error


def turns_kept(agent: str) -> int:
    """Turns of `agent` in usage.json and, where the journal keeps one, in its copy: the least
    of the two, so a SIGKILL after it loses neither."""
    layout = StateLayout.from_env()
    usage = layout.usage_file(SWARM)
    copies: list[bytes] = [usage.read_bytes()] if usage.exists() else [b"{}"]
    with contextlib.closing(sqlite3.connect(layout.journal_file(SWARM))) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if "usage" in tables:
            row = conn.execute("SELECT ledger FROM usage").fetchone()
            copies.append(row[0] if row is not None else b"{}")
    return min(int(json.loads(c).get("agents", {}).get(agent, {}).get("turns", 0)) for c in copies)


async def until_kept(agent: str, turns: int) -> None:
    while True:  # saved within 0.25 s by the daemon, which says nothing of it: poll
        if await asyncio.to_thread(turns_kept, agent) >= turns:
            return
        await asyncio.sleep(0.05)


async def test_deleting_the_usage_file_and_sigkilling_does_not_reset_a_budget(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """Issue 27, F11: spend a budget, SIGKILL the daemon, delete usage.json, start again: the
    budget is still spent (the journal keeps a copy of the tallies)."""
    async with asyncio.timeout(90), FakeLLMServer() as server:
        server.replies = [(200, chat_completion("first answer"))]
        daemon = await start(start_daemon, tmp_path, server)
        first = await daemon.send("hello", "capped")
        assert first.ok, first.error
        await until_kept("capped", turns=1)
        daemon.signal(signal.SIGKILL)
        await daemon.wait()
        StateLayout.from_env().usage_file(SWARM).unlink()

        again = await start(start_daemon, tmp_path, server)
        refused = await again.send("after the reset attempt", "capped")
        assert refused.error is not None and refused.error.code == "E_AGENT_BUDGET_EXCEEDED"
        assert again.find("usage_file_missing", code="E_USAGE_FILE_CORRUPT")
        assert "turnsPerDay" in refused.error.message
        assert len(server.requests) == 1  # the model was not called again
        assert usage_of(await again.status(), "capped").turns == 1


async def test_turns_are_counted_for_an_agent_without_a_budget(start_daemon: StartDaemon) -> None:
    """`goondan status` counts every turn, not only those of agents with a budget or a rate
    limit (their model calls ask for permits; the others' only report usage)."""
    async with asyncio.timeout(60):
        daemon = await start_daemon()  # the probe swarm: scripted models, no budget anywhere
        for text in ("one", "two", "three"):
            assert (await daemon.send(text, "alpha")).ok
        while True:  # the last call's usage comes right after the reply: poll
            rows = {u.name: u for u in (await daemon.status()).usage if u.scope == "agent"}
            if "alpha" in rows and rows["alpha"].turns >= 3:
                break
            await asyncio.sleep(0.05)
        code, out, err = await run_cli("status", "--swarm", daemon.swarm)
    assert rows["alpha"].turns == 3
    assert code == 0, err
    lines = out.splitlines()
    usage = lines[next(i for i, row in enumerate(lines) if row.startswith("SCOPE")) :]
    header = usage[0].split()
    alpha = next(row.split() for row in usage if row.split()[:2] == ["agent", "alpha"])
    assert alpha[header.index("TURNS")] == "3", out


async def test_a_start_with_budgets_and_rate_limits_logs_no_error(tmp_path: Path) -> None:
    """The fork server rehearses turns of the bundle's agents before the first child: with a
    budget or a rate limit they asked for permits it cannot get (a turn_crashed line and its
    traceback each, at every start)."""
    async with asyncio.timeout(60), FakeLLMServer() as server:
        server.replies = [(200, chat_completion("hello"))] * 4
        code, out, err = await run_cli(
            "run", str(bundle(tmp_path, server)), "--input", "hi", "--no-entry-check",
            "--log-format", "json",
        )  # fmt: skip
    assert code == 0, err
    logged = out + err  # `run --input` logs where the daemon would, the reply on stdout
    assert "turn_crashed" not in logged
    assert [line for line in logged.splitlines() if '"level": "error"' in line] == []
