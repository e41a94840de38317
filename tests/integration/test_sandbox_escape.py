"""F9 and the sandbox of issue 27, performed against a real daemon through a real agent's
`bash` (tests/fixtures/sandbox: every input is a command; the reply is the tool's result).

Before the sandbox, an agent's `bash` ran as the agent's uid (root here, as in CI): it read the
control token, other instances' conversations and workdirs, the logs and the journal, wrote
into the state root, read the model key from /proc/<agent>/mem, and left a detached process
behind by killing its reaper. Each attack below succeeded then (agent `open`, `sandbox: off`,
shows it still does there) and fails in the sandbox.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon
from tests.integration.test_supervision import MODES, output
from tests.sandboxing import needs_bubblewrap

BUNDLE = REPO / "tests" / "fixtures" / "sandbox"
SWARM = "sandbox"
KEY = SWARM  # the instance a send without a key reaches
MODEL_KEY = "sk-sandbox-model-key-7f3a9c2e51d84b06"


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    """Skip with the install command where bwrap is missing, except under CI=true."""
    needs_bubblewrap()


async def _start(start_daemon: StartDaemon, tmp_path: Path, env: dict[str, str]) -> Daemon:
    keys = tmp_path / "keys.env"
    keys.write_text(f"SANDBOX_TEST_MODEL_KEY={MODEL_KEY}\n")
    return await start_daemon(BUNDLE, swarm=SWARM, env=env, args=["--env-file", str(keys)])


async def bash(daemon: Daemon, command: str, agent: str = "main", key: str | None = None) -> Any:
    """The result of `bash__exec` for `command`, run by `agent` (its instance `key`)."""
    reply = await daemon.send(command, agent, key=key)
    assert reply.ok, reply.error
    return output(reply.result)


async def _pid_of(daemon: Daemon, agent: str, key: str) -> int:
    status = await daemon.status()
    pid = next(p.pid for p in status.processes if p.name == agent and p.instance_key == key)
    assert pid is not None
    return pid


def _landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return max(0, int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))))


def _reads_memory(pid: int, needle: str) -> str:
    """A command that scans /proc/PID/mem for `needle` and prints it reversed (past the output
    masking), the way F9 was found."""
    script = (
        "import re,sys\n"
        f"pid,n={pid},{needle[:12]!r}.encode()\n"
        "mem=open(f'/proc/{pid}/mem','rb',0)\n"
        "for line in open(f'/proc/{pid}/maps'):\n"
        "  m=re.match(r'([0-9a-f]+)-([0-9a-f]+) r',line)\n"
        "  if not m: continue\n"
        "  a,b=int(m[1],16),int(m[2],16)\n"
        "  try: mem.seek(a); data=mem.read(b-a)\n"
        "  except OSError: continue\n"
        "  i=data.find(n)\n"
        "  if i>=0: print(data[i:i+40].split(b'\\0')[0][::-1].decode('latin1')); sys.exit(0)\n"
        "sys.exit(3)\n"
    )
    return f"python3 - <<'EOF'\n{script}EOF"


def _ptraces(pid: int) -> str:
    """PTRACE_ATTACH (16) to `pid`: prints 0 when it is attached."""
    return (
        f'python3 -c "import ctypes; libc=ctypes.CDLL(None); print(libc.ptrace(16, {pid}, 0, 0))"'
    )


def _attacks(layout: StateLayout, agent_pid: int, other_workdir: Path) -> dict[str, str]:
    """Each attack: a command that exits 0 only when it got what it wanted. (Writing into
    `pending-calls/` is checked on the host: the sandbox's state root is an empty tmpfs that
    takes the write and forgets it.)"""
    run = layout.run_paths(SWARM)
    other = layout.instance_paths(SWARM, "other", "main")
    return {
        "control token": f"cat {run.control_token}",
        "other conversation": f"cat {other.base_jsonl}",
        "other workdir": f"cat {other_workdir}/mine.txt",
        "logs": f"ls {layout.logs_dir(SWARM)} | grep -q orchestrator.log",
        "journal": f"head -c 15 {layout.journal_file(SWARM)} | grep -q SQLite",
        "environ": f"cat /proc/{agent_pid}/environ > /dev/null",
        "memory": _reads_memory(agent_pid, MODEL_KEY),
        "ptrace": f"{_ptraces(agent_pid)} | grep -qx 0",
        "unmount": f"umount -l {layout.root} 2>/dev/null; cat {run.control_token}",
    }


async def _scene(daemon: Daemon) -> tuple[StateLayout, int, Path, Path]:
    """Two instances of `main` that talked, the other one with a file in its workdir."""
    layout = StateLayout.from_env()
    assert (await bash(daemon, "true"))["exitCode"] == 0  # `main` has its workdir now
    made = await bash(daemon, "echo private > mine.txt", key="other")
    assert made["exitCode"] == 0, made
    pid = await _pid_of(daemon, "main", KEY)
    other_workdir = layout.instance_paths(SWARM, "other", "main").workdir
    return layout, pid, other_workdir, layout.instance_paths(SWARM, KEY, "main").root


@pytest.mark.parametrize("agent", ["main", "lock"], ids=["bubblewrap", "landlock"])
async def test_nothing_of_the_daemon_is_reachable_from_a_sandboxed_bash(
    start_daemon: StartDaemon, tmp_path: Path, agent: str
) -> None:
    """`main` runs bash in bubblewrap, `lock` in the Landlock fallback."""
    if agent == "lock" and _landlock_abi() < 6:
        pytest.skip("Landlock ABI 6 (Linux 6.12) is not here")
    async with asyncio.timeout(60):
        daemon = await _start(start_daemon, tmp_path, {})
        layout, pid, other_workdir, _ = await _scene(daemon)
        for name, command in _attacks(layout, pid, other_workdir).items():
            result = await bash(daemon, command, agent)
            assert result["exitCode"] != 0, (name, result)
            assert MODEL_KEY[::-1][:12] not in result["stdout"], name
        planted = layout.instance_paths(SWARM, KEY, agent).pending_calls_dir / "evil.json"
        await bash(daemon, f"mkdir -p {planted.parent} && echo x > {planted}", agent)
        assert not planted.exists()
        # the workdir itself is the agent's: a file written there is there after the call
        made = await bash(daemon, "echo kept > made.txt && cat made.txt", agent)
        assert (made["exitCode"], made["stdout"]) == (0, "kept\n"), made
        assert (layout.instance_paths(SWARM, KEY, agent).workdir / "made.txt").exists()


async def test_the_same_attacks_work_with_sandbox_off(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """What the sandbox stops: agent `open` (`sandbox: off`) reads the token and the other
    instance's files as before, and says so in its log at every start."""
    async with asyncio.timeout(60):
        daemon = await _start(start_daemon, tmp_path, {})
        layout, pid, other_workdir, _root = await _scene(daemon)
        attacks = _attacks(layout, pid, other_workdir)
        del attacks["ptrace"]  # it would work, and leave the agent stopped
        for name, command in attacks.items():
            result = await bash(daemon, command, "open")
            assert result["exitCode"] == 0, (name, result)
        # root: CAP_SYS_PTRACE outweighs PR_SET_DUMPABLE 0
        memory = await bash(daemon, _reads_memory(pid, MODEL_KEY), "open")
        assert MODEL_KEY[::-1][:12] in memory["stdout"]
        log = layout.process_log(SWARM, "open", KEY).read_text()
        assert any(
            json.loads(line).get("event") == "sandbox_off"
            and json.loads(line).get("tool") == "bash"
            for line in log.splitlines()
        ), log[-2000:]


async def test_a_detached_process_does_not_outlive_the_call(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """`setsid nohup sleep` in the background, its parent (unsandboxed: the call's reaper)
    killed first: gone with the call."""
    async with asyncio.timeout(60):
        daemon = await _start(start_daemon, tmp_path, {})
        marker = "7321.5"
        command = (
            f"setsid nohup sleep {marker} >/dev/null 2>&1 < /dev/null & "
            "kill -9 $PPID 2>/dev/null; echo started"
        )
        result = await bash(daemon, command)
        assert "started" in result["stdout"], result
        left = [
            p.pid
            for p in psutil.process_iter(["cmdline", "status"])
            if p.info["cmdline"] == ["sleep", marker] and p.info["status"] != "zombie"
        ]
        assert left == []


@pytest.mark.parametrize("env", MODES)
async def test_an_agent_is_not_dumpable(
    start_daemon: StartDaemon, tmp_path: Path, env: dict[str, str]
) -> None:
    """F9: the agent process (forked or cold) holds the model key and has PR_SET_DUMPABLE 0,
    so /proc/<agent>/mem, environ and ptrace are the root's only."""
    async with asyncio.timeout(60):
        daemon = await _start(start_daemon, tmp_path, env)
        reply = await daemon.send("probe dumpable")
        assert reply.ok, reply.error
        probe = output(reply.result)
        assert isinstance(probe, dict)
        assert probe["dumpable"] == 0
        assert probe["pid"] == await _pid_of(daemon, "main", KEY)
