"""The ingress stream as the journal (`NatsJournal`): an event is accepted once JetStream has
acknowledged its publish (replicated), with `Nats-Msg-Id` = its idempotency key.

Publishes go out in call order (one lock around the send, not around the acknowledgement), so
events a sender hands over in order are in the stream in that order. A publish whose
acknowledgement does not come (a stream leader election) is sent again with the same
`Nats-Msg-Id` until `PUBLISH_DEADLINE`: the stream keeps one copy, and nothing is acknowledged
to the sender before it is stored.

Replies of finished events are kept 10 minutes in the `replies` bucket (for `send --attach`).
Which events are pending is the consumers' business (`consumers.py`): `pending()` is empty.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.js.api import PubAck

from orchestrator.cluster.link import Nats
from orchestrator.cluster.names import partition_of, token
from orchestrator.ingress.journal import Appended, EntryState, JournalEntry, JournalError
from protocol import backoff
from protocol.errors import ErrorCode
from protocol.events import AgentEvent
from protocol.ids import parse_address

log = structlog.get_logger("goondan.cluster.ingress")
PUBLISH_TRY = 2.0
PUBLISH_DEADLINE = 30.0
KEEP_DEADLINE = 30.0
MSG_ID = "Nats-Msg-Id"


class Envelope(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One ingress message: the event, the instance it is for, and the node that accepted it
    (where a control client may wait for its reply)."""

    event: AgentEvent
    target: str
    origin: str
    accepted_at: float
    dedupe_key: str | None = None


_encode = msgspec.msgpack.Encoder().encode
_decode_envelope = msgspec.msgpack.Decoder(Envelope).decode
_decode_event = msgspec.msgpack.Decoder(AgentEvent).decode


def decode_envelope(data: bytes) -> Envelope:
    """Raises msgspec.DecodeError (ValidationError included)."""
    return _decode_envelope(data)


def _unavailable(message: str) -> JournalError:
    return JournalError(ErrorCode.E_CLUSTER_UNAVAILABLE, message,
                        "check the NATS servers (goondan cluster status)")  # fmt: skip


def reply_key(event_id: str) -> str:
    """`r.<event id>`: two tokens, so a per-node NATS user's permission to write replies
    (`$KV.*.r.*`) is not one to write another node's record (`$KV.*.<node>`, one token)."""
    return f"r.{token(event_id)}"


class NatsJournal:
    def __init__(self, nats_: Nats, node: str, partitions: int) -> None:
        self.nats = nats_
        self.node = node
        self.partitions = partitions
        self._order = asyncio.Lock()

    def subject_for(self, target: str) -> str:
        address = parse_address(target)
        p = partition_of(address.name, address.instance_key, self.partitions)
        return self.nats.names.ingress_subject(p, address)

    async def append(
        self, event: AgentEvent, target: str, dedupe_key: str | None = None
    ) -> Appended:
        now = time.time()
        envelope = Envelope(event=event, target=target, origin=self.node, accepted_at=now,
                            dedupe_key=dedupe_key)  # fmt: skip
        ack = await self.publish(self.subject_for(target), _encode(envelope),
                                 dedupe_key or event.id)  # fmt: skip
        if ack.duplicate:
            first = await self._first(ack.seq)
            # the first copy may be this very event, stored by a try whose ack was lost (a
            # cut, an election): then it is accepted, and its sender keeps waiting for it
            if first is not None and first.event.id != event.id:
                return Appended(entry=first, duplicate=True)
        entry = JournalEntry(seq=ack.seq, event=event, target=target, state=EntryState.ACCEPTED,
                             attempts=0, accepted_at=now, dedupe_key=dedupe_key)  # fmt: skip
        return Appended(entry=entry, duplicate=False)

    async def publish(self, subject: str, data: bytes, msg_id: str) -> PubAck:
        """Stored (replicated) when it returns; sent again with the same id while the stream
        does not answer; JournalError after PUBLISH_DEADLINE."""
        js = self.nats.js
        stream = self.nats.names.ingress_stream
        deadline = time.monotonic() + PUBLISH_DEADLINE
        tries = 0
        while True:
            tries += 1
            try:
                async with self._order:
                    future = await js.publish_async(subject, data, stream=stream,
                                                    headers={MSG_ID: msg_id})  # fmt: skip
                async with asyncio.timeout(PUBLISH_TRY):
                    ack = await future
                if tries > 1:
                    log.info("publish_retried", tries=tries, duplicate=ack.duplicate)
                return ack
            except nats.js.errors.APIError as exc:
                if exc.err_code == 10060:  # expected stream does not match: a config error
                    raise _unavailable(f"the ingress stream refused an event: {exc}") from None
                problem = f"{type(exc).__name__}: {exc.description}"
            except (TimeoutError, nats.errors.Error) as exc:
                problem = type(exc).__name__
            if time.monotonic() > deadline:
                raise _unavailable(f"NATS did not store the event within {PUBLISH_DEADLINE:g} s "
                                   f"({problem})")  # fmt: skip
            log.warning("publish_unacknowledged", tries=tries, problem=problem)
            await asyncio.sleep(min(0.05 * tries, 0.5))

    async def _first(self, seq: int) -> JournalEntry | None:
        """The entry of the event a duplicate's key first accepted (stream sequence `seq`)."""
        try:
            raw = await self.nats.js.get_msg(self.nats.names.ingress_stream, seq)
            envelope = decode_envelope(raw.data or b"")
        except (nats.js.errors.NotFoundError, nats.errors.Error, msgspec.DecodeError):
            return None
        return JournalEntry(
            seq=seq, event=envelope.event, target=envelope.target, state=EntryState.ACCEPTED,
            attempts=0, accepted_at=envelope.accepted_at, dedupe_key=envelope.dedupe_key,
        )  # fmt: skip

    async def claim(self, event_id: str) -> None:
        return None  # a turn in progress is the consumer's in-flight message

    async def complete(self, event_id: str, reply: AgentEvent | None = None) -> None:
        """The reply kept in the `replies` bucket: asked again while the bucket does not
        answer (a leader election), until KEEP_DEADLINE: a node waiting for this reply reads
        it there when the published one was lost."""
        if reply is None:
            return
        deadline = time.monotonic() + KEEP_DEADLINE
        attempt = 0
        while True:
            try:
                await self.nats.replies.put(reply_key(event_id), _encode(reply))
            except (nats.errors.Error, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    log.warning("reply_not_kept", event_id=event_id, error=type(exc).__name__)
                    return
                await asyncio.sleep(backoff.delay(attempt, first=0.1, cap=1.0))
                attempt += 1
                continue
            if attempt:
                log.info("reply_kept", event_id=event_id, tries=attempt + 1)
            return

    async def pending(self, target: str | None = None) -> list[JournalEntry]:
        return []

    async def lookup(self, event_id: str) -> JournalEntry | None:
        """The finished entry with its reply (kept 10 minutes), else None."""
        try:
            entry = await self.nats.replies.get(reply_key(event_id))
            reply = _decode_event(entry.value or b"")
        except (nats.js.errors.KeyNotFoundError, msgspec.DecodeError):
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            raise _unavailable(f"the replies bucket did not answer ({type(exc).__name__})") from exc
        return JournalEntry(seq=0, event=reply, target="", state=EntryState.COMPLETED,
                            attempts=1, accepted_at=0.0, reply=reply)  # fmt: skip

    async def compact(self) -> int:
        return 0  # the stream's max age and the bucket's TTL bound them

    async def close(self) -> None:
        return None
