"""The fault kinds and a seeded schedule. Each fault is held longer than the bundle's lease TTL
(tests/cluster/bundle: 2 s), so leases expire and move while it lasts; `heal` undoes it.
Asymmetric loss is an nftables rule in one member's namespace (`netns.nft_unavailable`), a slow
link a token bucket on one way of its link; a fixed delay per packet needs the netem qdisc,
which `netns.netem_available` detects (no kind injects it yet). The power cuts need the
servers' stores on ext4 images (tests/faults/power.py), the clock jumps libfaketime
(tests/faults/clock.py); without them those kinds are left out with the reason (`skipped`)."""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.natsd import Server
from tests.faults import clock, power
from tests.faults.cluster import NsNatsCluster, start_ns_node
from tests.faults.netns import netem_available, nft_unavailable, tbf_available
from tests.integration.harness import Daemon

HOLD = 4.0
"""Seconds a fault lasts: twice the test bundle's lease TTL."""


@dataclass
class World:
    """What the nemesis acts on; `down` names the nodes the workload must route around (a
    stopped or killed node's control socket answers nobody)."""

    nats: NsNatsCluster
    nodes: list[Daemon]
    bundle: Path
    root: Path
    down: set[int] = field(default_factory=set)
    retired: list[Daemon] = field(default_factory=list)
    """Killed nodes, closed at the end: closing one while a workload send still waits on its
    control socket blocks in the zmq context's term."""

    async def restart_node(self, i: int) -> None:
        node = self.nodes[i]
        await node.proc.wait()  # not node.wait(): its agents may hold its stdout open a while
        self.retired.append(node)
        self.nodes[i] = await start_ns_node(
            self.nats.net, self.nats, self.bundle, f"n{i + 1}", self.root
        )


Fault = Callable[[World, random.Random], Awaitable[str]]


async def node_cut(world: World, rng: random.Random) -> str:
    i = rng.randrange(len(world.nodes))
    world.nats.net.cut(f"n{i + 1}")
    await asyncio.sleep(HOLD)  # the fault's length is the point: nothing to await
    world.nats.net.heal()
    return f"n{i + 1} cut from NATS"


async def nats_minority_cut(world: World, rng: random.Random) -> str:
    server = rng.choice(world.nats.servers)
    world.nats.net.cut(server.name)
    await asyncio.sleep(HOLD)
    world.nats.net.heal()
    return f"{server.name} cut"


async def split(world: World, rng: random.Random) -> str:
    server, i = rng.choice(world.nats.servers), rng.randrange(len(world.nodes))
    world.nats.net.cut(server.name, f"n{i + 1}")
    await asyncio.sleep(HOLD)
    world.nats.net.heal()
    return f"minority {server.name}+n{i + 1} | majority the rest"


async def asymmetric_loss(world: World, rng: random.Random) -> str:
    """A node or a server loses a third to two thirds of the packets one way only (what it
    sends, or what it receives): TCP stalls and retransmits while the other way flows, and
    heartbeats, acks and lease renewals get through late or not at all."""
    member = rng.choice([*(f"n{i + 1}" for i in range(len(world.nodes))),
                         *(s.name for s in world.nats.servers)])  # fmt: skip
    direction, percent = rng.choice(["out", "in"]), rng.randrange(33, 67)
    world.nats.net.lose(member, direction, percent)
    await asyncio.sleep(HOLD)
    world.nats.net.heal()
    return f"{member} loses {percent} % {'sent' if direction == 'out' else 'received'}"


async def slow_link(world: World, rng: random.Random) -> str:
    """A node or a server behind a congested link one way: what it sends (or receives) drains
    at 32-128 kbit/s through a queue of up to 2 s, so heartbeats, acks and lease renewals
    arrive seconds late instead of being lost."""
    member = rng.choice([*(f"n{i + 1}" for i in range(len(world.nodes))),
                         *(s.name for s in world.nats.servers)])  # fmt: skip
    direction, kbit = rng.choice(["out", "in"]), rng.choice([32, 64, 128])
    world.nats.net.throttle(member, direction, kbit)
    await asyncio.sleep(HOLD)
    world.nats.net.heal()
    return f"{member} {'sends' if direction == 'out' else 'receives'} at {kbit} kbit/s"


async def node_pause(world: World, rng: random.Random) -> str:
    i = rng.randrange(len(world.nodes))
    world.down.add(i)
    world.nodes[i].signal(signal.SIGSTOP)
    await asyncio.sleep(HOLD)
    world.nodes[i].signal(signal.SIGCONT)
    world.down.discard(i)
    return f"n{i + 1} paused"


async def nats_pause(world: World, rng: random.Random) -> str:
    server = rng.choice(world.nats.servers)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    await asyncio.sleep(HOLD)
    server.proc.send_signal(signal.SIGCONT)
    return f"{server.name} paused"


async def node_kill(world: World, rng: random.Random) -> str:
    i = rng.randrange(len(world.nodes))
    world.down.add(i)
    world.nodes[i].signal(signal.SIGKILL)
    await asyncio.sleep(HOLD)
    await world.restart_node(i)
    world.down.discard(i)
    return f"n{i + 1} killed and restarted"


async def _one_server_down(
    world: World, rng: random.Random, down: Callable[[Server], object]
) -> str:
    """One server taken down (killed, or its store's power cut), held down, restarted."""
    server = rng.choice(world.nats.servers)
    down(server)
    await asyncio.sleep(HOLD)
    await world.nats.restart(server)
    await world.nats.wait_listening()
    return server.name


async def nats_kill(world: World, rng: random.Random) -> str:
    return f"{await _one_server_down(world, rng, world.nats.kill)} killed and restarted"


async def nats_power_cut(world: World, rng: random.Random) -> str:
    return f"{await _one_server_down(world, rng, world.nats.power_cut)} lost power and rebooted"


async def nats_power_cut_majority(world: World, rng: random.Random) -> str:
    """2 of 3 servers lose power together: JetStream has no quorum until they are back, and
    an append they had acknowledged is only on their (cut) disks."""
    servers = rng.sample(world.nats.servers, 2)
    world.nats.power_cut(*servers)
    await asyncio.sleep(HOLD)
    for server in servers:
        await world.nats.restart(server)
    await world.nats.wait_listening()
    return f"{'+'.join(s.name for s in servers)} lost power and rebooted"


async def nats_power_cut_all(world: World, rng: random.Random) -> str:
    """Every server loses power at once (a rack, a data centre): nothing survives but what
    each had synced to its disk."""
    world.nats.power_cut(*world.nats.servers)
    await asyncio.sleep(HOLD)
    for server in world.nats.servers:
        await world.nats.restart(server)
    await world.nats.wait_listening()
    return "every server lost power and rebooted"


async def node_clock_jump(world: World, rng: random.Random) -> str:
    """A node's wall clock jumps minutes ahead or back, stays there, then jumps back: leases
    and everything else must keep counting on the monotonic clock."""
    i = rng.randrange(len(world.nodes))
    seconds = rng.choice([-1, 1]) * rng.randrange(JUMP // 10, JUMP + 1)
    clock.jump(world.root, f"n{i + 1}", seconds)
    await asyncio.sleep(HOLD)
    clock.jump(world.root, f"n{i + 1}", 0)
    return f"n{i + 1}'s clock {seconds:+d} s"


KINDS: dict[str, Fault] = {
    "node_cut": node_cut, "nats_minority_cut": nats_minority_cut, "split": split,
    "asymmetric_loss": asymmetric_loss, "slow_link": slow_link,
    "node_pause": node_pause, "nats_pause": nats_pause, "node_kill": node_kill,
    "nats_kill": nats_kill, "nats_power_cut": nats_power_cut,
    "nats_power_cut_majority": nats_power_cut_majority, "nats_power_cut_all": nats_power_cut_all,
    "node_clock_jump": node_clock_jump,
}  # fmt: skip
POWER = ("nats_power_cut", "nats_power_cut_majority", "nats_power_cut_all")
DRIVE_LEAVES_OUT = ("nats_power_cut_majority", "nats_power_cut_all")
"""Kinds the one-round drive of `make test` leaves to `make cluster-faults`: JetStream without
a quorum until the servers rebooted, ~15 s a round; `nats_power_cut` covers the mechanism."""
JUMP = 600
"""The most a node's clock jumps (s), ahead or back: far past every lease TTL."""


def skipped(nats: NsNatsCluster) -> dict[str, str]:
    """The kinds this machine cannot inject, with the reason."""
    left: dict[str, str] = {}
    no_loss = nft_unavailable()
    if no_loss is not None:
        left["asymmetric_loss"] = no_loss
    if not tbf_available():
        left["slow_link"] = "no tbf qdisc in this kernel (tc qdisc add ... tbf failed)"
    if not netem_available():  # not a kind yet: said, so a run's header shows what is missing
        left["fixed_delay"] = "no netem qdisc in this kernel (tc qdisc add ... netem failed)"
    if not nats.powered:
        left |= dict.fromkeys(POWER, f"no power cuts: {power.unavailable()}")
    no_clock = clock.unavailable()
    if no_clock is not None:
        left["node_clock_jump"] = no_clock
    return left


def schedule(seed: int, rounds: int, skip: dict[str, str]) -> list[str]:
    """Every kind `rounds` times, in an order the seed decides."""
    kinds = [kind for kind in KINDS if kind not in skip for _ in range(rounds)]
    random.Random(seed).shuffle(kinds)
    return kinds
