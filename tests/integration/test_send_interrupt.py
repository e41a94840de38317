"""`goondan send` at its edges: Ctrl-C while it waits for its reply stops the client with one
line (no traceback) naming the `send --attach` command for the journaled input, exit 130, and
the turn goes on (that command prints its reply); the input read from stdin (`-`, or a pipe),
an empty or oversized one refused before anything is sent."""

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


async def _send(*args: str, stdin: bytes) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "orchestrator", "send", *args, env=child_env(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_send_reads_stdin_and_refuses_an_empty_input(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        code, out, err = await _send("--agent", "alpha", stdin=b"piped in\n")
        assert code == 0, err
        assert out == "piped in\n"  # the echo of "piped in": the pipe's last line end is not sent
        code, out, err = await _send("--agent", "alpha", stdin=b"two\nlines\r\n")
        assert code == 0 and out == "two\nlines\n", err
        code, out, err = await _send("--agent", "alpha", "-", stdin=b"dash\n")
        assert code == 0, err
        assert "dash" in out
        for args, given in ((("",), b""), ((), b""), ((), b" \n\t"), (("-",), b"")):
            code, out, err = await _send("--agent", "alpha", *args, stdin=given)
            assert code == 2, (args, given, out)
            assert "E_CONTROL_BAD_REQUEST" in err and "nothing to send" in err
        code, _, err = await _send("--agent", "alpha", stdin=b"x" * ((1 << 20) + 1))
        assert code == 2 and "E_CONTROL_BAD_REQUEST" in err
        code, _, err = await _send("--attach", "ev1", "text", stdin=b"")
        assert code == 2 and "not both" in err
        assert (await daemon.send("still serving", "alpha")).ok
