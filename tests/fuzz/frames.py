"""Hypothesis strategies for hostile frames: real encoded frames, mutated, plus random bytes.

Seeds are frames the daemon really receives (agent -> orchestrator messages on the agents
socket, CLI requests on the control socket). A mutation flips, truncates, inserts or splices
bytes, so most examples get past the first bytes of the decoder before they go wrong. A
message is a multipart list of 0..4 such frames (the right count is 1 from a DEALER), sent from
a socket whose routing id may be missing, random, or a real-looking agent id that is not live.
"""

from __future__ import annotations

from hypothesis import strategies as st

from protocol.codec import encode
from protocol.control import Ping, SendText, StatusQuery
from protocol.events import ReplyTo, Source, SourceKind, new_event
from protocol.messages import (
    Event,
    Heartbeat,
    HeartbeatPayload,
    Hello,
    HelloPayload,
    Ready,
    ReadyPayload,
)

SWARM = "agents"
WORKER = f"agent:worker:{SWARM}:1"
_SOURCE = Source(kind=SourceKind.AGENT, name="worker", instance_key=SWARM)


def agent_seeds() -> list[bytes]:
    event = new_event(
        type="agent.request", input="fuzz", instance_key=SWARM, source=_SOURCE,
        reply_to=ReplyTo(target=f"agent:worker:{SWARM}", correlation_id="c1"),
    )  # fmt: skip
    hello = HelloPayload(pid=1, kind="agent", name="worker", instance_key=SWARM, generation=1)
    return [
        encode(Event(from_=WORKER, to=f"agent:caller:{SWARM}", payload=event)),
        encode(Heartbeat(from_=WORKER, to="orchestrator", payload=HeartbeatPayload(seq=3))),
        encode(Hello(from_=WORKER, to="orchestrator", payload=hello)),
        encode(Ready(from_=WORKER, to="orchestrator", payload=ReadyPayload(pid=1))),
    ]


def control_seeds() -> list[bytes]:
    # no Stop / Restart / Reload / InstanceDelete seeds: a valid one would do its job
    return [
        encode(Ping(request_id="p")),
        encode(StatusQuery(request_id="s")),
        encode(SendText(request_id="t", text="fuzz", agent="worker", wait=False)),
        encode(SendText(request_id="u", text="fuzz", agent="worker", timeout_ms=2000)),
    ]


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "splice"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            other = draw(st.sampled_from(seeds))
            data[at:] = other[draw(st.integers(0, len(other) - 1)) :]
    return bytes(data)


def frame(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(mutated(seeds), st.binary(max_size=256), st.sampled_from([b"", b"\x00"]))


def routing_id() -> st.SearchStrategy[bytes | None]:
    """None: ZMQ picks one. Otherwise random, or an agent id with no live process."""
    ghost = st.sampled_from(
        [b"agent:ghost:agents:1", b"agent:worker:agents:99", b"connector:x:y:1", b"orchestrator"]
    )
    return st.one_of(
        st.none(), st.binary(min_size=1, max_size=32).filter(lambda b: b[0] != 0), ghost
    )


def messages(seeds: list[bytes]) -> st.SearchStrategy[list[list[bytes]]]:
    """A burst of multipart messages; most have one frame, some 0 (skipped), 2, 3 or 4."""
    parts = st.lists(frame(seeds), min_size=1, max_size=4)
    return st.lists(parts, min_size=1, max_size=8)
