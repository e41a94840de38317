"""A bucket made again when its stream has no leader for good (or is gone): `nodes` and `leases`.

After a whole-cluster power cut (docs/cluster.md "Faults") every replica of a bucket's stream
can come back with its store behind its own Raft snapshot: the records the snapshot counts had
expired and their files were removed, and the removal's index was not on disk yet. Each replica
then needs a catchup from the leader before it may lead (nats-server 2.12+ holds such a replica
out of elections, so an outdated one cannot lead with data missing), there is no leader to catch
up from, and none ever is: every server logs `catchup aborted, no leader for stream` every 5 s.
Stuck `nodes`: no node can beat or plan. Stuck `leases`: no partition can be taken or renewed,
and no instance answers. No request to the stream helps (a leader stepdown needs a leader), but
JetStream's meta leader deletes such a stream.

So a node whose writes to the bucket have failed for `rebuild_after` asks for the stream's info
every TTL, and when JetStream has said for `leaderless_for` that the stream has no leader, or
says that it is gone, deletes it and creates the bucket again with its configuration. The wait
is for the elections after a reboot, which take seconds (up to ~10 s after a majority of the
servers rebooted): a server up for long says a stream is leaderless as soon as its leader is
gone (the fault suite saw a node delete one 4 s after a majority power cut healed before this
wait).

`nodes` holds soft state: each live node's record, written again at every beat and expiring with
the lease TTL; it is made again as soon as it is gone. `leases` holds the partitions' owners,
and "no leader" at each look does not prove that no lease was renewed between two looks (a
leader elected and lost meanwhile acknowledges renewals). A node trusts a lease for less than a
TTL after the renewal that was acknowledged, and a deleted stream acknowledges nothing: so the
`leases` bucket is created again only a whole TTL (`hold`) after this node deleted it or first
saw it gone, when no lease of the old stream is trusted anywhere. Whatever else goes wrong,
the history stream's conditional appends still fence a second writer (`history.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec
import nats.errors
import nats.js.errors
import structlog

from orchestrator.cluster.link import API_TIMEOUT, Nats, ensure_bucket

log = structlog.get_logger("goondan.cluster.stuck_bucket")

REBUILD_FLOOR = 10.0
"""The least time writes fail before the bucket's stream is looked at: a JetStream election after
a restart takes seconds (up to ~10 s after a majority of the servers rebooted)."""
LEADERLESS_FOR = 10.0
"""How long JetStream must have said the stream has no leader before it is made again."""
REBUILD_PATIENCE = 30.0
"""How long one look, delete and creation may take (the delete of a stuck stream waits for its
replicas' aborted catchups: ~4 s measured)."""

Verdict = Literal["led", "leaderless", "gone"]
Bucket = Literal["nodes", "leases"]


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0


class _ClusterInfo(msgspec.Struct):
    leader: str = ""


class _StreamInfo(msgspec.Struct):
    cluster: _ClusterInfo | None = None
    error: _ApiError | None = None


async def stream_verdict(nats_: Nats, stream: str) -> Verdict:
    """Whether `stream` has a leader, is leaderless past the server's own threshold, or is
    gone. Raises nats.errors.TimeoutError when nobody answers (a stream in an election, no meta
    leader) and nats.js.errors.APIError for any other refusal."""
    reply = await nats_.nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=API_TIMEOUT)
    info = msgspec.json.decode(reply.data, type=_StreamInfo)
    if info.error is not None:
        if info.error.code == 404:
            return "gone"
        raise nats.js.errors.APIError(code=info.error.code, err_code=info.error.err_code)
    if info.cluster is None or info.cluster.leader:  # a single server's stream: always led
        return "led"
    return "leaderless"


@dataclass(slots=True)
class StuckBucket:
    nats: Nats
    what: Bucket
    ttl: float
    """The lease TTL: the bucket's entries expire with it, and a look comes at most once a TTL."""
    replicas: int
    clock: Callable[[], float] = time.monotonic
    failing_since: float | None = None
    """When the bucket's writes began to fail (None: the last one worked)."""
    looked_at: float | None = None
    leaderless_since: float | None = None
    """When a look first found the stream without a leader (None: not since it had one)."""
    gone_since: float | None = None
    """When this node deleted the stream or first found it gone (None: not since it was led)."""
    leaderless_for: float = LEADERLESS_FOR
    rebuilds: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def rebuild_after(self) -> float:
        return max(REBUILD_FLOOR, 3 * self.ttl)

    @property
    def hold(self) -> float:
        """How long the stream stays gone before the bucket is created again (module doc)."""
        return self.ttl if self.what == "leases" else 0.0

    def ok(self) -> None:
        """A write to the bucket was answered (a refused compare-and-set too: a leader said so)."""
        self.failing_since = self.looked_at = self.leaderless_since = self.gone_since = None

    def failed(self) -> None:
        """Counts the failure; past `rebuild_after`, looks at the stream off the caller (a delete
        and a creation outlast a tick), one look at a time and at most one a TTL."""
        now = self.clock()
        if self.failing_since is None:
            self.failing_since = now
        if now - self.failing_since < self.rebuild_after:
            return
        if self.looked_at is not None and now - self.looked_at < self.ttl:
            return
        if self._task is None or self._task.done():
            self.looked_at = now
            self._task = asyncio.ensure_future(self._look())

    async def _look(self) -> None:
        name = self.nats.names.bucket(self.what)
        stream = f"KV_{name}"
        try:
            async with asyncio.timeout(REBUILD_PATIENCE):
                verdict = await stream_verdict(self.nats, stream)
                if not self._stuck(verdict):
                    return
                log.warning(f"{self.what}_bucket_stuck", stream=stream, verdict=verdict)
                if verdict == "leaderless":
                    with contextlib.suppress(nats.js.errors.NotFoundError):
                        patient = self.nats.nc.jetstream(timeout=REBUILD_PATIENCE)
                        await patient.delete_stream(stream)
                    self._gone()
                if not self._may_create():
                    log.warning(f"{self.what}_bucket_held", stream=stream, hold=self.hold)
                    return
                await ensure_bucket(self.nats.js, name, self.replicas, self.ttl)
        except (nats.errors.Error, TimeoutError, OSError, msgspec.DecodeError) as exc:
            # a node's NATS user without the stream delete permission (an older `goondan
            # cluster nats-config`) lands here too: the next look says so again
            log.warning(f"{self.what}_bucket_rebuild_failed", stream=stream,
                        error=type(exc).__name__)  # fmt: skip
            return
        self.rebuilds += 1
        self.leaderless_since = self.gone_since = None
        log.warning(f"{self.what}_bucket_rebuilt", stream=stream)

    def _stuck(self, verdict: Verdict) -> bool:
        if verdict == "led":  # the writes fail for another reason: nothing of the bucket's
            self.leaderless_since = self.gone_since = None
            return False
        if verdict == "gone":
            self._gone()
            return True
        now = self.clock()
        if self.leaderless_since is None:
            self.leaderless_since = now
        return now - self.leaderless_since >= self.leaderless_for

    def _gone(self) -> None:
        if self.gone_since is None:
            self.gone_since = self.clock()

    def _may_create(self) -> bool:
        return self.gone_since is not None and self.clock() - self.gone_since >= self.hold

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
