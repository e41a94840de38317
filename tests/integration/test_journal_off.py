"""`Swarm.spec.policy.ingress.journal: off`: the daemon's direct `Ingress`
(orchestrator/ingress/direct.py). Events are submitted the moment they are accepted, nothing is
written for them, a reply cannot be re-attached to, and a stop answers what is queued instead of
keeping it for the next start."""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path

from protocol.control import Attach
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode
from tests.integration.conftest import StartDaemon
from tests.integration.harness import SWARM
from tests.integration.test_systemd_notify import NotifySocket

SWARM_NAME = "probe"


def _journal_off(tmp_path: Path) -> Path:
    """The integration fixture's bundle, its swarm without a journal."""
    bundle = tmp_path / "swarm"
    shutil.copytree(SWARM, bundle, ignore=shutil.ignore_patterns("__pycache__"))
    path = bundle / "goondan.yaml"
    text = path.read_text()
    assert text.count("  policy:\n") == 1
    text = text.replace("  policy:\n", "  policy:\n    ingress: {journal: off}\n")
    # a running turn finishes within the grace, however loaded the machine (not killed)
    assert text.count("gracePeriodSeconds: 1\n") == 1
    path.write_text(text.replace("gracePeriodSeconds: 1\n", "gracePeriodSeconds: 10\n"))
    return path


async def test_without_a_journal_sends_are_answered_and_nothing_is_kept(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon(_journal_off(tmp_path))
        reply = await daemon.send("hello", "alpha")
        assert reply.ok, reply.error
        accepted = await daemon.send("hello again", "alpha", wait=False)
        assert accepted.ok, accepted.error
        event_id = str(accepted.result)
        attached = await daemon.request(Attach(request_id="a", event_id=event_id, timeout_ms=5000))
        assert not attached.ok and attached.error is not None
        assert attached.error.code == ErrorCode.E_EVENT_NOT_FOUND
        assert not StateLayout.from_env().journal_file(SWARM_NAME).exists()
        # both turns so far are over (the log is read behind the replies, so count its lines):
        # the turn seen processing below is the next one
        ended = 0
        for _ in range(2):
            line = await daemon.wait_for("transition", ended, source="processing", target="idle")
            ended = daemon.lines.index(line) + 1
        # a turn runs (until the gate file exists); a second send waits behind it, not
        # started, when the stop comes
        mark, gate = ended, tmp_path / "gate"
        running = asyncio.ensure_future(daemon.send(f"until {gate}", "alpha"))
        await daemon.wait_for("transition", since=mark, target="processing")
        queued = asyncio.ensure_future(daemon.send("sleep 0.1", "alpha"))
        await daemon.wait_notices(1)  # accepted, and told why it waits
        daemon.signal(signal.SIGTERM)
        await daemon.wait_for("stopping")
        gate.touch()
        assert (await running).ok
        dropped = await queued
        assert not dropped.ok and dropped.error is not None
        assert dropped.error.code == ErrorCode.E_AGENT_SHUTTING_DOWN
        assert await daemon.wait() == 0
        # nothing is kept without a journal; the queued event is dropped by the daemon's drain,
        # or, when the router had already handed it to the busy child, answered by the child's
        drained = daemon.find("drained")
        assert [line["kept"] for line in drained] == [0]
        assert drained[0]["dropped"] in (0, 1)


async def test_without_a_journal_the_watchdog_is_fed(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """No journal is no core task ending: under systemd's watchdog the daemon keeps pinging
    (it did not: the journal's compaction task returned at once, the watchdog took the daemon
    for stuck and withheld every WATCHDOG=1, so systemd would kill it after WatchdogSec)."""
    notify = NotifySocket(tmp_path / "notify")
    env = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "200000"}
    try:
        async with asyncio.timeout(30):
            daemon = await start_daemon(_journal_off(tmp_path), env=env)
            await notify.until("READY")
        async with asyncio.timeout(5):  # a ping every 0.1 s when fed
            assert (await notify.until("WATCHDOG"))["WATCHDOG"] == "1"
            await notify.until("WATCHDOG")
        async with asyncio.timeout(30):
            daemon.signal(signal.SIGTERM)
            assert await daemon.wait() == 0
    finally:
        notify.close()
