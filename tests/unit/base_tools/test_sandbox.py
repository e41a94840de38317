"""`bash` in its sandbox (`_sandbox`): what a command sees, keeps and may do, how a deadline
stops it, and the coded refusal where no sandbox can start. Runs bubblewrap for real (tests
skip without it, with the install command, except under CI=true where they fail)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode
from tests.sandboxing import needs_bubblewrap

from .conftest import FakeContext, call, load_tool
from .test_bash_descendants import STARTS_AFTER_THE_DEADLINE, _remove_cgroups, _test_cgroup_parent

bash = load_tool("tools/bash.py")
file_system = load_tool("tools/file_system.py")


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    needs_bubblewrap()


async def run(ctx: FakeContext, command: str, **args: Any) -> Any:
    async with asyncio.timeout(15):
        return await call(bash, "exec", ctx, {"command": command, **args})


def sandboxed(ctx: FakeContext, **box: Any) -> FakeContext:
    return replace(ctx, config={**ctx.config, "sandbox": {"mode": "auto", **box}})


async def test_the_workdir_is_writable_and_the_rest_read_only(
    ctx: FakeContext, workdir: Path, tmp_path: Path
) -> None:
    out = await run(ctx, "echo kept > made.txt; touch /usr/x; echo $?; echo t > /tmp/t; echo $?")
    assert out["stdout"] == "1\n0\n", out
    assert (workdir / "made.txt").read_text() == "kept\n"
    assert not (tmp_path.parent / "t").exists()
    # the workdir's sibling, readable by the agent's uid, is not there
    seen = await run(ctx, f"cat {tmp_path / 'outside' / 'secret.txt'}")
    assert seen["exitCode"] != 0 and "top secret" not in seen["stdout"]


async def test_hidden_paths_are_empty_and_roots_inside_them_stay(
    ctx: FakeContext, workdir: Path, tmp_path: Path
) -> None:
    """The agent hides the state root, which holds the workdir: the workdir comes back, its
    siblings do not; a hidden file (an env file) reads as empty."""
    env_file = tmp_path / "keys.env"
    env_file.write_text("KEY=sk-hidden\n")
    box = sandboxed(ctx, hide=[str(tmp_path), str(env_file)])
    out = await run(box, f"ls {tmp_path}; cat {env_file}; echo in > here.txt")
    assert out["exitCode"] == 0, out
    assert out["stdout"] == "work\n"
    assert (workdir / "here.txt").exists()


async def test_a_configured_root_is_writable_and_a_root_holding_a_hidden_path_hides_it(
    ctx: FakeContext, workdir: Path, tmp_path: Path
) -> None:
    box = sandboxed(replace(ctx, config={"roots": [".", "../outside"]}), hide=[str(workdir)])
    out = await run(box, f"echo x > {tmp_path / 'outside' / 'new.txt'} && ls")
    assert out["exitCode"] == 0, out
    assert (tmp_path / "outside" / "new.txt").exists()
    # a root `/..` of the hidden path: the hidden path inside it is covered again
    wide = sandboxed(replace(ctx, config={"roots": [".", ".."]}), hide=[str(tmp_path / "outside")])
    seen = await run(wide, f"cat {tmp_path / 'outside' / 'secret.txt'}")
    assert seen["exitCode"] != 0


async def test_no_other_process_no_capabilities_and_a_network_that_can_be_off(
    ctx: FakeContext,
) -> None:
    out = await run(ctx, f"test -e /proc/{os.getpid()}; echo $?; grep CapEff /proc/self/status")
    assert out["stdout"].split() == ["1", "CapEff:", "0000000000000000"], out
    offline = await run(sandboxed(ctx, network=False), "tail -n +3 /proc/net/dev | cut -d: -f1")
    assert offline["stdout"].split() == ["lo"], offline


async def test_a_deadline_gives_the_sandboxed_command_its_grace_period(ctx: FakeContext) -> None:
    """bubblewrap dies of a SIGTERM at once and takes the command with it: the stop spares it
    and the command gets the signal, then its grace period."""
    trapping = "trap 'echo got-term; exit 7' TERM; echo started; sleep 30 & wait"
    # a grace far longer than the trap needs: on a loaded CI machine the reaper's relay of the
    # SIGTERM and the trap once took over the default 1 s (the command was SIGKILLed)
    patient = replace(ctx, config={**ctx.config, "killGraceMs": 10_000})
    out = await run(patient, trapping, timeoutMs=300)
    assert (out["timedOut"], out["exitCode"], out["stdout"]) == (True, 7, "started\ngot-term\n")
    plain = await run(ctx, "sleep 30", timeoutMs=300)
    assert (plain["timedOut"], plain["exitCode"], plain["signal"]) == (True, None, "SIGTERM")


async def test_a_process_started_after_the_deadline_gets_its_sigterm_too(
    ctx: FakeContext,
) -> None:
    """As without a sandbox (test_bash_descendants), past bubblewrap, which the stop spares."""
    patient = replace(ctx, config={**ctx.config, "killGraceMs": 5_000})
    out = await run(patient, STARTS_AFTER_THE_DEADLINE, timeoutMs=1_000)
    assert (out["timedOut"], out["exitCode"], out["stdout"]) == (True, 7, "started\ngot-term\n")


async def test_sandbox_off_runs_the_command_as_before(ctx: FakeContext, tmp_path: Path) -> None:
    off = replace(ctx, config={"sandbox": {"mode": "off"}})
    out = await run(off, f"cat {tmp_path / 'outside' / 'secret.txt'}")
    assert out["stdout"] == "top secret\n"


async def test_no_sandbox_at_hand_is_a_coded_refusal(
    ctx: FakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bash._sandbox, "_usable", None)
    monkeypatch.setattr(bash._sandbox, "_refusal", None)
    monkeypatch.setattr(bash._sandbox._landlock, "abi", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    with pytest.raises(ToolFailed) as info:
        await run(ctx, "true")
    assert info.value.code == ErrorCode.E_SANDBOX_UNAVAILABLE
    assert "apt-get install bubblewrap" in str(info.value.suggestion)
    assert "sandbox: off" in str(info.value.suggestion)


async def test_a_bad_mode_is_a_coded_error(ctx: FakeContext) -> None:
    with pytest.raises(ToolFailed) as info:
        await run(replace(ctx, config={"sandbox": "chroot"}), "true")
    assert info.value.code == ErrorCode.E_TOOL_INVALID_ARGS


@pytest.fixture(params=["subreaper", "cgroup"])
def held(
    request: pytest.FixtureRequest, ctx: FakeContext, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeContext]:
    """The sandbox inside both holders of a call's processes (cgroup where the machine has
    one)."""
    parent = None
    if request.param == "cgroup":
        parent = _test_cgroup_parent()
        if parent is None:
            pytest.skip("no writable cgroup v2 directory with cgroup.kill here")
        monkeypatch.setattr(bash._process._contain, "delegated_cgroup", lambda: parent)
    yield replace(ctx, config={"processTracking": request.param})
    if parent is not None:
        assert _remove_cgroups(parent) == [], "a per-call cgroup was left behind"


def _running(marker: str) -> list[int]:
    """Processes of this machine whose command line ends in `marker` (zombies aside)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if line.rstrip(b"\0").endswith(marker.encode()) and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("timeout_ms", [20_000, 300], ids=["ended", "timed-out"])
async def test_nothing_the_sandboxed_command_started_outlives_the_call(
    held: FakeContext, timeout_ms: int
) -> None:
    """Detached into sessions of their own, with its holder's pid unknown in the sandbox:
    gone with the call, whether the command ended or its deadline came."""
    marker = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"
    command = (
        f"setsid sleep {marker} & (setsid -f sleep {marker}); "
        f"nohup sleep {marker} > /dev/null 2>&1 & echo started; sleep 30 & wait"
    )
    if timeout_ms > 1000:
        command = command.removesuffix("sleep 30 & wait")
    out = await run(held, command, timeoutMs=timeout_ms)
    assert out["stdout"] == "started\n", out
    assert _running(marker) == []


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep is not installed")
async def test_ripgrep_runs_in_the_sandbox_or_gives_way_to_the_python_engine(
    ctx: FakeContext, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / "notes.txt").write_text("a needle here\n")
    async with asyncio.timeout(15):
        found = await call(file_system, "search", ctx, {"query": "needle"})
    assert (found["engine"], found["count"]) == ("ripgrep", 1), found
    monkeypatch.setattr(file_system._sandbox, "_usable", None)
    monkeypatch.setattr(file_system._sandbox, "_refusal", "bwrap is not installed")
    async with asyncio.timeout(15):
        fallback = await call(file_system, "search", ctx, {"query": "needle"})
        assert (fallback["engine"], fallback["count"]) == ("python", 1), fallback
        asked = replace(ctx, config={"searchEngine": "ripgrep"})
        with pytest.raises(ToolFailed) as info:
            await call(file_system, "search", asked, {"query": "needle"})
    assert info.value.code == ErrorCode.E_SANDBOX_UNAVAILABLE


needs_landlock = pytest.mark.skipif(
    bash._sandbox._landlock.abi() < 6, reason="Landlock ABI 6 (Linux 6.12) is not here"
)


@needs_landlock
async def test_landlock_hides_what_bubblewrap_hides(
    ctx: FakeContext, workdir: Path, tmp_path: Path
) -> None:
    """The fallback: the hidden state root (which holds the workdir) unreadable but the
    workdir, no memory or signal of a process outside, nothing detached left behind."""
    box = sandboxed(ctx, mode="landlock", hide=[str(tmp_path)])
    marker = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"
    command = (
        f"cat {tmp_path / 'outside' / 'secret.txt'}; echo $?; echo in > here.txt; echo $?; "
        f"touch /usr/x 2>/dev/null; echo $?; cat /proc/{os.getpid()}/environ > /dev/null; "
        f"echo $?; kill -0 $PPID; echo $?; setsid sleep {marker} & echo done"
    )
    out = await run(box, command)
    codes = out["stdout"].split()
    assert codes[0] != "0" and codes[1] == "0" and codes[2] != "0", out
    assert codes[3] != "0" and codes[4] != "0" and codes[5] == "done", out
    assert (workdir / "here.txt").exists()
    assert _running(marker) == []


@pytest.fixture
def under_dev() -> Iterator[Path]:
    """A state root in /dev/shm (a tmpfs an operator may pick for speed), with the workdir and
    a secret beside it, as `workdir` lays them out under tmp_path."""
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    root = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="goondan-test-"))
    try:
        (root / "work").mkdir()
        (root / "outside").mkdir()
        (root / "outside" / "secret.txt").write_text("top secret\n")
        yield root
    finally:
        shutil.rmtree(root)


@needs_landlock
async def test_landlock_hides_a_state_root_under_dev(ctx: FakeContext, under_dev: Path) -> None:
    # hiding a path under /dev grants /dev's other entries one by one, /dev/stderr among them:
    # a link to the launcher's own pipe, which Landlock cannot name (it failed every command)
    box = sandboxed(
        replace(ctx, workdir=under_dev / "work"), mode="landlock", hide=[str(under_dev)]
    )
    out = await run(box, f"echo in > here.txt; echo $?; cat {under_dev / 'outside' / 'secret.txt'}")
    assert out["exitCode"] != 0 and out["stdout"] == "0\n", out
    assert (under_dev / "work" / "here.txt").read_text() == "in\n"


@needs_landlock
async def test_landlock_without_network_has_no_tcp(ctx: FakeContext) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        dial = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""
        online = await run(sandboxed(ctx, mode="landlock"), dial)
        offline = await run(sandboxed(ctx, mode="landlock", network=False), dial)
    assert (online["exitCode"], offline["exitCode"] != 0) == (0, True), (online, offline)


@needs_landlock
async def test_auto_falls_back_to_landlock_without_bubblewrap(
    ctx: FakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bash._sandbox, "_usable", None)
    monkeypatch.setattr(bash._sandbox, "_refusal", "bwrap is not installed")
    out = await run(sandboxed(ctx, hide=[str(tmp_path / "outside")]), "cat ../outside/secret.txt")
    assert out["exitCode"] != 0 and "top secret" not in out["stdout"], out
    pid = await run(ctx, "echo $$")  # no PID namespace of its own: a pid of the machine
    assert int(pid["stdout"]) > 2, pid


_MARK = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char exe[512] = {0}, path[1024];
    const char *dir = getenv("MARK_DIR");
    if (dir == NULL || readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) exe[0] = 0;
    if (dir == NULL) return;
    snprintf(path, sizeof path, "%s/loaded-%d", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f != NULL) { fputs(exe, f); fclose(f); }
}
"""


@pytest.fixture
def preload(tmp_path: Path, workdir: Path) -> Path:
    """A library that leaves a mark (its process's program) wherever it is loaded; in the
    workdir, where the sandboxed command can load it too."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the preloaded library")
    (tmp_path / "mark.c").write_text(_MARK)
    library = workdir / "mark.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(tmp_path / "mark.c")],
                   check=True, timeout=60)  # fmt: skip
    return library


@pytest.mark.parametrize("mode", ["bubblewrap", "landlock"])
async def test_the_model_s_environment_reaches_only_the_sandboxed_command(
    ctx: FakeContext, workdir: Path, preload: Path, mode: str
) -> None:
    """`env` is the model's: a LD_PRELOAD in it ran its library in the call's holder and in
    bubblewrap, outside the sandbox (and before the Landlock trampoline restricted itself)."""
    if mode == "landlock" and bash._sandbox._landlock.abi() < 1:
        pytest.skip("no Landlock here")
    marks = workdir / "marks"
    marks.mkdir()
    env = {"LD_PRELOAD": str(preload), "MARK_DIR": str(marks)}
    box = sandboxed(ctx, mode=mode)
    out = await run(box, "true", env=env)
    assert out["exitCode"] == 0, out
    loaded = [path.read_text() for path in marks.iterdir()]
    assert loaded, "the command itself got its environment"
    assert not [exe for exe in loaded if "bwrap" in exe or "python" in exe], loaded


async def test_a_root_swapped_for_a_symlink_to_a_hidden_path_is_refused(
    ctx: FakeContext, workdir: Path, tmp_path: Path
) -> None:
    """`roots: [".", "data"]`: an earlier command made `data` a symlink to the state root,
    which the next call bound into its sandbox, writable."""
    (workdir / "data").symlink_to(tmp_path / "outside")
    config = {"roots": [".", "data"]}
    box = sandboxed(replace(ctx, config=config), hide=[str(tmp_path / "outside")])
    with pytest.raises(ToolFailed) as info:
        await run(box, f"cat {tmp_path / 'outside' / 'secret.txt'}")
    assert info.value.code == ErrorCode.E_TOOL_PATH_ESCAPE
    with pytest.raises(ToolFailed) as searched:
        async with asyncio.timeout(15):
            await call(file_system, "search", box, {"query": "secret"})
    assert searched.value.code == ErrorCode.E_TOOL_PATH_ESCAPE


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/run"), reason="needs root's /run")
async def test_the_sockets_in_run_are_out_of_reach(ctx: FakeContext) -> None:
    """A unix socket is reachable on a read-only mount: /run's (the system bus, systemd's, a
    container engine's) were, from a sandboxed command."""
    path = f"/run/goondan-test-{uuid.uuid4().hex[:8]}.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen(1)
        try:
            dial = f"python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{path}')\""
            out = await run(ctx, dial)
        finally:
            os.unlink(path)
    assert out["exitCode"] != 0, out
