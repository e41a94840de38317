"""Cluster nodes for tests: `goondan run --cluster ... --node nX`, each with its own state root,
all on one machine against the 3-server NATS cluster of `natsd.py`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats as natsio
import nats.aio.msg
import nats.js.errors
from nats.js.api import DeliverPolicy

from orchestrator.cluster.names import SwarmNames
from protocol.control import ControlReply
from protocol.conversation import Message, Role, apply_event
from protocol.ids import agent_address
from protocol.transcript import decode_events
from tests.cluster.natsd import NatsCluster
from tests.integration.harness import Daemon

BUNDLE = Path(__file__).parent / "bundle"
SWARM = "clu"

StartDaemon = Callable[..., Awaitable[Daemon]]


def unique_swarm_bundle(tmp: Path) -> Path:
    """The test bundle under a swarm name of its own: tests share one NATS cluster, and a
    swarm's streams and leases are named after it."""
    name = f"clu{uuid.uuid4().hex[:8]}"
    text = (BUNDLE / "goondan.yaml").read_text().replace("name: clu\n", f"name: {name}\n")
    target = tmp / "bundle"
    target.mkdir(exist_ok=True)
    (target / "goondan.yaml").write_text(text)
    for extra in BUNDLE.glob("*.py"):
        (target / extra.name).write_text(extra.read_text())
    return target


def swarm_of(bundle: Path) -> str:
    for line in (bundle / "goondan.yaml").read_text().splitlines():
        if line.startswith("  name: clu"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no swarm name")


async def start_node(
    start_daemon: StartDaemon,
    nats: NatsCluster,
    bundle: Path,
    name: str,
    root: Path,
    args: Sequence[str] = (),
    **kwargs: Any,
) -> Daemon:
    state_root = root / name
    state_root.mkdir(parents=True, exist_ok=True)
    return await start_daemon(
        bundle, swarm=swarm_of(bundle), state_root=state_root,
        args=("--cluster", nats.urls_as(name), "--node", name, *args), **kwargs,
    )  # fmt: skip


async def start_nodes(
    start_daemon: StartDaemon,
    nats: NatsCluster,
    bundle: Path,
    root: Path,
    count: int = 3,
    **kwargs: Any,
) -> list[Daemon]:
    # all at once, as a cluster's machines boot: the nodes' starts (the streams' Raft groups,
    # their fork servers) overlap; one that fails cancels the others (Daemon.start closes them)
    async with asyncio.TaskGroup() as group:
        starts = [group.create_task(start_node(start_daemon, nats, bundle, f"n{i + 1}", root,
                                               **kwargs))
                  for i in range(count)]  # fmt: skip
    nodes = [start.result() for start in starts]
    for node in nodes:  # every node holds its share of the plan over all of them
        await node.wait_for("cluster_settled", nodes=count)
    return nodes


@dataclass(frozen=True)
class FreshSwarm:
    """Three nodes of a swarm of its own (the `fresh` fixture)."""

    bundle: Path
    swarm: str
    nodes: list[Daemon]


async def history_entries(
    cluster: NatsCluster, swarm: str, agent: str, key: str
) -> list[natsio.aio.msg.Msg]:
    """Every message of an instance's subject of the history stream, in order, with headers."""
    names = SwarmNames(swarm)
    subject = names.history_subject(agent_address(agent, key))
    nc = await natsio.connect(cluster.urls.split(","))
    entries = []
    try:
        js = nc.jetstream()
        try:
            last = (await js.get_last_msg(names.history_stream, subject)).seq or 0
        except nats.js.errors.NotFoundError:
            return []
        sub = await js.subscribe(subject, stream=names.history_stream, ordered_consumer=True,
                                 deliver_policy=DeliverPolicy.ALL)  # fmt: skip
        while True:
            msg = await sub.next_msg(timeout=5)
            entries.append(msg)
            if msg.metadata.sequence.stream >= last:
                break
        await sub.unsubscribe()
    finally:
        await nc.close()
    return entries


async def read_history(cluster: NatsCluster, swarm: str, agent: str, key: str) -> list[Message]:
    """An instance's conversation as the history stream has it (folded like the store)."""
    entries = await history_entries(cluster, swarm, agent, key)
    events, bad = decode_events(b"".join(msg.data for msg in entries))
    assert not bad, bad
    messages: list[Message] = []
    for event in events:
        apply_event(messages, event)
    return messages


class Progress:
    """A count that load loops raise and a test awaits (no polling)."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = asyncio.Condition()

    async def add(self) -> None:
        async with self._changed:
            self.count += 1
            self._changed.notify_all()

    async def reached(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.count >= count)


async def send_each(node: Daemon, texts: dict[str, str]) -> None:
    """Send each key its text through `node`, all at once; every send is answered."""
    replies = await asyncio.gather(*(node.send(text, key=key) for key, text in texts.items()))
    assert all(r.ok for r in replies), [r.error for r in replies if not r.ok]


def on_node(node: Daemon, *args: str) -> list[str]:
    """A CLI command's arguments for `node` (its state root and swarm)."""
    assert node.state_root is not None
    return [*args, "--state-root", str(node.state_root), "--swarm", node.swarm]


async def activate(nodes: list[Daemon], agent: str, keys: list[str]) -> dict[str, Daemon]:
    """Each key's `agent` instance started (a send through the first node), and the node that
    runs it."""
    await asyncio.gather(*(nodes[0].send("hi", agent, key=k) for k in keys))
    return {k: owner_of(nodes, agent, k) for k in keys}


async def turn_running(
    owner: Daemon, through: Daemon, text: str, key: str
) -> asyncio.Future[ControlReply]:
    """`text` sent to the `worker` of `key` through another node, once its turn runs on
    `owner` (its first process): the send's reply, still to come."""
    mark = owner.mark()
    sent = asyncio.ensure_future(through.send(text, "worker", key=key))
    async with asyncio.timeout(30):
        await owner.wait_for("transition", mark, process=f"agent:worker:{key}:1",
                             target="processing")  # fmt: skip
    return sent


def owner_of(nodes: list[Daemon], agent: str, key: str) -> Daemon:
    """The node where the instance's process was started (its log says so); one only."""
    found = [n for n in nodes if n.find("spawned", process=f"agent:{agent}:{key}:1")]
    assert len(found) == 1, [n.pid for n in found]
    return found[0]


def run_elsewhere(nodes: list[Daemon], keys: list[str], node: Daemon) -> str:
    """A key whose `caller` instance another node than `node` runs."""
    return next(k for k in keys if owner_of(nodes, "caller", k) is not node)


def node_name(nodes: list[Daemon], node: Daemon) -> str:
    """The `--node` name `start_nodes` gave `node` (n1, n2, ...)."""
    return f"n{nodes.index(node) + 1}"


def user_texts(messages: list[Message]) -> list[str]:
    return [m.content for m in messages if m.role is Role.USER]
