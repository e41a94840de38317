"""Raw baselines (no goondan code on the hot path), measured in the same run as ours.

Roles, each a separate process started with `python -m tests.bench.baselines ROLE ...`:
- `broker ENDPOINT`: the bare 3-process broker of ARCHITECTURE.md §8: an asyncio ROUTER on
  uvloop with the drain pattern that decodes every frame (typed) and forwards it to `to`.
- `worker ENDPOINT`: blocking DEALER "agent:worker:b:1" answering each request event with its
  response event (the same code serves our router and the bare broker).
- `client ENDPOINT N WINDOW M`: blocking DEALER "agent:client:b:1": N sync round trips, then
  M round trips with WINDOW in flight; prints JSON {"rtt_us": [...], "per_s": float}.
- `zygote ENDPOINT`: imports the stack, gc.freeze(), forks on each stdin line; the child makes
  its own zmq Context and uvloop loop, connects a DEALER and says `ready`.
- `cold ENDPOINT ID`: the same child started as a fresh interpreter.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass

import zmq

from protocol.codec import decode_message, encode
from protocol.events import ReplyTo, Source, SourceKind, new_event, response_to
from protocol.messages import Event

CLIENT_ID = b"agent:client:b:1"
WORKER_ID = b"agent:worker:b:1"
WORKER_SOURCE = Source(kind=SourceKind.AGENT, name="worker", instance_key="b")
CLIENT_SOURCE = Source(kind=SourceKind.AGENT, name="client", instance_key="b")


# -- figures -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One printed line: a figure, its baseline, and a goal if the issue sets one."""

    name: str
    median: float
    p99: float | None
    unit: str
    baseline: float | None = None
    goal: str = ""
    stalls: int | None = None
    """Samples over STALL_FACTOR x the median (rare stalls a p99 can hide); None: not counted."""

    @property
    def ratio(self) -> float | None:
        return self.median / self.baseline if self.baseline else None


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else values[0]


STALL_FACTOR = 10


def stalls(values: list[float]) -> int:
    """How many samples exceed STALL_FACTOR x the median."""
    limit = STALL_FACTOR * statistics.median(values)
    return sum(1 for v in values if v > limit)


def print_rows(title: str, rows: list[Row]) -> None:
    print(f"\n{title}")
    print(
        f"{'figure':46} {'median':>11} {'p99':>10} {'unit':6} {'÷ base':>7} "
        f"{f'>{STALL_FACTOR}x p50':>9}  goal"
    )
    for r in rows:
        p = f"{r.p99:10.1f}" if r.p99 is not None else f"{'-':>10}"
        ratio = f"{r.ratio:6.2f}x" if r.ratio is not None else f"{'-':>7}"
        count = f"{r.stalls:9d}" if r.stalls is not None else f"{'-':>9}"
        median = f"{r.median:11.3f}" if 0 < abs(r.median) < 1 else f"{r.median:11.1f}"
        print(f"{r.name:46} {median} {p} {r.unit:6} {ratio} {count}  {r.goal}")


# -- the shared client and worker --------------------------------------------------------


def request_frame(n: int) -> bytes:
    event = new_event(
        type="agent.request",
        input="ping " + "x" * 64,
        instance_key="b",
        source=CLIENT_SOURCE,
        reply_to=ReplyTo(target="agent:client:b", correlation_id=f"c{n}"),
    )
    return encode(Event(from_=CLIENT_ID.decode(), to="agent:worker:b", payload=event))


def is_reply(data: bytes) -> bool:
    msg = decode_message(data)
    return isinstance(msg, Event) and msg.payload.error is None


def worker(endpoint: str) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, WORKER_ID)
    sock.connect(endpoint)
    while True:
        msg = decode_message(sock.recv())
        if isinstance(msg, Event) and msg.payload.reply_to is not None:
            reply = response_to(msg.payload, source=WORKER_SOURCE, text="pong")
            sock.send(encode(Event(from_=WORKER_ID.decode(), to="agent:client:b", payload=reply)))


def _warm_up(sock: zmq.Socket[bytes]) -> None:
    """Until the worker is reachable: a request may be dropped or answered with an error."""
    n, ok = 0, 0
    while ok < 500:
        n += 1
        sock.send(request_frame(-n))
        if sock.poll(200) and is_reply(sock.recv()):
            ok += 1
        while sock.poll(0):
            sock.recv()


def client(endpoint: str, n: int, window: int, m: int) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, CLIENT_ID)
    sock.connect(endpoint)
    _warm_up(sock)
    clock = time.perf_counter_ns
    rtt = []
    for i in range(n):
        frame = request_frame(i)
        start = clock()
        sock.send(frame)
        sock.recv()
        rtt.append((clock() - start) / 1000)
    frames = [request_frame(i) for i in range(m)]
    start = clock()
    sent = received = 0
    while received < m:
        while sent < m and sent - received < window:
            sock.send(frames[sent])
            sent += 1
        sock.recv()
        received += 1
    per_s = m / ((clock() - start) / 1e9)
    print(json.dumps({"rtt_us": rtt, "per_s": per_s}), flush=True)


# -- the bare broker -----------------------------------------------------------------------


async def _broker(endpoint: str) -> None:
    import zmq.asyncio

    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.bind(endpoint)
    shadow: zmq.Socket[bytes] = zmq.Socket.shadow(sock.underlying)

    def route(frames: list[bytes]) -> None:
        msg = decode_message(frames[1])  # typed decode of every frame, as ours does
        try:  # noqa: SIM105 - a try costs less per message than contextlib.suppress
            shadow.send_multipart([f"{msg.to}:1".encode(), frames[1]], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # peer not there yet: the client's warm-up retries

    while True:
        route(await sock.recv_multipart())
        for _ in range(1000):
            try:
                frames = shadow.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            route(frames)


def broker(endpoint: str) -> None:
    import uvloop

    uvloop.run(_broker(endpoint))


# -- bare spawn → ready --------------------------------------------------------------------


def _bare_child(endpoint: str, ident: str) -> None:
    import uvloop
    import zmq.asyncio

    async def run() -> None:
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, ident.encode())
        sock.connect(endpoint)
        await sock.send(b"ready")
        await sock.recv()  # "bye"
        sock.close(linger=0)
        ctx.term()

    uvloop.run(run())


def zygote(endpoint: str) -> None:
    """Forks a child per stdin line; a line `cpu` is answered on stdout, once every child so far
    has exited, with the CPU seconds of this process and of its reaped children (wait4's
    rusage, the kernel's exact runtime): the raw CPU floor of a process per instance."""
    import structlog  # noqa: F401
    import uvloop  # noqa: F401
    import zmq.asyncio  # noqa: F401

    gc.collect()
    gc.freeze()
    reaped = Reaped()
    for line in sys.stdin:
        ident = line.strip()
        if ident == "cpu":
            reaped.collect(block=True)
            print(json.dumps({"self": time.process_time(), "children": reaped.cpu,
                              "reaped": reaped.count}), flush=True)  # fmt: skip
            continue
        if os.fork() == 0:
            _bare_child(endpoint, ident)
            os._exit(0)
        reaped.collect(block=False)


@dataclass(slots=True)
class Reaped:
    cpu: float = 0.0
    count: int = 0

    def collect(self, block: bool) -> None:
        try:
            while True:
                pid, _, usage = os.wait4(-1, 0 if block else os.WNOHANG)
                if pid == 0:
                    return
                self.cpu += usage.ru_utime + usage.ru_stime
                self.count += 1
        except ChildProcessError:
            pass


def cold(endpoint: str, ident: str) -> None:
    import structlog  # noqa: F401

    _bare_child(endpoint, ident)


ROLES = {"broker": broker, "worker": worker, "zygote": zygote, "cold": cold}

if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "client":
        client(args[0], int(args[1]), int(args[2]), int(args[3]))
    else:
        ROLES[role](*args)
