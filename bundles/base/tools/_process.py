"""Run one child command for `bash`: capped output, a deadline, and no process left behind.

Every process the command starts, also one that detaches into a session of its own, is held by
`_contain` (a per-call cgroup, or a subreaper between the agent and the command) and killed when
the call ends: on timeout they all get SIGTERM, then SIGKILL after a grace period; when the
command ends on its own, whatever it left running is killed at once; a cancelled call kills them
too. Output is collected by a protocol that keeps at most `max_bytes` per stream and discards
the rest while still draining the pipe (a child blocked on a full pipe would never exit).

Why a protocol and not `Process.wait()`: on Python 3.11 `wait()` returns only once every pipe is
closed, so a background grandchild holding stdout would turn `echo hi; sleep 99 &` into a
timeout. `process_exited` fires when the leader exits, which is what the deadline is about.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import subprocess
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundles.sdk import ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _contain
else:
    _contain = load_sibling(__file__, "_contain")

_SENSITIVE_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_MIN_SECRET_LEN = 4  # shorter values would match half the environment by accident
_DRAIN_SECONDS = 2.0  # after the processes are gone, how long pipes may take to report EOF
_SWEEP_SECONDS = 5.0  # how long killing and reaping the call's processes may take
_RESCAN_SECONDS = 0.05  # how often a grace period looks for processes started since its SIGTERM
_MINIMAL_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "SHELL", "TZ")


def refuse_nul(argv: Collection[str], env: Mapping[str, str] | None = None) -> None:
    """A NUL byte cannot be in a command line or an environment (the kernel reads them as C
    strings): say which argument holds one, as a coded error the model can act on."""
    fix = "remove the NUL byte (\\x00)"
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            raise ToolFailed(f"argument {i} ({arg[:40]!r}) contains a NUL byte",
                             code=ErrorCode.E_TOOL_INVALID_ARGS, suggestion=fix)  # fmt: skip
    for name, value in (env or {}).items():
        if "\x00" in name or "\x00" in value:
            raise ToolFailed(f"environment variable {name[:40]!r} contains a NUL byte",
                             code=ErrorCode.E_TOOL_INVALID_ARGS, suggestion=fix)  # fmt: skip


def scrub_env(
    source: Mapping[str, str],
    *,
    secrets: Collection[str],
    allow: Collection[str] = (),
    inherit: bool = True,
) -> dict[str, str]:
    """The environment a child may see: no variable named like a credential and no variable
    whose value holds a resolved secret, unless its name is in `allow`."""
    real_secrets = [s for s in secrets if len(s) >= _MIN_SECRET_LEN]
    env: dict[str, str] = {}
    for name, value in source.items():
        if name in allow:
            env[name] = value
            continue
        if not inherit and name not in _MINIMAL_ENV:
            continue
        if _SENSITIVE_NAME.search(name) or any(s in value for s in real_secrets):
            continue
        env[name] = value
    return env


def redact(text: str, secrets: Collection[str]) -> str:
    """Mask resolved secret values that a command printed anyway (read from a file, say)."""
    for secret in secrets:
        if len(secret) >= _MIN_SECRET_LEN:
            text = text.replace(secret, "***")
    return text


@dataclass(frozen=True, slots=True)
class RunResult:
    stdout: str
    stderr: str
    exit_code: int | None
    signal: str | None
    timed_out: bool
    truncated: bool
    duration_ms: int


class _CappedOutput(asyncio.SubprocessProtocol):
    """Collects stdout (fd 1) and stderr (fd 2) up to a cap and reports exit and EOF."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.buffers: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self.truncated = False
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes_closed: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        buffer = self.buffers[fd]
        room = self.max_bytes - len(buffer)
        if len(data) > room:
            self.truncated = True
        if room > 0:
            buffer.extend(data[:room])

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.pipes_closed.done():
            self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def text(self, fd: int) -> str:
        return self.buffers[fd].decode("utf-8", errors="replace")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, sig)


async def _exits_within(output: _CappedOutput, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await asyncio.shield(output.exited)
    except TimeoutError:
        return False
    return True


def _kill_spawned(
    held: _contain.CallProcesses,
    spawn: asyncio.Future[tuple[asyncio.SubprocessTransport, Any]],
) -> None:
    """Done-callback for a spawn whose caller was cancelled: nothing of it may survive."""
    if spawn.cancelled() or spawn.exception() is not None:
        return
    transport, output = spawn.result()
    held.kill_now(transport.get_pid())
    # Closing a running transport would SIGKILL the leader before it swept: close on its exit.
    output.exited.add_done_callback(lambda _: transport.close())


async def _abandon(
    held: _contain.CallProcesses,
    spawn: asyncio.Future[tuple[asyncio.SubprocessTransport, Any]],
) -> None:
    """Cancelled while asyncio was still wiring the pipes: the command may be running already
    (a loaded machine), so the cancellation goes on only once it and everything it started
    are gone, as after any other cancellation. `_kill_spawned` kills them as the spawn ends;
    this waits for that, bounded (cancelled again, it leaves the rest to that callback)."""
    # an exception: no process (the spawn failed), or one we could not kill; finish sweeps
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_SWEEP_SECONDS):
            _, output = await asyncio.shield(spawn)
            await asyncio.shield(output.exited)
    await held.finish(_SWEEP_SECONDS)


async def _stop(
    held: _contain.CallProcesses, pid: int, output: _CappedOutput, grace_s: float
) -> None:
    """SIGTERM the call's processes, give the leader `grace_s` to exit, then SIGKILL them.
    A process started during the grace period (the command itself, when a sandbox took longer
    to set up than the deadline) gets its SIGTERM too, instead of only the kill at the end."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s + held.margin_s
    held.terminate(pid)
    while (left := deadline - loop.time()) > 0:
        if await _exits_within(output, min(left, _RESCAN_SECONDS)):
            return
        held.terminate(pid)
    held.kill_now(pid)
    if not await _exits_within(output, _SWEEP_SECONDS):
        _signal_group(pid, signal.SIGKILL)  # the holder itself is stuck: the leader goes anyway
        await output.exited


async def _release(held: _contain.CallProcesses, pid: int, output: _CappedOutput) -> None:
    """On the way out (also when cancelled): the leader and everything it held are gone."""
    if not output.exited.done():
        held.kill_now(pid)
        if not await _exits_within(output, _SWEEP_SECONDS):
            _signal_group(pid, signal.SIGKILL)
    await held.finish(_SWEEP_SECONDS)


_STOPS = {128 + signal.SIGTERM, 128 + signal.SIGKILL}


def _exit_fields(
    returncode: int | None, *, stopped_in_sandbox: bool = False
) -> tuple[int | None, str | None]:
    if stopped_in_sandbox and returncode in _STOPS:
        # bubblewrap reports its command's death by signal N as exit 128+N: when our own
        # deadline sent the signal, say so as an unsandboxed call would
        returncode = 128 - returncode
    if returncode is None or returncode >= 0:
        return returncode, None
    try:
        return None, signal.Signals(-returncode).name
    except ValueError:
        return None, f"SIG{-returncode}"


async def run_capped(
    argv: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    max_bytes: int,
    kill_grace_s: float = 1.0,
    tracking: str = "auto",
    sandboxed: bool = False,
) -> RunResult:
    """Run `argv` to completion or deadline; no process it started outlives this call.

    `tracking` is the Tool's `processTracking` setting (`_contain.open_call`); `sandboxed`:
    `argv` is a bubblewrap command line (`_sandbox.wrap`)."""
    refuse_nul(argv, env)
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    held = _contain.open_call(tracking, kill_grace_s, spare_leader=sandboxed)
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _CappedOutput(max_bytes),
            *held.argv(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    )
    try:
        # Shielded: a cancellation while asyncio is still wiring the pipes would otherwise
        # kill only the leader and then wait for pipes that a grandchild keeps open.
        transport, output = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        spawn.add_done_callback(functools.partial(_kill_spawned, held))
        await _abandon(held, spawn)
        raise
    except BaseException:
        await held.finish(_SWEEP_SECONDS)
        raise
    pid = transport.get_pid()
    timed_out = False
    try:
        if not await _exits_within(output, timeout_s):
            timed_out = True
            await _stop(held, pid, output, kill_grace_s)
        await held.finish(_SWEEP_SECONDS)  # leftovers of a command that ended on its own
        try:
            async with asyncio.timeout(_DRAIN_SECONDS):
                await asyncio.shield(output.pipes_closed)
        except TimeoutError:
            pass  # a process we could not kill still holds a pipe: stop reading it
    finally:
        # Also on cancellation (the turn was stopped): nothing of the call may outlive us.
        await _release(held, pid, output)
        if not output.exited.done():
            # SIGKILLed but not yet reaped (a loaded machine): closing now would leave a
            # transport of a "running" process to the collector (a ResourceWarning in CI)
            await _exits_within(output, _SWEEP_SECONDS)
        transport.close()
    exit_code, sig = _exit_fields(
        transport.get_returncode(), stopped_in_sandbox=sandboxed and timed_out
    )
    return RunResult(
        stdout=output.text(1),
        stderr=output.text(2),
        exit_code=exit_code,
        signal=sig,
        timed_out=timed_out,
        truncated=output.truncated,
        duration_ms=round((time.monotonic() - started) * 1000),
    )
