"""Ctrl-C on a `goondan send` that waits for its reply: the client stops waiting with one line
(no traceback) that names the `send --attach` command for the journaled input, exits 130, and
the turn goes on: that command prints its reply."""

from __future__ import annotations

import asyncio
import re
import signal

from tests.integration.conftest import StartDaemon
from tests.integration.harness import PYTHON, REPO, child_env, run_cli

AGENTS = REPO / "tests" / "fixtures" / "agents"


async def test_ctrl_c_on_a_waiting_send_names_the_attach_command(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon(AGENTS, swarm="agents")
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator", "send", "--agent", "worker", "--swarm", "agents",
            "--instance", "slowpoke", "slow",
            env=child_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        while True:  # the turn runs (3 s, the script's delayMs): the send is waiting for it
            status = await daemon.status()
            if any(p.instance_key == "slowpoke" and p.status == "processing"
                   for p in status.processes):  # fmt: skip
                break
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = await proc.communicate()
        assert proc.returncode == 130, err
        text = err.decode()
        assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
        found = re.search(r"goondan send --attach (\S+) --swarm agents", text)
        assert found is not None, text
        code, reply, err2 = await run_cli("send", "--attach", found.group(1), "--swarm", "agents")
        assert code == 0, err2
        assert reply.strip() == "slow reply"
