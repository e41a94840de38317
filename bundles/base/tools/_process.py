"""Run one child command for `bash`: its own session, capped output, a deadline, no leftovers.

The child starts in a new session (so it leads a new process group); on timeout the whole group
gets SIGTERM, then SIGKILL after a grace period. When the command ends on its own, whatever it
left running in its group is killed too: background jobs never outlive the tool call. Output is
collected by a protocol that keeps at most `max_bytes` per stream and discards the rest while
still draining the pipe (a child blocked on a full pipe would never exit).

Why a protocol and not `Process.wait()`: on Python 3.11 `wait()` returns only once every pipe is
closed, so a background grandchild holding stdout would turn `echo hi; sleep 99 &` into a
timeout. `process_exited` fires when the leader exits, which is what the deadline is about.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SENSITIVE_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_MIN_SECRET_LEN = 4  # shorter values would match half the environment by accident
_DRAIN_SECONDS = 2.0  # after the group is gone, how long pipes may take to report EOF
_MINIMAL_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "SHELL", "TZ")


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


def _kill_spawned(spawn: asyncio.Future[tuple[asyncio.SubprocessTransport, Any]]) -> None:
    """Done-callback for a spawn whose caller was cancelled: nothing of it may survive."""
    if spawn.cancelled() or spawn.exception() is not None:
        return
    transport, _ = spawn.result()
    _signal_group(transport.get_pid(), signal.SIGKILL)
    transport.close()


async def _stop_group(pgid: int, output: _CappedOutput, grace_s: float) -> None:
    """SIGTERM the group, give the leader `grace_s` to exit, then SIGKILL the group."""
    _signal_group(pgid, signal.SIGTERM)
    try:
        async with asyncio.timeout(grace_s):
            await asyncio.shield(output.exited)
    except TimeoutError:
        pass  # escalation below is the answer to a child ignoring SIGTERM
    _signal_group(pgid, signal.SIGKILL)
    await output.exited


def _exit_fields(returncode: int | None) -> tuple[int | None, str | None]:
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
) -> RunResult:
    """Run `argv` to completion or deadline; never leaves a process of its group behind."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _CappedOutput(max_bytes),
            *argv,
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
        spawn.add_done_callback(_kill_spawned)
        raise
    pgid = transport.get_pid()
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(output.exited)
        except TimeoutError:
            timed_out = True
            await _stop_group(pgid, output, kill_grace_s)
        _signal_group(pgid, signal.SIGKILL)  # leftovers of a command that ended on its own
        try:
            async with asyncio.timeout(_DRAIN_SECONDS):
                await asyncio.shield(output.pipes_closed)
        except TimeoutError:
            pass  # a process that left the group still holds a pipe: stop reading it
    finally:
        # Also on cancellation (the turn was stopped): the group must not outlive us.
        _signal_group(pgid, signal.SIGKILL)
        transport.close()
    exit_code, sig = _exit_fields(transport.get_returncode())
    return RunResult(
        stdout=output.text(1),
        stderr=output.text(2),
        exit_code=exit_code,
        signal=sig,
        timed_out=timed_out,
        truncated=output.truncated,
        duration_ms=round((time.monotonic() - started) * 1000),
    )
