"""A node's connection to its swarm's cluster, opened before anything else is built: the NATS
connection with the swarm's streams prepared, and the ingress stream as the node's journal
(ARCHITECTURE.md §15). The daemon opens it (orchestrator/daemon.py); the composition root
builds the node's placement and the node on it (orchestrator/wiring.py)."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from orchestrator.cluster.ingress import NatsJournal
from orchestrator.cluster.link import Nats, open_swarm
from orchestrator.cluster.names import partition_of
from orchestrator.cluster.options import ClusterOptions
from protocol.ids import Address

log = structlog.get_logger("goondan.cluster")


@dataclass(frozen=True, slots=True)
class NodeLink:
    opts: ClusterOptions
    nats: Nats
    journal: NatsJournal

    @classmethod
    async def open(cls, opts: ClusterOptions, swarm: str) -> NodeLink:
        """Connect and prepare the swarm's streams; raises ClusterUnavailable."""
        if not opts.has_credentials:  # only with --insecure-nats (options.py refuses it else)
            log.warning(
                "nats_insecure", node=opts.node, servers=opts.redacted(),
                fix="give the node a NATS user (docs/cluster.md)",
            )  # fmt: skip
        nats_ = await open_swarm(opts, swarm, f"goondan:{swarm}:{opts.node}")
        return cls(opts, nats_, NatsJournal(nats_, opts.node, opts.policy.partitions))

    @property
    def node(self) -> str:
        return self.opts.node

    @property
    def ttl(self) -> float:
        return self.opts.policy.lease_ttl_seconds

    def partition(self, target: Address) -> int:
        return partition_of(target.name, target.instance_key, self.opts.policy.partitions)
