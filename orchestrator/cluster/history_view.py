"""An instance's conversation for a reader, from the swarm's history stream (ARCHITECTURE.md
§15): `goondan instance show` on any node shows an instance wherever it runs or ran.

The agents of an instance are the stream's subjects `goondan.<swarm>.h.<agent>.<key>` that have
a message (one snapshot of the stream info, as `kvkeys.py` lists a bucket). Each agent's events
after the sequence the reader already has are read with an ordered consumer on its subject, up
to the subject's last sequence when asked, and at most REPLY_BYTES per reply: `more` says to ask
again from `lastSeq`. Nothing is written: the node's own cache files are untouched.
"""

from __future__ import annotations

import contextlib

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from orchestrator.cluster.kvkeys import stream_subjects
from orchestrator.cluster.link import API_TIMEOUT, Nats
from orchestrator.cluster.names import token, untoken
from protocol.jsontypes import JsonObject

REPLY_BYTES = 2 * 1024 * 1024
READ_WAIT = 5.0


class NoHistory(Exception):
    """The swarm's history stream has no event of the instance (or of that agent of it)."""


async def instance_history(
    nats_: Nats, key: str, agent: str | None, after: dict[str, int]
) -> JsonObject:
    names = nats_.names
    agents = token(agent) if agent is not None else "*"
    wanted = f"{names.prefix}.h.{agents}.{token(key)}"
    subjects = await stream_subjects(nats_.nc, names.history_stream, wanted, API_TIMEOUT)
    if not subjects:
        raise NoHistory(key)
    budget = REPLY_BYTES
    found: JsonObject = {}
    for subject in subjects:
        name = untoken(subject.split(".")[-2])
        start = after.get(name, 0)
        lines, last, more = await _read(nats_, subject, start, budget)
        budget -= sum(len(line) for line in lines)
        found[name] = {"lines": lines, "lastSeq": last, "more": more}
    return {"agents": found}


async def _read(nats_: Nats, subject: str, start: int, budget: int) -> tuple[list[str], int, bool]:
    """(lines after `start`, the last sequence read, whether more were left for another reply)."""
    js, stream = nats_.js, nats_.names.history_stream
    try:
        last = int((await js.get_last_msg(stream, subject, direct=True)).seq or 0)
    except nats.js.errors.NotFoundError:
        return [], start, False
    if last <= start:
        return [], start, False
    if budget <= 0:
        return [], start, True
    chunks, read = await read_subject(js, stream, subject, start, last, budget)
    return [chunk.decode(errors="replace") for chunk in chunks], read, read < last


async def read_subject(
    js: JetStreamContext, stream: str, subject: str, after: int, last: int,
    budget: int | None = None,
) -> tuple[list[bytes], int]:  # fmt: skip
    """The messages of `subject` after stream sequence `after`, up to `last` (or to the first
    that brings them past `budget` bytes); and the sequence of the last one read. Also how an
    activation rebuilds its cache (`history.py`)."""
    config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True, config=config)
    chunks: list[bytes] = []
    read = after
    try:
        while read < last:
            msg = await sub.next_msg(timeout=READ_WAIT)
            chunks.append(msg.data)
            read = msg.metadata.sequence.stream
            if budget is not None:
                budget -= len(msg.data)
                if budget <= 0:
                    break
    finally:
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
    return chunks, read
