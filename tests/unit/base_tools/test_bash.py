"""bash__exec / bash__script: results, workspace confinement, deadlines, caps, secrets."""

from __future__ import annotations

import asyncio
import os
import select
from dataclasses import replace
from pathlib import Path

import pytest

from bundles.sdk import JsonObject, ToolFailed

from .conftest import FakeContext, call, load_tool, real

bash = load_tool("tools/bash.py")


@pytest.fixture
def ctx(workdir: Path) -> FakeContext:
    """Unsandboxed: these tests follow the call's processes by their pids, which a sandbox's
    PID namespace renumbers (tests/unit/base_tools/test_sandbox.py covers the sandbox)."""
    return FakeContext(workdir=workdir, config={"sandbox": "off"})


def _gone(pid: int, timeout: float = 5.0) -> bool:
    """True once `pid` has exited (a zombie counts): waits on a pidfd, never sleeps."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


async def test_exec_returns_output_and_exit_code(ctx: FakeContext) -> None:
    async with asyncio.timeout(10):
        out = await call(bash, "exec", ctx, {"command": "echo hi; echo err >&2; exit 3"})
    assert out["stdout"] == "hi\n"
    assert out["stderr"] == "err\n"
    assert out["exitCode"] == 3
    assert out["signal"] is None
    assert out["timedOut"] is False
    assert out["truncated"] is False
    assert out["cwd"] == "."
    assert out["command"] == "echo hi; echo err >&2; exit 3"
    assert out["durationMs"] >= 0


async def test_exec_runs_in_the_workspace_and_in_cwd(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "sub").mkdir()
    async with asyncio.timeout(10):
        root = await call(bash, "exec", ctx, {"command": "pwd"})
        sub = await call(bash, "exec", ctx, {"command": "pwd", "cwd": "sub"})
    assert root["stdout"].strip() == real(workdir)
    assert sub["stdout"].strip() == real(workdir / "sub")
    assert sub["cwd"] == "sub"


@pytest.mark.parametrize("cwd", ["..", "../outside", "/tmp", "sub/../../outside", "link"])
async def test_exec_refuses_a_cwd_outside_the_workspace(
    ctx: FakeContext, workdir: Path, cwd: str
) -> None:
    (workdir / "sub").mkdir()
    (workdir / "link").symlink_to(workdir.parent / "outside")
    with pytest.raises(ToolFailed) as info:
        async with asyncio.timeout(10):
            await call(bash, "exec", ctx, {"command": "ls", "cwd": cwd})
    assert info.value.code == "E_TOOL_PATH_ESCAPE"


async def test_a_command_that_outlives_its_timeout_dies_with_its_children(
    ctx: FakeContext, workdir: Path
) -> None:
    command = "sleep 60 & echo $! > child.pid; echo $$ > leader.pid; echo started; sleep 60"
    async with asyncio.timeout(15):
        out = await call(bash, "exec", ctx, {"command": command, "timeoutMs": 300})
    assert out["timedOut"] is True
    assert out["exitCode"] is None
    assert out["signal"] in {"SIGTERM", "SIGKILL"}
    assert out["stdout"] == "started\n"  # output gathered before the deadline is kept
    for name in ("child.pid", "leader.pid"):
        assert _gone(int((workdir / name).read_text())), f"{name} survived the timeout"


async def test_a_child_ignoring_sigterm_is_killed(ctx: FakeContext, workdir: Path) -> None:
    ctx = replace(ctx, config={**ctx.config, "killGraceMs": 200})
    command = "trap '' TERM; (trap '' TERM; sleep 60) & echo $! > child.pid; sleep 60"
    async with asyncio.timeout(15):
        out = await call(bash, "exec", ctx, {"command": command, "timeoutMs": 300})
    assert out["timedOut"] is True
    assert out["signal"] == "SIGKILL"
    assert _gone(int((workdir / "child.pid").read_text()))


async def test_background_jobs_do_not_outlive_the_call(ctx: FakeContext, workdir: Path) -> None:
    # The background sleep keeps stdout open; the call must still return when the shell exits.
    command = "sleep 60 & echo $! > bg.pid; echo done"
    async with asyncio.timeout(15):
        out = await call(bash, "exec", ctx, {"command": command, "timeoutMs": 20_000})
    assert out["timedOut"] is False
    assert out["exitCode"] == 0
    assert out["stdout"] == "done\n"
    assert _gone(int((workdir / "bg.pid").read_text()))


async def test_output_over_the_cap_is_truncated(ctx: FakeContext) -> None:
    ctx = replace(ctx, config={"maxOutputBytes": 1000})
    command = "head -c 300000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero | tr '\\0' b >&2"
    async with asyncio.timeout(15):
        out = await call(bash, "exec", ctx, {"command": command})
    assert out["truncated"] is True
    assert out["stdout"] == "a" * 1000
    assert out["stderr"] == "b" * 1000
    assert out["exitCode"] == 0


async def test_output_under_the_cap_is_not_truncated(ctx: FakeContext) -> None:
    async with asyncio.timeout(15):
        out = await call(bash, "exec", ctx, {"command": "head -c 100000 /dev/zero | tr '\\0' a"})
    assert out["truncated"] is False
    assert len(out["stdout"]) == 100_000


async def test_secret_env_vars_are_not_visible(
    ctx: FakeContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-visible-nowhere")
    monkeypatch.setenv("GH_TOKEN", "ghp_nowhere")
    monkeypatch.setenv("DB_PASSWORD", "hunter22")
    monkeypatch.setenv("INNOCENT_NAME", "resolved-secret-value")
    monkeypatch.setenv("PLAIN_SETTING", "kept")
    ctx = replace(ctx, secret_values=frozenset({"resolved-secret-value"}))
    async with asyncio.timeout(10):
        out = await call(bash, "exec", ctx, {"command": "env"})
    seen = out["stdout"]
    for hidden in ("OPENAI_API_KEY", "GH_TOKEN", "DB_PASSWORD", "INNOCENT_NAME"):
        assert f"{hidden}=" not in seen
    assert "resolved-secret-value" not in seen
    assert "PLAIN_SETTING=kept" in seen


async def test_allow_env_passes_a_named_variable(
    ctx: FakeContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_API_KEY", "allowed-on-purpose")
    ctx = replace(ctx, config={"allowEnv": ["MY_API_KEY"]})
    async with asyncio.timeout(10):
        out = await call(bash, "exec", ctx, {"command": 'echo "$MY_API_KEY"'})
    assert out["stdout"] == "allowed-on-purpose\n"


async def test_secret_values_printed_by_a_command_are_masked(
    ctx: FakeContext, workdir: Path
) -> None:
    (workdir / "leak.txt").write_text("token=s3cr3t-value\n")
    ctx = replace(ctx, secret_values=frozenset({"s3cr3t-value"}))
    async with asyncio.timeout(10):
        out = await call(bash, "exec", ctx, {"command": "cat leak.txt"})
    assert out["stdout"] == "token=***\n"


async def test_exec_env_argument_reaches_the_child(ctx: FakeContext) -> None:
    async with asyncio.timeout(10):
        out = await call(
            bash, "exec", ctx, {"command": 'echo "$GREETING"', "env": {"GREETING": "hey"}}
        )
    assert out["stdout"] == "hey\n"


async def test_exec_rejects_a_bad_env_name(ctx: FakeContext) -> None:
    with pytest.raises(ToolFailed) as info:
        async with asyncio.timeout(10):
            await call(bash, "exec", ctx, {"command": "true", "env": {"BAD=NAME": "x"}})
    assert info.value.code == "E_TOOL_INVALID_ARGS"


async def test_script_runs_a_workspace_file_with_args(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "greet.sh").write_text('echo "hello $1 from $(basename "$0")"\n')
    async with asyncio.timeout(10):
        out = await call(bash, "script", ctx, {"path": "greet.sh", "args": ["bob"]})
    assert out["stdout"] == "hello bob from greet.sh\n"
    assert out["path"] == "greet.sh"
    assert out["exitCode"] == 0


async def test_script_with_another_interpreter(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "s.sh").write_text("echo sh-ok\n")
    async with asyncio.timeout(10):
        out = await call(bash, "script", ctx, {"path": "s.sh", "shell": "sh"})
    assert out["stdout"] == "sh-ok\n"


@pytest.mark.parametrize("path", ["../outside/secret.txt", "/etc/hostname", "link/secret.txt"])
async def test_script_refuses_paths_outside_the_workspace(
    ctx: FakeContext, workdir: Path, path: str
) -> None:
    (workdir / "link").symlink_to(workdir.parent / "outside")
    with pytest.raises(ToolFailed) as info:
        async with asyncio.timeout(10):
            await call(bash, "script", ctx, {"path": path})
    assert info.value.code == "E_TOOL_PATH_ESCAPE"


async def test_script_missing_file_and_interpreter(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "s.sh").write_text("true\n")
    with pytest.raises(ToolFailed) as missing:
        async with asyncio.timeout(10):
            await call(bash, "script", ctx, {"path": "nope.sh"})
    assert missing.value.code == "E_TOOL_PATH_NOT_FOUND"
    with pytest.raises(ToolFailed) as no_shell:
        async with asyncio.timeout(10):
            await call(bash, "script", ctx, {"path": "s.sh", "shell": "no-such-shell-x"})
    assert no_shell.value.code == "E_TOOL_INVALID_ARGS"


async def test_cancelling_the_call_kills_the_group(ctx: FakeContext, workdir: Path) -> None:
    fifo = workdir / "ready"
    os.mkfifo(fifo)
    command = "sleep 60 & echo $! > child.pid; echo go > ready; sleep 60"
    task = asyncio.create_task(call(bash, "exec", ctx, {"command": command}))
    async with asyncio.timeout(10):
        # Opening the FIFO for reading blocks until the shell writes: a handshake, not a sleep.
        line = await asyncio.to_thread(fifo.read_text)
    assert line == "go\n"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await task
    # In a thread: if the cancel landed while asyncio was still wiring the pipes, the group is
    # killed by a callback on this loop, which must keep running meanwhile.
    async with asyncio.timeout(10):
        assert await asyncio.to_thread(_gone, int((workdir / "child.pid").read_text()))


@pytest.mark.parametrize(
    "args",
    [{"command": "\x00"}, {"command": "echo a\x00b"}, {"command": "env", "env": {"X": "a\x00"}}],
    ids=["nul", "nul-inside", "nul-in-env"],
)
async def test_a_nul_byte_is_a_coded_invalid_argument(ctx: FakeContext, args: JsonObject) -> None:
    """Found by `make fuzz`: it escaped as an uncoded ValueError (embedded null byte)."""
    with pytest.raises(ToolFailed) as info:
        async with asyncio.timeout(10):
            await call(bash, "exec", ctx, args)
    assert info.value.code == "E_TOOL_INVALID_ARGS" and "NUL" in info.value.message
