"""Pure naming for cluster mode: partitions, owners, and the NATS names of a swarm.

An instance (agent + instanceKey) belongs to partition `p = H(agent, key) mod P`; a partition
belongs to the live node with the highest `H(node, p)` (rendezvous hashing: a node that joins
or leaves moves only the partitions it wins or held, about 1/N of them). The hash is
BLAKE2b, never Python's `hash()`, which differs between processes.

Names users choose (swarm, agent, instanceKey, node) become NATS subject tokens, stream,
bucket and key names through one escaping: `[A-Za-z0-9-]` stay, every other byte of the UTF-8
(`_` too) becomes `_XX`, so the result is valid everywhere NATS takes a name and two names
never map to one token.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from protocol.ids import Address, agent_address

_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def token(name: str) -> str:
    """`name` as one NATS token (subject token, stream/bucket/key part); never empty."""
    if not name:
        return "_"
    return "".join(chr(b) if b in _PLAIN else f"_{b:02X}" for b in name.encode())


def untoken(text: str) -> str:
    """The inverse of `token`; ValueError on text `token` cannot produce."""
    if text == "_":
        return ""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "_":
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(text[i]))
            i += 1
    return out.decode()


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def partition_of(agent: str, instance_key: str, partitions: int) -> int:
    return _h64(f"{agent}\0{instance_key}") % partitions


def owner_of(partition: int, nodes: Iterable[str]) -> str | None:
    """The node that should own `partition` among `nodes` (None when there is none)."""
    best: tuple[int, str] | None = None
    for node in nodes:
        score = (_h64(f"{node}\0{partition}"), node)
        if best is None or score > best:
            best = score
    return best[1] if best is not None else None


def plan(partitions: int, nodes: Iterable[str]) -> dict[int, str]:
    """Partition -> the node that should own it."""
    live = sorted(set(nodes))
    owners = {p: owner_of(p, live) for p in range(partitions)}
    return {p: n for p, n in owners.items() if n is not None}


@dataclass(frozen=True, slots=True)
class SwarmNames:
    """Every NATS name of one swarm's cluster."""

    swarm: str

    @property
    def _s(self) -> str:
        return token(self.swarm)

    @property
    def prefix(self) -> str:
        return f"goondan.{self._s}"

    # streams
    @property
    def ingress_stream(self) -> str:
        return f"GOONDAN_{self._s}_IN"

    @property
    def history_stream(self) -> str:
        return f"GOONDAN_{self._s}_H"

    # buckets
    def bucket(self, what: str) -> str:
        """`leases`, `nodes`, `state`, `replies`, `calls`."""
        return f"goondan_{self._s}_{what}"

    # subjects
    def ingress_subject(self, partition: int, target: Address) -> str:
        return f"{self.prefix}.in.{partition}.{token(target.name)}.{token(target.instance_key)}"

    def ingress_filter(self, partition: int) -> str:
        return f"{self.prefix}.in.{partition}.>"

    @property
    def ingress_all(self) -> str:
        return f"{self.prefix}.in.>"

    def history_subject(self, target: Address) -> str:
        return f"{self.prefix}.h.{token(target.name)}.{token(target.instance_key)}"

    @property
    def history_all(self) -> str:
        return f"{self.prefix}.h.>"

    def reply_subject(self, correlation_id: str) -> str:
        """Core NATS: where the owner of a turn sends the reply a control client waits for."""
        return f"{self.prefix}.reply.{token(correlation_id)}"

    def node_subject(self, node: str, what: str, sender: str) -> str:
        """Core NATS: requests from node `sender` to `node` (`node_requests.py`): `answer` (a
        deferred call it runs), `status` (its process table), `logs` (its log lines), `delete`
        (an instance). The sender is the last token: NATS does not tell a subscriber who
        published, and a per-node user may publish only subjects ending in its own name
        (docs/cluster.md), so the server vouches for it."""
        return f"{self.prefix}.node.{token(node)}.{what}.{token(sender)}"

    def node_requests(self, node: str, what: str) -> str:
        """What `node` subscribes to for one kind of request, from any sender."""
        return f"{self.prefix}.node.{token(node)}.{what}.*"

    def sender_of(self, subject: str) -> str:
        """The node a request subject names as its sender; ValueError when it names none."""
        sender = untoken(subject.rsplit(".", 1)[-1])
        if not NODE_NAME.match(sender):
            raise ValueError(f"no node sent {subject}")
        return sender

    @staticmethod
    def consumer(partition: int) -> str:
        return f"p{partition}"

    @staticmethod
    def lease_key(partition: int) -> str:
        return f"p.{partition}"

    @staticmethod
    def instance_prefix(target: Address) -> str:
        """The KV key prefix of one instance's state files."""
        return f"{token(target.name)}.{token(target.instance_key)}"

    def target_of_ingress(self, subject: str) -> Address:
        """The instance an ingress subject is for; ValueError when it is not one."""
        head = f"{self.prefix}.in."
        if not subject.startswith(head):
            raise ValueError(f"not an ingress subject: {subject}")
        parts = subject[len(head) :].split(".")
        if len(parts) != 3:
            raise ValueError(f"not an ingress subject: {subject}")
        return agent_address(untoken(parts[1]), untoken(parts[2]))
