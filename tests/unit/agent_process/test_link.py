"""The child's link to the orchestrator (`agent_process.link`), against a real ROUTER over ipc.

The test plays the orchestrator: it binds the agents ROUTER, and reads and writes the frames
a child's link exchanges with it. The orchestrator-loss and parent-death exits end their
process, so they run in a subprocess.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from agent_process.link import EXIT_ORPHANED, Link, connect
from protocol.codec import decode_message, encode
from protocol.errors import ErrorCode, ErrorInfo
from protocol.events import Source, SourceKind, new_event
from protocol.ids import ORCHESTRATOR, parse_process_id
from protocol.launch import ChildLaunch, LaunchSettings
from protocol.messages import (
    Event,
    Heartbeat,
    HeartbeatPayload,
    Hello,
    Message,
    Ready,
    Shutdown,
    ShutdownAck,
    ShutdownPayload,
    ShutdownReason,
    StartError,
)

TIMEOUT = 10
PROCESS_ID = "agent:a:k:3"
REPO = Path(__file__).resolve().parents[3]


def _options(endpoint: str, state_root: Path, **overrides: float) -> ChildLaunch:
    settings = LaunchSettings(
        endpoint=endpoint,
        swarm="s",
        bundle=str(state_root / "goondan.yaml"),
        state_root=str(state_root),
        heartbeat_interval=overrides.get("interval", 60.0),
        heartbeat_timeout=overrides.get("timeout", 600.0),
    )
    return ChildLaunch(process=parse_process_id(PROCESS_ID), settings=settings)


def _opts_for(router: zmq.asyncio.Socket, tmp_path: Path, **overrides: float) -> ChildLaunch:
    endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
    return _options(endpoint, tmp_path, **overrides)


async def _recv(router: zmq.asyncio.Socket) -> Message:
    identity, frame = await router.recv_multipart()
    assert identity == PROCESS_ID.encode()  # the routing identity is the process id
    return decode_message(frame)


async def _send(router: zmq.asyncio.Socket, msg: Message | bytes) -> None:
    frame = msg if isinstance(msg, bytes) else encode(msg)
    await router.send_multipart([PROCESS_ID.encode(), frame])


def _never_fails(exc: Exception) -> ErrorInfo:
    raise AssertionError(f"load did not raise, yet failure() got {exc!r}")


async def test_handshake_sends_hello_then_ready_with_the_tools(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    async def load() -> list[str]:
        return ["bash__run", "files__read"]

    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path)) as link:
            assert await link.handshake(load, _never_fails)
            hello, ready = await _recv(router), await _recv(router)
    assert isinstance(hello, Hello) and hello.from_ == PROCESS_ID and hello.to == ORCHESTRATOR
    assert (hello.payload.pid, hello.payload.kind) == (os.getpid(), "agent")
    assert (hello.payload.name, hello.payload.instance_key, hello.payload.generation) == (
        "a",
        "k",
        3,
    )
    assert isinstance(ready, Ready)
    assert (ready.payload.pid, ready.payload.tools) == (os.getpid(), ["bash__run", "files__read"])


async def test_handshake_reports_a_failed_load_as_start_error(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    async def load() -> list[str]:
        raise RuntimeError("no such model")

    def failure(exc: Exception) -> ErrorInfo:
        return ErrorInfo(code=ErrorCode.E_AGENT_START_FAILED, message=f"coded: {exc}")

    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path)) as link:
            assert not await link.handshake(load, failure)
            hello, error = await _recv(router), await _recv(router)
    assert isinstance(hello, Hello)
    assert isinstance(error, StartError)
    assert error.payload.error.code == ErrorCode.E_AGENT_START_FAILED
    assert error.payload.error.message == "coded: no such model"


async def test_serve_dispatches_frames_in_order_and_drops_garbage(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    seen: list[Message] = []

    def dispatch(msg: Message) -> None:
        seen.append(msg)
        if isinstance(msg, Shutdown):
            link.on_shutdown(msg.payload)

    async def until_drained() -> str:
        await link.draining.wait()
        return "drained"

    event = new_event(type="user.input", input="hi", instance_key="k",
                      source=Source(kind=SourceKind.CLI, name="cli"))  # fmt: skip
    shutdown = ShutdownPayload(grace_period_ms=100, reason=ShutdownReason.RESTART)
    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path)) as link:
            assert await link.handshake(_no_tools, _never_fails)
            assert [type(await _recv(router)) for _ in range(2)] == [Hello, Ready]
            await _send(router, b"\x00 not a frame")
            await _send(router, Event(from_=ORCHESTRATOR, to=PROCESS_ID, payload=event))
            await _send(router, Shutdown(from_=ORCHESTRATOR, to=PROCESS_ID, payload=shutdown))
            assert await link.serve(until_drained(), dispatch) == "drained"
    assert [type(m) for m in seen] == [Event, Shutdown]  # the garbage left the loop serving
    assert isinstance(seen[0], Event) and seen[0].payload.id == event.id


async def _no_tools() -> list[str]:
    return []


async def test_heartbeats_count_up_and_run_the_beat_hook_after_each(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    hooks: list[int] = []

    async def on_beat() -> None:
        hooks.append(len(hooks) + 1)

    async def three_beats() -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        while len(out) < 3:
            msg = await _recv(router)
            assert isinstance(msg, Heartbeat) and msg.to == ORCHESTRATOR
            out.append((msg.payload.seq, len(hooks)))
        return out

    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path, interval=0.01)) as link:
            beats = await link.serve(three_beats(), lambda msg: None, on_beat)
    # beat n is sent before its hook runs, and the hook of beat n-1 ran before beat n
    assert [seq for seq, _ in beats] == [1, 2, 3]
    assert all(hooked >= seq - 1 for seq, hooked in beats)


async def test_an_inactive_link_is_silent_but_answers_a_probe_and_says_when_a_turn_parks(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    async def exchange(link: Link) -> list[HeartbeatPayload]:
        link.set_active(False)
        # the child speaks first, as in the daemon: a ROUTER drops frames to a peer whose
        # connection it has not seen yet
        assert await link.handshake(_no_tools, _never_fails)
        assert isinstance(await _recv(router), Hello) and isinstance(await _recv(router), Ready)
        await _send(router, Heartbeat(from_=ORCHESTRATOR, to=PROCESS_ID,
                                      payload=HeartbeatPayload(seq=0)))  # fmt: skip
        seen = [await _recv(router)]  # the probe's answer, and nothing else while idle
        link.set_active(True)  # a turn runs: beats
        seen.append(await _recv(router))
        link.set_active(False, mid_turn=True)  # the turn waits for its client: one quiet beat
        seen.append(await _recv(router))
        link.set_active(True)
        seen.append(await _recv(router))
        return [m.payload for m in seen if isinstance(m, Heartbeat)]

    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path, interval=0.05)) as link:
            beats = await link.serve(exchange(link), lambda msg: None)
    assert [(b.answer, b.quiet) for b in beats] == [
        (True, False), (False, False), (False, True), (False, False),
    ]  # fmt: skip


async def test_a_quiet_beat_is_owed_even_when_the_loop_already_waits(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    async def exchange(link: Link) -> Message:
        link.set_active(False)  # the loop parks on its wake-up before the turn parks
        assert await link.handshake(_no_tools, _never_fails)
        assert isinstance(await _recv(router), Hello) and isinstance(await _recv(router), Ready)
        link.set_active(False, mid_turn=True)
        return await _recv(router)

    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path, interval=0.01)) as link:
            beat = await link.serve(exchange(link), lambda msg: None)
    assert isinstance(beat, Heartbeat) and beat.payload.quiet and not beat.payload.answer


async def test_shutdown_ack_carries_the_events_never_started(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path)) as link:
            await link.shutdown_ack(["e1", "e2"])
            ack = await _recv(router)
    assert isinstance(ack, ShutdownAck) and ack.payload.undelivered_events == ["e1", "e2"]


async def test_sigterm_asks_for_a_drain(router: zmq.asyncio.Socket, tmp_path: Path) -> None:
    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path)) as link:
            assert isinstance(link, Link) and not link.draining.is_set()
            os.kill(os.getpid(), signal.SIGTERM)  # routed to the loop's handler by connect()
            await link.draining.wait()
    assert link.draining.is_set()


async def test_the_drain_hook_runs_once_whatever_asks_for_the_drain(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    hooked: list[bool] = []
    shutdown = ShutdownPayload(grace_period_ms=100, reason=ShutdownReason.RESTART)
    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts_for(router, tmp_path)) as link:
            link.on_drain = lambda: hooked.append(link.draining.is_set())
            os.kill(os.getpid(), signal.SIGTERM)
            await link.draining.wait()
            link.on_shutdown(shutdown)  # a shutdown frame after SIGTERM: already draining
    assert hooked == [True]  # once, with `draining` already set


ORPHAN_SCRIPT = """
import asyncio, sys
from agent_process.link import connect
from protocol.ids import parse_process_id
from protocol.launch import ChildLaunch, LaunchSettings

async def main() -> None:
    settings = LaunchSettings(endpoint=sys.argv[1], swarm="s", bundle="b",
                              state_root=sys.argv[2], heartbeat_interval=0.02,
                              heartbeat_timeout=float(sys.argv[3]))
    opts = ChildLaunch(process=parse_process_id("agent:a:k:3"), settings=settings)
    async with connect(opts) as link:
        await link.serve(asyncio.Event().wait(), lambda msg: None)

asyncio.run(main())
"""


async def _orphan(endpoint: str, tmp_path: Path, silence: float) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", ORPHAN_SCRIPT, endpoint, str(tmp_path), str(silence),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip


async def test_no_orchestrator_at_the_endpoint_ends_the_child(tmp_path: Path) -> None:
    """Nobody listens at the endpoint: the child logs it and exits 4 at once."""
    async with asyncio.timeout(TIMEOUT):
        proc = await _orphan(f"ipc://{tmp_path}/nobody.sock", tmp_path, 600.0)
        out, _ = await proc.communicate()
    assert proc.returncode == EXIT_ORPHANED, out.decode()
    assert b"orchestrator_unreachable" in out


async def test_a_silent_orchestrator_ends_the_child(
    router: zmq.asyncio.Socket, tmp_path: Path
) -> None:
    """The orchestrator's socket takes the connection, then never answers: after
    heartbeat_timeout the child logs and exits 4."""
    async with asyncio.timeout(TIMEOUT):
        proc = await _orphan(router.getsockopt_string(zmq.LAST_ENDPOINT), tmp_path, 0.1)
        out, _ = await proc.communicate()
    assert proc.returncode == EXIT_ORPHANED, out.decode()
    assert b"orchestrator_lost" in out and b"silent for" in out


async def test_a_closed_orchestrator_connection_ends_the_child_at_once(tmp_path: Path) -> None:
    """The orchestrator's socket goes away while the child is connected: the child sees its
    connection end and exits 4, without waiting out its (here 600 s) heartbeat timeout."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{tmp_path}/agents.sock"
    sock.bind(endpoint)
    try:
        async with asyncio.timeout(TIMEOUT):
            proc = await _orphan(endpoint, tmp_path, 600.0)
            _, frame = await sock.recv_multipart()  # its first heartbeat: connected
            assert isinstance(decode_message(frame), Heartbeat)
            sock.close()
            out, _ = await proc.communicate()
    finally:
        sock.close()
        ctx.term()
    assert proc.returncode == EXIT_ORPHANED, out.decode()
    assert b"orchestrator_lost" in out and b"closed the connection" in out


@pytest.mark.parametrize(
    ("parent", "code"), [("os.getppid()", 0), ("os.getppid() + 1", EXIT_ORPHANED)]
)
async def test_die_with_parent_exits_when_the_parent_is_already_gone(
    parent: str, code: int
) -> None:
    script = f"import os; from agent_process.link import die_with_parent; die_with_parent({parent})"
    async with asyncio.timeout(TIMEOUT):
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, cwd=REPO)
        assert await proc.wait() == code
