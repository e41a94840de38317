"""Drive a real `goondan run` daemon from a test: its JSON log lines are the awaitable signals.

The daemon runs as `python -m orchestrator run BUNDLE --log-format json`; a reader task
parses its stderr so a test can `await daemon.wait_for("transition", target="processing")`
instead of sleeping. Control requests go over the real control socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import psutil
import zmq
import zmq.asyncio

from orchestrator.control.locate import read_token
from orchestrator.control.rundir import read_active
from protocol.codec import decode_control_reply, encode
from protocol.control import ControlReply, ControlRequest, SendText, StatusQuery, StatusResult
from protocol.endpoints import StateLayout

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "integration"
SWARM = FIXTURES / "swarm"
PYTHON = sys.executable

LogLine = dict[str, Any]


def with_token(req: ControlRequest, endpoint: str) -> ControlRequest:
    """The request as the CLI sends it: with the daemon's control token."""
    return msgspec.structs.replace(req, token=read_token(endpoint))


async def recv_final(
    sock: zmq.asyncio.Socket, on_notice: Callable[[str], None] | None = None
) -> ControlReply:
    """The next final reply on `sock`; interim notices (why a send waits) go to `on_notice`,
    interim deltas (of a streaming send) are skipped."""
    while True:
        reply = decode_control_reply(await sock.recv())
        if not reply.interim:
            return reply
        if on_notice is not None and reply.notice is not None:
            on_notice(reply.notice)


COVERAGE_VARS = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")
"""What makes a Python started under `make test` measure itself (coverage's `patch =
["subprocess"]`, pyproject.toml): set by the test run, inherited by every process it starts."""


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    # Last in the block: coverage sets its variable again as the process starts (a new
    # string outside the exec'd block), and setproctitle blanks the block (orchestrator/
    # proctitle.py) only up to the first variable that moved; what follows stays readable
    # in /proc/<pid>/environ, which test_attacks_secrets checks for keys.
    for name in COVERAGE_VARS:
        if name in env:
            env[name] = env.pop(name)
    return env


def unmeasured_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """`child_env` for a process whose own costs a test measures (memory budgets): without
    the coverage variables, so neither it nor what it starts carries a tracer."""
    env = child_env(extra)
    for name in COVERAGE_VARS:
        env.pop(name, None)
    return env


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`goondan ARGS` as a real process: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "orchestrator", *args,
        env=child_env(env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await proc.communicate()
    except BaseException:  # the test's timeout: end the call here, not in a later test's collector
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class Daemon:
    def __init__(
        self, proc: asyncio.subprocess.Process, swarm: str, state_root: Path | None = None
    ) -> None:
        self.proc = proc
        self.swarm = swarm
        self.state_root = state_root
        """Its own state root (cluster nodes on one machine); None: GOONDAN_STATE_ROOT."""
        self.lines: list[LogLine] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.ensure_future(self._read())
        self._zctx = zmq.asyncio.Context()
        self.notices: list[str] = []
        """Interim notices the daemon sent while requests waited (why a send waits)."""
        self._notice_seen = asyncio.Event()

    def _noticed(self, text: str) -> None:
        self.notices.append(text)
        self._notice_seen.set()

    async def wait_notices(self, count: int) -> list[str]:
        """Until `count` notices came (a notice follows a send's acceptance, so this awaits
        that sends were accepted and wait)."""
        while len(self.notices) < count:
            self._notice_seen.clear()
            await self._notice_seen.wait()
        return self.notices

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    async def start(
        cls,
        bundle: Path = SWARM,
        *,
        swarm: str = "probe",
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        umask: int = -1,
        entry_check: bool = False,
        state_root: Path | None = None,
        measured: bool = True,
    ) -> Daemon:
        """`umask` is the daemon's (-1: this process's). The fixtures hold entries broken on
        purpose (a tool that fails to import), so `run`'s entry check is off unless asked.
        `measured=False`: without coverage's tracer (`unmeasured_env`), for a daemon that only
        repeats what an earlier one of the test measured."""
        if not entry_check:
            args = ("--no-entry-check", *args)
        if state_root is not None:
            env = {**(env or {}), "GOONDAN_STATE_ROOT": str(state_root)}
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator", "run", str(bundle), "--log-format", "json", *args,
            env=child_env(env) if measured else unmeasured_env(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, umask=umask,
        )  # fmt: skip
        daemon = cls(proc, swarm, state_root)
        started = asyncio.ensure_future(daemon.wait_for("started"))
        exited = asyncio.ensure_future(proc.wait())
        try:
            await asyncio.wait({started, exited}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the test's timeout: no fixture knows this daemon yet
            started.cancel()
            exited.cancel()
            await asyncio.shield(daemon.close())
            raise
        if not started.done() or started.exception() is not None:
            started.cancel()
            await exited
            with contextlib.suppress(TimeoutError):  # the last lines, for the error below
                await asyncio.wait_for(asyncio.shield(daemon._reader), 5)
            await daemon.close()  # its reader and zmq context, which would leak into later tests
            raise RuntimeError(f"daemon exited with {proc.returncode}: {daemon.lines[-8:]}")
        exited.cancel()
        return daemon

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            try:
                line = json.loads(raw)
            except ValueError:
                line = {"event": "_text", "text": raw.decode(errors="replace")}
            async with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        async with self._changed:
            self.lines.append({"event": "_eof"})
            self._changed.notify_all()

    def mark(self) -> int:
        return len(self.lines)

    def find(self, event: str, since: int = 0, **fields: Any) -> list[LogLine]:
        return [
            line
            for line in self.lines[since:]
            if line.get("event") == event and all(line.get(k) == v for k, v in fields.items())
        ]

    async def wait_for(self, event: str, since: int = 0, **fields: Any) -> LogLine:
        async with self._changed:
            while True:
                found = self.find(event, since, **fields)
                if found:
                    return found[0]
                if self.lines and self.lines[-1].get("event") == "_eof":
                    raise AssertionError(f"daemon log ended before {event} {fields}")
                await self._changed.wait()

    async def request(
        self, req: ControlRequest, limit: float = 20.0, token: str | None = None
    ) -> ControlReply:
        """One control request, with the daemon's token unless `token` gives another."""
        layout = StateLayout.from_env(self.state_root)
        info = read_active(layout.run_paths(self.swarm).active_json)
        assert info is not None, "active.json is missing"
        sock = self._zctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(info.endpoints["control"])
            signed = with_token(req, info.endpoints["control"])
            if token is not None:
                signed = msgspec.structs.replace(req, token=token)
            await sock.send(encode(signed))
            async with asyncio.timeout(limit):
                return await recv_final(sock, self._noticed)
        finally:
            sock.close()

    async def send(
        self, text: str, agent: str | None = None, *, wait: bool = True, key: str | None = None
    ) -> ControlReply:
        req = SendText(
            request_id=os.urandom(4).hex(), text=text, agent=agent, instance_key=key, wait=wait,
            timeout_ms=60_000,
        )  # fmt: skip
        # the daemon answers by the send's own timeout; each test bounds its whole run
        return await self.request(req, limit=65.0)

    async def send_in_order(self, texts: list[str], agent: str) -> list[ControlReply]:
        """Several sends over one control connection: they reach the daemon in this order."""
        info = read_active(StateLayout.from_env(self.state_root).run_paths(self.swarm).active_json)
        assert info is not None, "active.json is missing"
        sock = self._zctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(info.endpoints["control"])
            ids = [f"r{i}" for i in range(len(texts))]
            for request_id, text in zip(ids, texts, strict=True):
                req = SendText(request_id=request_id, text=text, agent=agent, timeout_ms=60_000)
                await sock.send(encode(with_token(req, info.endpoints["control"])))
            replies = {}
            while len(replies) < len(texts):
                reply = await recv_final(sock, self._noticed)
                replies[reply.request_id] = reply
            return [replies[i] for i in ids]
        finally:
            sock.close()

    async def status(self) -> StatusResult:
        reply = await self.request(StatusQuery(request_id="s"))
        assert reply.ok, reply.error
        return msgspec.convert(reply.result, StatusResult)

    async def process(self, name: str) -> Any:
        status = await self.status()
        return next(p for p in status.processes if p.name == name)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    async def wait(self) -> int:
        code = await self.proc.wait()
        await self._reader
        return code

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    async def close(self) -> None:
        """Leave nothing behind, whatever the test did."""
        leftovers = self.descendants()
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()
        for proc in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        self._zctx.term()


PORTS = range(20_000, 32_768)
"""Below the kernel's ephemeral range (32768-60999 by default). A port from bind(0) is one the
kernel may also give the next outgoing connection of any process, which then holds it when
the daemon binds: under CI's three parallel runs a connector's start failed with `address in
use` that way (and a Connection that cannot start stops the daemon)."""


def free_port() -> int:
    """A port free now, outside the ephemeral range; a test's daemon binds it soon after."""
    pick = random.SystemRandom()
    for _ in range(200):
        port = pick.choice(PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")
