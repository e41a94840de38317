"""bash: no descendant of a call outlives it, however it detached; other processes are spared.

Each command below starts processes that leave the call's process group the ways a shell
allows (`setsid cmd &`, `setsid -f`, a double fork, a double fork into a new session) and
writes their pids before it ends. Pids travel through FIFOs where the shell could not know them
itself, so a pid file exists before the command ends: a handshake, not a race.
"""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bundles.sdk import ToolFailed
from protocol.cgroupfs import own_cgroup

from .conftest import FakeContext, call, load_tool

bash = load_tool("tools/bash.py")


@pytest.fixture
def ctx(workdir: Path) -> FakeContext:
    """Unsandboxed: these tests follow the call's processes by their pids, which a sandbox's
    PID namespace renumbers (tests/unit/base_tools/test_sandbox.py covers the sandbox)."""
    return FakeContext(workdir=workdir, config={"sandbox": "off"})


def _contain() -> Any:
    """The `_contain` helper exactly as bash loaded it (looked up late: a test that shows the
    bug on the old code must get as far as its assertions)."""
    return bash._process._contain


ESCAPES = {
    "setsid-bg": "setsid sleep 1000 & echo $! > setsid-bg.pid",
    "setsid-f": (
        "setsid -f sh -c 'echo $$ > p1; exec sleep 1000'; read x < p1; echo $x > setsid-f.pid"
    ),
    "double-fork": "(sleep 1000 & echo $! > p2) & read x < p2; echo $x > double-fork.pid",
    "double-fork-setsid": (
        "(setsid sleep 1000 & echo $! > p3) & read x < p3; echo $x > double-fork-setsid.pid"
    ),
}
SPAWN_ALL = "mkfifo p1 p2 p3; " + "; ".join(ESCAPES.values())


def alive(pid: int) -> bool:
    """Is `pid` a running process (not gone, not a zombie waiting to be reaped)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def pids(workdir: Path) -> dict[str, int]:
    return {name: int((workdir / f"{name}.pid").read_text()) for name in ESCAPES}


def _test_cgroup_parent() -> Path | None:
    """A cgroup v2 directory of our own for per-call cgroups, when this machine lets us make
    one (the agent's cgroup is not delegated in a test run, so `auto` would not use it)."""
    own = own_cgroup()
    if own is None or not os.access(own, os.W_OK):
        return None
    parent = own / f"goondan-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        parent.mkdir()
    except OSError:
        return None
    if not (parent / "cgroup.kill").exists():  # Linux < 5.14
        parent.rmdir()
        return None
    return parent


@pytest.fixture(params=["subreaper", "cgroup"])
def tracked(
    request: pytest.FixtureRequest, ctx: FakeContext, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeContext]:
    """Both ways of holding a call's processes; the cgroup one where this machine has one."""
    mode: str = request.param
    parent = None
    if mode == "cgroup":
        parent = _test_cgroup_parent()
        if parent is None:
            pytest.skip("no writable cgroup v2 directory with cgroup.kill here")
        monkeypatch.setattr(_contain(), "delegated_cgroup", lambda: parent)
    yield replace(ctx, config={**ctx.config, "processTracking": mode})
    if parent is not None:
        left = _remove_cgroups(parent)
        assert left == [], "a per-call cgroup was left behind"


def _remove_cgroups(parent: Path) -> list[str]:
    """Remove the test's cgroup directory; returns the per-call ones that were still there
    (their processes killed and waited for first: a failed test leaves nothing behind)."""
    left = sorted(path.name for path in parent.glob("goondan-call-*"))
    for name in left:
        cgroup = parent / name
        (cgroup / "cgroup.kill").write_text("1")
        for pid in map(int, (cgroup / "cgroup.procs").read_text().split()):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                select.select([fd], [], [], 10)  # readable once it has exited
            finally:
                os.close(fd)
        cgroup.rmdir()
    parent.rmdir()
    return left


async def test_the_command_runs_inside_its_holder(tracked: FakeContext) -> None:
    command = "grep '^0::' /proc/self/cgroup; tr '\\0' ' ' < /proc/$PPID/cmdline"
    async with asyncio.timeout(20):
        out = await call(bash, "exec", tracked, {"command": command})
    cgroup_line, parent = out["stdout"].splitlines()
    if tracked.config["processTracking"] == "cgroup":
        assert "/goondan-call-" in cgroup_line
    else:
        assert "_reaper.py" in parent  # a subreaper between the agent and the command


async def test_detached_processes_are_gone_when_the_call_returns(
    tracked: FakeContext, workdir: Path
) -> None:
    async with asyncio.timeout(20):
        out = await call(bash, "exec", tracked, {"command": SPAWN_ALL + "; echo done"})
    assert (out["exitCode"], out["stdout"]) == (0, "done\n")
    survivors = {name: pid for name, pid in pids(workdir).items() if alive(pid)}
    assert survivors == {}, f"outlived the call: {survivors}"


async def test_detached_processes_are_gone_after_a_timeout(
    tracked: FakeContext, workdir: Path
) -> None:
    command = SPAWN_ALL + "; echo spawned; sleep 60"
    async with asyncio.timeout(20):
        out = await call(bash, "exec", tracked, {"command": command, "timeoutMs": 1500})
    assert out["timedOut"] is True
    assert out["stdout"] == "spawned\n"
    survivors = {name: pid for name, pid in pids(workdir).items() if alive(pid)}
    assert survivors == {}, f"outlived the call: {survivors}"


STARTS_AFTER_THE_DEADLINE = (
    "trap 'told=1' TERM; while [ -z \"$told\" ]; do sleep 0.05; done; "
    "bash -c \"trap 'echo got-term; exit 7' TERM; echo started; sleep 30 & wait\""
)
"""A shell that starts its trapping child only once it got the deadline's SIGTERM itself: the
child did not exist when that SIGTERM went out (as a command whose sandbox took longer to set
up than the deadline)."""


async def test_a_process_started_after_the_deadline_gets_its_sigterm_too(
    tracked: FakeContext,
) -> None:
    """The stop looks again during the grace period: a process that did not exist when the
    deadline's SIGTERM went out is told too, instead of being killed at the end of the grace."""
    ctx = replace(tracked, config={**tracked.config, "killGraceMs": 5_000})
    # the deadline must come after the shell set its trap: 1 s was not always enough for a
    # loaded CI machine to start the shell (it died of the SIGTERM, 143, before trapping it)
    command = {"command": STARTS_AFTER_THE_DEADLINE, "timeoutMs": 3_000}
    async with asyncio.timeout(30):
        out = await call(bash, "exec", ctx, command)
    assert (out["timedOut"], out["exitCode"], out["stdout"]) == (True, 7, "started\ngot-term\n")


async def test_a_child_ignoring_sigterm_in_its_own_session_is_killed(
    tracked: FakeContext, workdir: Path
) -> None:
    ctx = replace(tracked, config={**tracked.config, "killGraceMs": 200})
    command = "setsid sh -c 'trap \"\" TERM; sleep 1000' & echo $! > stubborn.pid; sleep 60"
    async with asyncio.timeout(20):
        out = await call(bash, "exec", ctx, {"command": command, "timeoutMs": 1000})
    assert out["timedOut"] is True
    assert not alive(int((workdir / "stubborn.pid").read_text()))


async def test_a_script_s_detached_processes_are_gone_too(
    tracked: FakeContext, workdir: Path
) -> None:
    (workdir / "spawn.sh").write_text(SPAWN_ALL + "\n")
    async with asyncio.timeout(20):
        out = await call(bash, "script", tracked, {"path": "spawn.sh"})
    assert out["exitCode"] == 0
    assert not any(alive(pid) for pid in pids(workdir).values())


@pytest.fixture
async def bystander() -> AsyncIterator[asyncio.subprocess.Process]:
    """A child of the agent process that no tool call started (an MCP server, say), in a
    session of its own like a detached job would be."""
    proc = await asyncio.create_subprocess_exec(
        "sleep", "1000", stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        yield proc
    finally:
        proc.kill()
        async with asyncio.timeout(10):
            await proc.wait()


async def test_one_call_s_sweep_spares_the_agent_s_other_processes(
    tracked: FakeContext, workdir: Path, bystander: asyncio.subprocess.Process
) -> None:
    (workdir / "other").mkdir()
    other = workdir / "other"
    os.mkfifo(other / "ready")
    os.mkfifo(other / "release")
    slow = (
        "setsid sleep 1000 & echo $! > bg.pid; (setsid sleep 1000 & echo $! > p) & read x < p; "
        "echo $x > df.pid; echo go > ready; read x < release; echo finished"
    )
    os.mkfifo(other / "p")
    pending = asyncio.create_task(call(bash, "exec", tracked, {"command": slow, "cwd": "other"}))
    async with asyncio.timeout(20):
        # Blocks until the slow call has started its detached jobs: a handshake, not a sleep.
        assert await asyncio.to_thread((other / "ready").read_text) == "go\n"
        out = await call(bash, "exec", tracked, {"command": SPAWN_ALL})
    assert out["exitCode"] == 0
    assert not any(alive(pid) for pid in pids(workdir).values())
    theirs = [int((other / name).read_text()) for name in ("bg.pid", "df.pid")]
    assert all(alive(pid) for pid in theirs), "a call swept another call's processes"
    assert bystander.returncode is None
    assert alive(bystander.pid), "a call swept a process it did not start"
    async with asyncio.timeout(20):
        await asyncio.to_thread((other / "release").write_text, "now\n")
        finished = await pending
    assert finished["stdout"] == "finished\n"
    assert not any(alive(pid) for pid in theirs)
    assert alive(bystander.pid)


async def survivors_of_a_cancelled_call(
    ctx: FakeContext, workdir: Path, cancelled: Callable[[], object] = lambda: None
) -> dict[str, int]:
    """Start a call that detaches every kind of process, cancel it once they all run (then
    `cancelled()`), and return those alive when its CancelledError reached us."""
    os.mkfifo(workdir / "ready")
    command = SPAWN_ALL + "; echo go > ready; sleep 60"
    task = asyncio.create_task(call(bash, "exec", ctx, {"command": command}))
    async with asyncio.timeout(20):
        assert await asyncio.to_thread((workdir / "ready").read_text) == "go\n"
    task.cancel()
    cancelled()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(20):
            await task
    return {name: pid for name, pid in pids(workdir).items() if alive(pid)}


async def test_cancelling_a_call_kills_its_detached_processes(
    tracked: FakeContext, workdir: Path
) -> None:
    # The cancelled call swept before its CancelledError reached us.
    survivors = await survivors_of_a_cancelled_call(tracked, workdir)
    assert survivors == {}, f"outlived the cancelled call: {survivors}"


async def test_a_call_cancelled_before_its_pipes_are_wired_leaves_nothing(
    tracked: FakeContext, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine the command runs (and detaches its processes) before asyncio has
    wired its pipes: a cancellation then must sweep them too before it goes on (CI, 3.11)."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.BaseEventLoop):
        pytest.skip("the pipes are held back through asyncio's own loop")
    wired = asyncio.Event()
    connect = loop.connect_read_pipe

    async def held_back(*args: Any, **kwargs: Any) -> Any:
        await wired.wait()
        return await connect(*args, **kwargs)

    monkeypatch.setattr(loop, "connect_read_pipe", held_back)
    # the loop gets to the pipes a moment after the cancellation
    survivors = await survivors_of_a_cancelled_call(
        tracked, workdir, lambda: loop.call_later(0.2, wired.set)
    )
    assert survivors == {}, f"outlived the cancelled call: {survivors}"


async def test_processes_tracking_is_checked(ctx: FakeContext) -> None:
    bad = replace(ctx, config={"processTracking": "chroot"})
    with pytest.raises(ToolFailed) as info:
        async with asyncio.timeout(10):
            await call(bash, "exec", bad, {"command": "true"})
    assert "processTracking" in info.value.message


async def test_cgroup_tracking_without_a_delegated_cgroup_is_a_clear_error(
    ctx: FakeContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_contain(), "delegated_cgroup", lambda: None)
    cgroup = replace(ctx, config={"processTracking": "cgroup"})
    with pytest.raises(ToolFailed) as info:
        async with asyncio.timeout(10):
            await call(bash, "exec", cgroup, {"command": "true"})
    assert info.value.suggestion is not None
    assert "auto" in info.value.suggestion


async def test_a_dead_agent_s_call_cgroup_is_emptied_by_the_next_call(
    ctx: FakeContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = _test_cgroup_parent()
    if parent is None:
        pytest.skip("no writable cgroup v2 directory with cgroup.kill here")
    monkeypatch.setattr(_contain(), "delegated_cgroup", lambda: parent)
    gone = await asyncio.create_subprocess_exec("true")
    async with asyncio.timeout(10):
        await gone.wait()
    stale = parent / f"goondan-call-{gone.pid}-0123456789ab"  # an agent pid that is no more
    stale.mkdir()
    leftover = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        'echo $$ > "$0/cgroup.procs" && echo moved && exec sleep 1000',
        str(stale),
        stdout=subprocess.PIPE,
    )
    assert leftover.stdout is not None
    try:
        async with asyncio.timeout(20):
            assert await leftover.stdout.readline() == b"moved\n"
            tracked = replace(ctx, config={"processTracking": "cgroup"})
            await call(bash, "exec", tracked, {"command": "true"})
            assert await leftover.wait() == -9
    finally:
        if leftover.returncode is None:
            leftover.kill()
            await leftover.wait()
    assert not stale.exists() or (stale / "cgroup.procs").read_text() == ""
    for directory in (stale, parent):
        if directory.exists():
            directory.rmdir()
