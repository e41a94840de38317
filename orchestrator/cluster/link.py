"""The connection to NATS and the swarm's JetStream streams and buckets (created if missing).

Streams (ARCHITECTURE.md §15):
- ingress `GOONDAN_<swarm>_IN`, subjects `goondan.<swarm>.in.<p>.<agent>.<key>`: every accepted
  event; file storage, `replicas` copies, de-duplicated by `Nats-Msg-Id` over the dedupe
  window, kept a day (a turn never waits that long: deferred calls expire in an hour);
- history `GOONDAN_<swarm>_H`, subjects `goondan.<swarm>.h.<agent>.<key>`: every conversation
  append, kept for good; direct gets, so an activation reads the last sequence in one trip.
Buckets: `leases` and `nodes` (TTL = the lease TTL), `state` (instance files and the swarm's
partition count), `replies` (10 minutes, for `send --attach`), `calls` (deferred calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.kv import KeyValue

from orchestrator.cluster import serverversion
from orchestrator.cluster.kvkeys import bucket_keys
from orchestrator.cluster.names import SwarmNames, token
from orchestrator.cluster.options import ClusterOptions
from protocol import backoff
from protocol.errors import ErrorCode

INGRESS_MAX_AGE = 24 * 3600.0
REPLY_KEEP = 600.0
META_KEY = "swarm.meta"
API_TIMEOUT = 5.0
CONNECT_PATIENCE = 10.0
ERROR_LOG_EVERY = 30.0
PREPARE_PATIENCE = 20.0
"""How long a starting node waits for JetStream to place the swarm's streams: a NATS cluster that
was just (re)started answers before its meta group knows every peer, and refuses a replicated
stream meanwhile. A node that gives up exits with the coded error (systemd restarts it)."""

WRONG_LAST = frozenset({10071, 10164})
"""JetStream's error codes for a conditional write whose expected sequence moved: 10071 names
the sequence, 10164 (newer servers, per-subject checks) does not. nats-py maps them to
KeyWrongLastSequenceError on a KV create/update only: a KV delete raises BadRequestError."""

log = structlog.get_logger("goondan.cluster.link")


class ClusterUnavailable(Exception):
    """NATS cannot be reached or refused what the node needs (coded, with the fix)."""

    def __init__(self, message: str, suggestion: str, code: str = ErrorCode.E_CLUSTER_UNAVAILABLE):
        super().__init__(f"{code}: {message} ({suggestion})")
        self.code = code
        self.message = message
        self.suggestion = suggestion


class SwarmMeta(msgspec.Struct, frozen=True):
    partitions: int


@dataclass(slots=True)
class Nats:
    nc: Client
    js: JetStreamContext
    names: SwarmNames
    leases: KeyValue
    nodes: KeyValue
    state: KeyValue
    replies: KeyValue
    calls: KeyValue

    async def entries(
        self, what: Literal["leases", "nodes", "calls"], prefix: str = "", suffix: str = ""
    ) -> dict[str, bytes]:
        """Key -> value of every key of a bucket under `prefix` and ending with `suffix` (see
        kvkeys for why not `KeyValue.keys()`); a key deleted meanwhile is left out."""
        bucket: KeyValue = getattr(self, what)
        listed = await bucket_keys(self.nc, self.names.bucket(what), API_TIMEOUT, prefix)
        keys = [key for key in listed if key.endswith(suffix)]
        values = await asyncio.gather(*(_value(bucket, key) for key in keys))
        return {key: value for key, value in zip(keys, values, strict=True) if value is not None}

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.drain()


async def _value(bucket: KeyValue, key: str) -> bytes | None:
    try:
        entry = await bucket.get(key)
    except nats.js.errors.KeyNotFoundError:
        return None
    return entry.value or b""


class _NatsTrouble:
    """nats-py's error callback: one log line per kind of trouble every ERROR_LOG_EVERY (it
    calls back on each failed reconnect, every 0.25 s while NATS is down), and the last
    error, which a failed first connect names. Without it nats-py prints tracebacks that are
    not the daemon's log lines."""

    def __init__(self) -> None:
        self.last: BaseException | None = None
        self._logged: dict[str, float] = {}

    async def on_error(self, exc: Exception) -> None:
        self.last = exc
        kind, now = type(exc).__name__, time.monotonic()
        if now - self._logged.get(kind, -ERROR_LOG_EVERY) >= ERROR_LOG_EVERY:
            self._logged[kind] = now
            log.warning("nats_error", error=kind, detail=str(exc)[:300])

    @staticmethod
    async def on_disconnected() -> None:
        log.warning("nats_disconnected")

    @staticmethod
    async def on_reconnected() -> None:
        log.info("nats_reconnected")


async def connect_client(opts: ClusterOptions, name: str) -> Client:
    """Connected, or ClusterUnavailable within CONNECT_PATIENCE: nats-py retries a first
    connect forever when a server answers but the handshake fails (an untrusted certificate)."""
    trouble = _NatsTrouble()
    kwargs: dict[str, Any] = {
        "servers": list(opts.servers),
        "name": name,
        "connect_timeout": 3,
        "reconnect_time_wait": 0.25,
        "max_reconnect_attempts": -1,
        # A server that stops answering (cut off, paused) keeps its TCP connection open: only
        # unanswered pings tell, and nats-py's default (every 120 s, two unanswered) keeps a
        # node on it for minutes. Every TTL: a node moves to another server about 3 TTLs
        # in. Not sooner: pings every half TTL made a few seconds of packet loss, or a cut of
        # the node itself, cost a new connection (and a worse wait) where TCP rode them out
        # (docs/cluster.md "Faults").
        "ping_interval": opts.policy.lease_ttl_seconds,
        "max_outstanding_pings": 2,
        "allow_reconnect": True,
        "error_cb": trouble.on_error,
        "disconnected_cb": trouble.on_disconnected,
        "reconnected_cb": trouble.on_reconnected,
    }
    kwargs.update(_credentials(opts))
    if opts.tls:
        kwargs["tls"] = ssl.create_default_context()
    nc = Client()
    try:
        async with asyncio.timeout(CONNECT_PATIENCE):
            await nc.connect(**kwargs)
    except asyncio.CancelledError:  # the daemon was stopped while it waited
        await _close_quietly(nc)
        raise
    except (OSError, nats.errors.Error, TimeoutError) as exc:
        await _close_quietly(nc)
        why = trouble.last if trouble.last is not None else exc
        raise ClusterUnavailable(
            f"cannot connect to NATS at {', '.join(opts.redacted())} ({type(why).__name__})",
            _connect_fix(why),
        ) from None
    verdict = serverversion.judge(serverversion.release(nc.connected_server_version))
    if verdict.refused is not None:
        await _close_quietly(nc)
        raise ClusterUnavailable(
            verdict.refused,
            f"run nats-server {serverversion.TESTED} (the release goondan is tested on)",
            code=ErrorCode.E_CLUSTER_SERVER_VERSION,
        )
    if verdict.warning is not None:
        log.warning("nats_server_version", problem=verdict.warning)
    return nc


def inbox_prefix(node: str) -> str:
    """The node's own inboxes (replies to its requests, its push consumers): a per-node NATS
    user may subscribe to these only, so no node reads the replies another asked for."""
    return f"_INBOX.{token(node)}"


def _credentials(opts: ClusterOptions) -> dict[str, Any]:
    """The user of the URLs is given for every server: nats-py otherwise reconnects without
    it to the servers the cluster announces (their URLs carry no user)."""
    found: dict[str, Any] = {"inbox_prefix": inbox_prefix(opts.node)}
    if opts.creds is not None:
        found["user_credentials"] = str(opts.creds)
    login = opts.login
    if login is not None:
        user, password = login
        if password is None:
            found["token"] = user
        else:
            found["user"], found["password"] = user, password
    return found


async def _close_quietly(nc: Client) -> None:
    with contextlib.suppress(nats.errors.Error, OSError):
        await nc.close()


def _connect_fix(why: BaseException) -> str:
    if isinstance(why, ssl.SSLCertVerificationError):
        return ("the server's TLS certificate is not trusted here: add its CA to the system's "
                "store, or point SSL_CERT_FILE at it")  # fmt: skip
    if isinstance(why, ssl.SSLError):
        return "the TLS handshake failed: check that the server speaks TLS (tls:// URLs)"
    return "check that nats-server runs with JetStream (-js) and the URLs and credentials"


async def open_swarm(opts: ClusterOptions, swarm: str, client_name: str) -> Nats:
    """Connect and make sure the swarm's streams and buckets exist (idempotent)."""
    nc = await connect_client(opts, client_name)
    try:
        return await _prepare_patiently(nc, opts, SwarmNames(swarm))
    except BaseException:
        await nc.close()
        raise


async def _prepare_patiently(nc: Client, opts: ClusterOptions, names: SwarmNames) -> Nats:
    deadline = time.monotonic() + PREPARE_PATIENCE
    attempt = 0
    while True:
        try:
            return await _prepare(nc, opts, names)
        except ClusterUnavailable as exc:
            pause = backoff.delay(attempt, first=0.25, cap=2.0)
            if exc.code != ErrorCode.E_CLUSTER_UNAVAILABLE or time.monotonic() + pause > deadline:
                raise
            log.warning("cluster_waiting", reason=exc.message, retry_in=pause)
            await asyncio.sleep(pause)
            attempt += 1


_NO_ANSWER = (
    nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError,
    TimeoutError,
)  # fmt: skip


async def _prepare(nc: Client, opts: ClusterOptions, names: SwarmNames) -> Nats:
    js = nc.jetstream(timeout=API_TIMEOUT)
    policy = opts.policy
    replicas = policy.replicas
    try:
        await _ensure_stream(js, StreamConfig(
            name=names.ingress_stream, subjects=[names.ingress_all],
            retention=RetentionPolicy.LIMITS, storage=StorageType.FILE, num_replicas=replicas,
            max_age=INGRESS_MAX_AGE, duplicate_window=min(policy.dedupe_window_seconds,
                                                          INGRESS_MAX_AGE),
            discard=DiscardPolicy.OLD,
        ))  # fmt: skip
        await _ensure_stream(js, StreamConfig(
            name=names.history_stream, subjects=[names.history_all],
            retention=RetentionPolicy.LIMITS, storage=StorageType.FILE, num_replicas=replicas,
            allow_direct=True, allow_rollup_hdrs=True, duplicate_window=120.0,
        ))  # fmt: skip
        ttl = policy.lease_ttl_seconds
        kv = {
            what: await ensure_bucket(js, names.bucket(what), replicas, ttl=bucket_ttl)
            for what, bucket_ttl in (
                ("leases", ttl), ("nodes", ttl), ("state", None), ("replies", REPLY_KEEP),
                ("calls", None),
            )
        }  # fmt: skip
    except nats.js.errors.APIError as exc:
        raise ClusterUnavailable(
            f"JetStream refused the swarm's streams: {exc.description or exc}",
            f"run nats-server with -js; with fewer than {replicas} servers set "
            "Swarm.spec.policy.cluster.replicas",
        ) from None
    except _NO_ANSWER:
        raise ClusterUnavailable(
            "JetStream did not answer", "run nats-server with JetStream enabled (-js)"
        ) from None
    try:
        await _check_meta(kv["state"], policy.partitions, names.swarm)
    except _NO_ANSWER:  # a bucket just created has no leader yet: wait like for the streams
        raise ClusterUnavailable(
            "JetStream did not store the swarm's partition count", "wait for JetStream"
        ) from None
    return Nats(nc, js, names, kv["leases"], kv["nodes"], kv["state"], kv["replies"], kv["calls"])


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        await js.stream_info(config.name)
    except nats.js.errors.NotFoundError:
        await js.add_stream(config)


async def ensure_bucket(
    js: JetStreamContext, name: str, replicas: int, ttl: float | None
) -> KeyValue:
    """The bucket `name`, created when missing (the `nodes` and `leases` buckets also when made
    again, stuck_bucket.py)."""
    try:
        return await js.key_value(name)
    except nats.js.errors.BucketNotFoundError:
        config = KeyValueConfig(
            bucket=name, history=1, replicas=replicas, storage=StorageType.FILE, ttl=ttl
        )
        return await js.create_key_value(config)


async def _check_meta(state: KeyValue, partitions: int, swarm: str) -> None:
    """The partition count is the swarm's for good: a node with another one is refused."""
    data = msgspec.json.encode(SwarmMeta(partitions=partitions))
    try:
        await state.create(META_KEY, data)
        return
    except nats.js.errors.KeyWrongLastSequenceError:
        pass
    entry = await state.get(META_KEY)
    meta = msgspec.json.decode(entry.value or b"{}", type=SwarmMeta)
    if meta.partitions != partitions:
        raise ClusterUnavailable(
            f"swarm {swarm!r} has {meta.partitions} partitions in NATS, this bundle says "
            f"{partitions}",
            f"set Swarm.spec.policy.cluster.partitions: {meta.partitions}",
            code=ErrorCode.E_CLUSTER_CONFIG,
        )
