"""`goondan restart` and `goondan stop` say what they did (issue: operator experience 3).

The probe swarm's grace period is 1 s; `hang` is a tool that never returns, so its agent is
wedged in a turn and only SIGKILL ends it.
"""

from __future__ import annotations

import asyncio
import os
import pty
import signal

from protocol.control import Stop, StopReport
from protocol.errors import ErrorCode
from tests.integration.conftest import StartDaemon
from tests.integration.harness import PYTHON, SWARM, child_env, run_cli


async def test_restart_of_a_wedged_agent_says_it_was_killed(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        hang = asyncio.ensure_future(daemon.send("hang", "alpha"))
        await daemon.wait_for("transition", process="agent:alpha:probe:1", target="processing")
        code, out, err = await run_cli("restart", "--agent", "alpha")
        assert code == 0, err
        assert "waiting up to 1 s for the turn of agent:alpha:probe:1" in err
        lines = out.splitlines()
        assert lines[0] == "restarted 1 process(es)"
        assert "agent:alpha:probe:1 -> agent:alpha:probe:2 (killed after the 1 s grace" in lines[1]
        reply = await hang
        assert reply.error is not None and reply.error.code == ErrorCode.E_AGENT_CRASHED
        assert (await daemon.send("echo back", "alpha")).result["input"] == "echo back"


async def test_restart_of_an_idle_agent_says_it_drained(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        assert (await daemon.send("echo hi", "beta")).ok
        code, out, err = await run_cli("restart", "--agent", "beta")
        assert code == 0, err
        assert out.splitlines()[1].strip() == "agent:beta:probe:1 -> agent:beta:probe:2 (drained)"


async def test_stop_reports_killed_processes_and_kept_events(start_daemon: StartDaemon) -> None:
    """A wedged turn is killed after the grace period; the inputs queued behind it were
    journaled, so they are kept for the next start, and their waiting senders hear so."""
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        assert (await daemon.send("hang", "alpha", wait=False)).ok
        await daemon.wait_for("transition", process="agent:alpha:probe:1", target="processing")
        queued = [asyncio.ensure_future(daemon.send(f"echo {i}", "alpha")) for i in range(2)]
        try:
            await daemon.wait_notices(2)  # both accepted, both waiting behind the hung turn
            code, out, err = await run_cli("stop")
            assert code == 0, err
            assert "stopped swarm probe" in out
            assert "1 killed after the 1 s grace period" in out and "agent:alpha:probe:1" in out
            assert "2 queued event(s) kept in the journal" in out
            for reply in await asyncio.gather(*queued):
                assert (
                    reply.error is not None and reply.error.code == ErrorCode.E_AGENT_SHUTTING_DOWN
                )
                assert "kept in the journal" in reply.error.message
        finally:
            for task in queued:  # a failed assertion must not leave a socket open
                task.cancel()
        assert await daemon.wait() == 0
        again = await start_daemon()
        alpha = await again.process("alpha")
        assert alpha.pending >= 2  # the kept events run again after the start


async def test_stop_request_without_wait_answers_at_once(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        reply = await daemon.request(Stop(request_id="s"))
        assert reply.ok and reply.result == {"stopping": True, "pid": daemon.pid}
        assert await daemon.wait() == 0
        assert StopReport().lines() == ["0 process(es) drained"]


async def _read_until(master: int, text: str) -> str:
    """What the terminal showed, up to and including `text`."""
    loop = asyncio.get_running_loop()
    seen = ""
    while text not in seen:
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(master, ready.set_result, None)
        try:
            await ready
        finally:
            loop.remove_reader(master)
        seen += os.read(master, 65536).decode(errors="replace")
    return seen


async def test_first_ctrl_c_on_a_terminal_says_it_drains_and_how_to_force() -> None:
    master, slave = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "orchestrator", "run", str(SWARM), "--no-entry-check",
        env=child_env(), stdin=asyncio.subprocess.DEVNULL, stdout=slave, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    try:
        async with asyncio.timeout(60):
            await _read_until(master, "started")
            code, _, err = await run_cli("send", "--agent", "alpha", "--no-wait", "hang")
            assert code == 0, err
            await _read_until(master, "processing")
            proc.send_signal(signal.SIGINT)
            said = await _read_until(master, "again to force")
            assert "goondan: draining 1 process(es), up to 1 s; Ctrl-C again to force" in said
            proc.send_signal(signal.SIGINT)
            assert await proc.wait() == 1  # forced
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(master)


async def test_a_turn_a_forced_stop_kills_is_kept_and_answered_shutting_down(
    start_daemon: StartDaemon,
) -> None:
    """Ctrl-C twice: the killed turn is not a crash (no `E_AGENT_CRASHED ... send the request
    again`): its waiting sender hears E_AGENT_SHUTTING_DOWN, and the journal keeps the input
    for the next start."""
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        hang = asyncio.ensure_future(daemon.send("hang", "alpha"))
        await daemon.wait_for("transition", process="agent:alpha:probe:1", target="processing")
        daemon.signal(signal.SIGINT)
        await daemon.wait_for("stopping")
        daemon.signal(signal.SIGINT)
        reply = await hang
        assert reply.error is not None, reply
        assert reply.error.code == ErrorCode.E_AGENT_SHUTTING_DOWN, reply.error
        assert "kept in the journal" in reply.error.message
        await daemon.wait()
