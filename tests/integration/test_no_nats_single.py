"""Single-machine mode never imports NATS: cluster mode's client loads only with --cluster.

A `nats` package that records its import is put first on the daemon's path; a real daemon
then starts, answers a send and stops without touching it.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO

TRAP = """
import os, pathlib
pathlib.Path(os.environ["NATS_TRAP"]).write_text(str(os.getpid()))
raise ImportError("single-machine mode imported nats")
"""


async def test_a_single_machine_daemon_never_imports_nats(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    trap_dir, marker = tmp_path / "trap", tmp_path / "imported"
    (trap_dir / "nats").mkdir(parents=True)
    (trap_dir / "nats" / "__init__.py").write_text(TRAP)
    env = {"PYTHONPATH": f"{trap_dir}:{REPO}", "NATS_TRAP": str(marker)}
    async with asyncio.timeout(60):
        daemon = await start_daemon(env=env)
        reply = await daemon.send("hello")
        assert reply.ok, reply.error
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
    assert not marker.exists(), "nats was imported by a single-machine daemon"
