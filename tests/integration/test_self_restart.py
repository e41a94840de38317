"""`self-restart__request` through a real daemon: the bundle is re-read, every agent of the
swarm restarts gracefully after the caller's turn (history kept); an invalid bundle is
reported to the tool as a coded error and nothing is touched."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from tests.integration.conftest import StartDaemon
from tests.integration.harness import Daemon

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "self_restart"
SWARM = "selfr"


async def _both_running(start_daemon: StartDaemon, tmp_path: Path) -> tuple[Daemon, Path]:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    daemon = await start_daemon(root, swarm=SWARM)
    for agent in ("alpha", "beta"):
        reply = await daemon.send(f"hello {agent}", agent)
        assert reply.ok, reply.error
    return daemon, root


async def _table(daemon: Daemon) -> dict[str, tuple[int | None, int]]:
    return {p.name: (p.pid, p.generation) for p in (await daemon.status()).processes}


async def test_self_restart_restarts_every_agent_after_the_turn(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        daemon, _ = await _both_running(start_daemon, tmp_path)
        before = await _table(daemon)
        mark = daemon.mark()
        reply = await daemon.send("restart please", "alpha")
        assert reply.ok, reply.error
        assert '"scheduled":true' in reply.result["input"].replace(" ", "")
        for agent in ("alpha", "beta"):
            # both: an agent's `ready` can come in before the fork server's reply that gives
            # the daemon its pid (two sockets), and the table shows the pid from that reply
            for event in ("ready", "spawned"):
                await daemon.wait_for(event, since=mark, process=f"agent:{agent}:{SWARM}:2")
        after = await _table(daemon)
        for agent in ("alpha", "beta"):
            assert after[agent][1] == 2
            assert after[agent][0] not in (None, before[agent][0])
        again = await daemon.send("still there?", "alpha")
        assert again.ok, again.error
        assert again.result["input"] == "still there?"


async def test_an_invalid_bundle_is_reported_to_the_tool_and_nothing_restarts(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        daemon, root = await _both_running(start_daemon, tmp_path)
        before = await _table(daemon)
        main = root / "goondan.yaml"
        main.write_text(
            main.read_text().replace("entryAgent: Agent/alpha", "entryAgent: Agent/nobody")
        )
        reply = await daemon.send("restart please", "alpha")
        assert reply.ok, reply.error
        text = reply.result["input"]
        assert "E_CONFIG_REF_NOT_FOUND" in text
        assert "nobody" in text
        assert await _table(daemon) == before
