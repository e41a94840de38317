"""Hostile frames at the agents and control sockets of a real daemon.

Hypothesis draws bursts of mutated real frames, random bytes and wrong frame counts, sent from
sockets with missing, random or non-live routing ids. Afterwards the daemon must still be up,
answer Ping and StatusQuery, serve a real request through two agents, and have logged its drops
with a running counter (first ten, then every thousandth: a flood must not flood the log).
FUZZ_EXAMPLES sets the number of bursts per socket (default 300; `make fuzz` uses more).
"""

from __future__ import annotations

import asyncio
import json
import os

import zmq
from hypothesis import HealthCheck, given, settings

from orchestrator.control.rundir import read_active
from protocol.control import Ping
from protocol.endpoints import StateLayout
from tests.fuzz import frames
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon

BUNDLE = REPO / "tests" / "fixtures" / "agents"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
FLOOD = 3000
"""Plain random frames after the hypothesis run: the counter passes a thousandth mark."""


def _endpoints(daemon: Daemon) -> dict[str, str]:
    info = read_active(StateLayout.from_env().run_paths(daemon.swarm).active_json)
    assert info is not None
    return dict(info.endpoints)


class Sender:
    """Blocking sockets (run in a thread, so the test's loop keeps reading the daemon log)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.ctx = zmq.Context()
        self.sent = 0

    def burst(self, ident: bytes | None, burst: list[list[bytes]]) -> None:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 500)
        if ident is not None:
            sock.setsockopt(zmq.ROUTING_ID, ident)
        sock.connect(self.endpoint)
        try:
            for parts in burst:
                sock.send_multipart(parts)
                self.sent += len(parts)
        finally:
            sock.close()

    def flood(self, count: int) -> None:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.connect(self.endpoint)
        for i in range(count):
            sock.send(os.urandom(1 + i % 64))
        self.sent += count
        sock.close()

    def close(self) -> None:
        self.ctx.term()


def fuzz(sender: Sender, seeds: list[bytes]) -> None:
    @settings(
        max_examples=EXAMPLES, deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(ident=frames.routing_id(), burst=frames.messages(seeds))
    def one(ident: bytes | None, burst: list[list[bytes]]) -> None:
        sender.burst(ident, burst)

    one()
    sender.flood(FLOOD)


async def healthy(daemon: Daemon) -> None:
    assert daemon.proc.returncode is None, "the daemon died under fuzzing"
    ping = await daemon.request(Ping(request_id="after"))
    assert ping.ok and isinstance(ping.result, dict) and ping.result["pid"] == daemon.pid
    reply = await daemon.send("sync still there", "caller")
    assert reply.ok, reply.error
    assert isinstance(reply.result, dict)
    result = json.loads(reply.result["input"])
    assert result["output"]["response"] == "worker: sync still there"
    status = await daemon.status()
    assert {p.name for p in status.processes} >= {"caller", "worker"}


def counters(daemon: Daemon, event: str) -> list[int]:
    return [int(line["dropped"]) for line in daemon.find(event) if "dropped" in line]


async def test_garbage_at_both_sockets_is_dropped_counted_and_the_daemon_serves(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(240):
        daemon = await start_daemon(BUNDLE, swarm=frames.SWARM)
        await healthy(daemon)  # both agents live: fuzz against a working swarm
        endpoints = _endpoints(daemon)
        totals = {}
        for name, seeds in (("agents", frames.agent_seeds()), ("control", frames.control_seeds())):
            sender = Sender(endpoints[name])
            try:
                await asyncio.to_thread(fuzz, sender, seeds)
            finally:
                sender.close()
            totals[name] = sender.sent
        await healthy(daemon)
        malformed = counters(daemon, "frame_malformed")
        control = counters(daemon, "control_bad_request")
        for seen in (malformed, control):
            # each drop is logged once, with a running counter: 1..10, then every thousandth
            assert seen[:10] == list(range(1, 11)), seen[:12]
            assert all(n % 1000 == 0 for n in seen[10:]) and seen[10:] == sorted(set(seen[10:]))
            assert seen[-1] >= 1000
        print(f"\nframes fuzzed: {totals}; malformed logged up to {malformed[-1]}, "
              f"control drops up to {control[-1]}")  # fmt: skip
