"""A supervised child's link to the orchestrator, shared by agents and the connector host.

    connect: DEALER whose routing identity is the process id; SIGTERM starts a drain
    handshake: hello -> load() -> ready | start_error (logged `start_error`)
    serve: body runs while frames are decoded and dispatched (a bad one is logged
      `frame_dropped` and skipped) and, while the link is active, heartbeats go out;
      orchestrator silent for `heartbeat_timeout` then -> `orchestrator_lost`, exit 4
      (EXIT_ORPHANED). A probe from the orchestrator (a heartbeat that is not an answer) is
      answered whether active or not.
    shutdown frame -> `shutdown` logged, drain; the body ends with `shutdown_ack`

An agent is active only while it runs a turn that does not wait for a client: an idle agent
sends nothing and wakes for nothing, so a thousand idle agents cost no CPU (the orchestrator
probes idle children itself, rarely). A connector host is always active. A child also dies
with its parent (`die_with_parent`: PR_SET_PDEATHSIG), so no orphan outlives even a SIGKILL of
the daemon, busy or idle. What frames mean beyond this is the caller's `dispatch`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import functools
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NoReturn, Protocol, TypeVar

import msgspec
import structlog

from agent_process.dealer import Dealer
from protocol.codec import decode_message, encode
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.ids import ORCHESTRATOR, routing_id
from protocol.launch import ChildLaunch, LaunchSettings
from protocol.messages import (
    FEATURE_HISTORY,
    Event,
    Heartbeat,
    HeartbeatPayload,
    Hello,
    HelloPayload,
    Message,
    Ready,
    ReadyPayload,
    ShutdownAck,
    ShutdownAckPayload,
    ShutdownPayload,
    ShutdownReason,
    StartError,
    StartErrorPayload,
)

EXIT_START_ERROR = 3
EXIT_ORPHANED = 4
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
M_ARENA_MAX = -8
LINGER_S = 2.0
"""How long closing the connection may wait to flush the last frames (e.g. the shutdown_ack)."""

T = TypeVar("T")
Dispatch = Callable[[Message], None]
OnBeat = Callable[[], Awaitable[None]]
log = structlog.get_logger("goondan.link")


class FrameSocket(Protocol):
    """Single frames to and from the orchestrator: the `Dealer`, or a stand-in."""

    async def send(self, data: bytes) -> None: ...
    def send_nowait(self, data: bytes) -> bool: ...
    async def recv(self) -> bytes: ...


def too_large(msg: Message, size: int, limit: int) -> Message | None:
    """What to send instead of a frame over the daemon's limit (None: nothing)."""
    log.error("frame_too_large", type=type(msg).__name__, bytes=size, limit=limit)
    if not isinstance(msg, Event) or msg.payload.in_reply_to is None:
        return None
    error = ErrorInfo(
        code=ErrorCode.E_FRAME_TOO_LARGE,
        message=f"the reply is {size} bytes, over the {limit}-byte frame limit",
        suggestion="answer with less text, or raise Swarm.spec.policy.maxFrameBytes",
    )
    reply = msgspec.structs.replace(msg.payload, input="", error=error)
    return msgspec.structs.replace(msg, payload=reply)


class Link:
    """The child's end: send and receive frames, handshake, heartbeats, the drain signal."""

    def __init__(self, launch: ChildLaunch, sock: FrameSocket, *, active: bool = True) -> None:
        self.launch = launch
        self.sock = sock
        self.me = str(launch.process)
        self.draining = asyncio.Event()
        """Set by a `shutdown` frame or SIGTERM (`drain`): stop taking work, finish, ack."""
        self.on_drain: Callable[[], None] = lambda: None
        """Called once the drain is asked, e.g. to wake a loop parked on its own queue."""
        self.last_heard = time.monotonic()
        self._active = active
        """Heartbeats go out (see the module docstring)."""
        self._say_quiet = False
        """One quiet beat is owed: the turn went on to wait for its client."""
        self._wake = asyncio.Event()
        """Set while the heartbeat loop has something to send (active, or a quiet beat owed)."""
        if active:
            self._wake.set()
        self._backlog: collections.deque[bytes] = collections.deque()
        """Frames `post` could not queue at once; `send` sends them first (order kept)."""

    def set_active(self, active: bool, *, mid_turn: bool = False) -> None:
        """Beat (a turn runs) or go silent: idle, or, with `mid_turn`, a turn that waits for
        its client, which one last beat tells the orchestrator (`quiet`): silent mid-turn
        would otherwise look wedged."""
        self._active = active
        self._say_quiet = not active and mid_turn
        if active or self._say_quiet:
            self._wake.set()  # wakes the loop even if it was already waiting: the beat is owed
        else:
            self._wake.clear()

    def post(self, msg: Message) -> None:
        """Send without awaiting, in order with `send`: queued in the socket now when the
        high-water mark allows, else held for the next `send` (a turn always ends with one)."""
        data = encode(msg)
        nowait = getattr(self.sock, "send_nowait", None)
        if self._backlog or nowait is None or not nowait(data):
            self._backlog.append(data)

    async def send(self, msg: Message) -> None:
        while self._backlog:
            await self.sock.send(self._backlog.popleft())
        data = encode(msg)
        limit = self.launch.settings.max_frame_bytes
        if len(data) > limit:
            # the daemon would close the connection on it: a reply becomes a coded error
            # instead, anything else is dropped with a log line naming it
            instead = too_large(msg, len(data), limit)
            if instead is None:
                return
            data = encode(instead)
        await self.sock.send(data)

    def send_nowait(self, msg: Message) -> bool:
        """Send now or not at all (False): for what may be dropped (`delta` frames), so the
        sender never waits on a full socket."""
        data = encode(msg)
        if len(data) > self.launch.settings.max_frame_bytes:
            too_large(msg, len(data), self.launch.settings.max_frame_bytes)
            return False
        return self.sock.send_nowait(data)

    async def handshake(
        self, load: Callable[[], Awaitable[list[str]]], failure: Callable[[Exception], ErrorInfo]
    ) -> bool:
        """hello, then `load()` (the tool names) -> ready; if it raises -> start_error with
        `failure(exc)`, False (the caller exits EXIT_START_ERROR)."""
        pid = self.launch.process
        hello = HelloPayload(
            pid=os.getpid(),
            kind=str(pid.kind),
            name=pid.name,
            instance_key=pid.instance_key,
            generation=pid.generation,
            features=[FEATURE_HISTORY] if self.launch.settings.history_frames else [],
        )
        await self.send(Hello(from_=self.me, to=ORCHESTRATOR, payload=hello))
        try:
            tools = await load()
        except Exception as exc:
            info = failure(exc)
            log.error("start_error", code=info.code, message=info.message)
            payload = StartErrorPayload(error=info)
            await self.send(StartError(from_=self.me, to=ORCHESTRATOR, payload=payload))
            return False
        ready = ReadyPayload(pid=os.getpid(), tools=tools)
        await self.send(Ready(from_=self.me, to=ORCHESTRATOR, payload=ready))
        return True

    async def serve(
        self, body: Awaitable[T], dispatch: Dispatch, on_beat: OnBeat | None = None
    ) -> T:
        """Await `body` in this task while frames go to `dispatch` and heartbeats go out
        (`on_beat` runs after each); a failing loop cancels the body (TaskGroup)."""
        async with asyncio.TaskGroup() as tg:
            recv = tg.create_task(self._recv_loop(dispatch))
            beat = tg.create_task(self._heartbeat_loop(on_beat))
            try:
                return await body
            finally:
                recv.cancel()
                beat.cancel()

    def on_shutdown(self, payload: ShutdownPayload) -> None:
        """The `shutdown` frame: the caller's dispatch hands it here. A deactivation (reason
        `idle`) is not logged here: the daemon's log says it, and an instance that logs
        nothing else keeps no log file (a million hibernated instances, a million files)."""
        if payload.reason is not ShutdownReason.IDLE:
            log.info("shutdown", reason=payload.reason, grace_ms=payload.grace_period_ms)
        self.drain()

    def drain(self) -> None:
        """Ask for the drain (SIGTERM or a `shutdown` frame)."""
        if not self.draining.is_set():
            self.draining.set()
            self.on_drain()

    async def shutdown_ack(self, undelivered: list[str]) -> None:
        """Drained: the events taken but never started go back to the orchestrator."""
        ack = ShutdownAckPayload(undelivered_events=undelivered)
        await self.send(ShutdownAck(from_=self.me, to=ORCHESTRATOR, payload=ack))

    async def _recv_loop(self, dispatch: Dispatch) -> None:
        # the hot path of every frame: locals only, no await but the receive
        recv = self.sock.recv
        monotonic = time.monotonic
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await recv()
            except ConnectionError as exc:
                lost(str(exc))
            self.last_heard = monotonic()
            try:
                msg = decode_message(data)
            except ProtocolError as exc:
                log.warning("frame_dropped", sender=ORCHESTRATOR, reason=exc.message)
                continue
            if isinstance(msg, Heartbeat) and not msg.payload.answer:
                # the daemon probes with the events it hands over: the turn they start goes
                # first (up to its model request), the answer after it, still proving the
                # loop turns, no longer on the turn's path
                loop.call_soon(self._answer, msg.payload)
            dispatch(msg)

    def _answer(self, probe: HeartbeatPayload) -> None:
        answer = HeartbeatPayload(seq=probe.seq, sent_at=time.time(), answer=True)
        self.post(Heartbeat(from_=self.me, to=ORCHESTRATOR, payload=answer))

    async def _heartbeat_loop(self, on_beat: OnBeat | None) -> None:
        seq = 0
        wake = self._wake
        while True:
            if not wake.is_set():
                await wake.wait()
                # silence while idle says nothing about the orchestrator: the deadline starts
                # now (the frame that woke us, if any, already moved it)
                self.last_heard = max(self.last_heard, time.monotonic())
            await asyncio.sleep(self.launch.settings.heartbeat_interval)
            if not wake.is_set():
                continue  # gone idle while asleep: the idle status frame said it already
            quiet = not self._active
            if quiet:  # the owed quiet beat, sent once
                self._say_quiet = False
                wake.clear()
            seq += 1
            beat = HeartbeatPayload(seq=seq, sent_at=time.time(), quiet=quiet)
            await self.send(Heartbeat(from_=self.me, to=ORCHESTRATOR, payload=beat))
            if quiet:
                continue
            if on_beat is not None:
                await on_beat()
            timeout = self.launch.settings.heartbeat_timeout
            if time.monotonic() - self.last_heard > timeout:
                lost(f"silent for {timeout} s")


def lost(why: str) -> NoReturn:
    """The orchestrator is gone (silent past the heartbeat timeout, or its connection closed):
    nobody would take this process's frames, so it ends, EXIT_ORPHANED."""
    log.error("orchestrator_lost", reason=why)
    sys.stdout.flush()
    os._exit(EXIT_ORPHANED)


@contextlib.asynccontextmanager
async def connect(launch: ChildLaunch) -> AsyncIterator[Link]:
    """The link over a fresh connection to the daemon's agents socket, closed (lingering for
    the last frames) on exit. SIGTERM is routed to `link.drain`. A daemon that cannot be reached
    (no socket, or no handshake within the heartbeat timeout) is a lost orchestrator: logged,
    and the process exits EXIT_ORPHANED."""
    loop = asyncio.get_running_loop()
    settings = launch.settings
    identity = routing_id(launch.process, launch.nonce)
    try:
        async with asyncio.timeout(settings.heartbeat_timeout):
            dealer = await Dealer.connect(settings.endpoint, identity, inbound_limit(settings))
    except (OSError, TimeoutError) as exc:  # ConnectionError is an OSError
        log.error("orchestrator_unreachable", endpoint=settings.endpoint,
                  error=str(exc) or type(exc).__name__)  # fmt: skip
        sys.stdout.flush()
        os._exit(EXIT_ORPHANED)
    link = Link(launch, dealer)
    loop.add_signal_handler(signal.SIGTERM, link.drain)
    try:
        yield link
    finally:
        await dealer.aclose(LINGER_S)


def inbound_limit(settings: LaunchSettings) -> int:
    """The largest frame a child takes from the daemon: a frame the daemon accepted at
    `max_frame_bytes` comes on re-addressed (another envelope around the same payload), so the
    bound has room for that; it is there against a runaway length, not to judge the daemon."""
    return 2 * settings.max_frame_bytes + (64 << 10)


@functools.cache
def libc() -> ctypes.CDLL:
    """Built once, with the functions a child calls already looked up: in the fork server
    (forkprep.preload) this leaves a forked child nothing to create (a CDLL attribute lookup
    builds a function pointer object and caches it on the CDLL)."""
    lib = ctypes.CDLL(None, use_errno=True)
    _ = (lib.prctl, lib.mallopt)  # cached on `lib` by CDLL.__getattr__
    return lib


def refuse_dumps() -> None:
    """PR_SET_DUMPABLE 0: this process holds API keys, and a process of the same uid could
    read them from /proc/<pid>/mem (or environ, or with ptrace); now only root can. A cold
    child sets it here, a forked one has it from the fork server already."""
    if sys.platform.startswith("linux"):
        libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def die_with_parent(parent_pid: int | None) -> None:
    """PR_SET_PDEATHSIG: the kernel SIGKILLs us when our parent (daemon or fork server) dies."""
    if sys.platform.startswith("linux"):
        libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # one malloc arena: a second one for a thread the process starts costs private pages
        libc().mallopt(M_ARENA_MAX, 1)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(EXIT_ORPHANED)  # the parent died before PDEATHSIG was armed
