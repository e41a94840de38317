"""Routing `delta` frames: only from the process serving the request, to the control client
watching it or to a connector requester that reads them; everything else is dropped."""

from __future__ import annotations

from orchestrator.routing.deltas import DeltaRoutes
from orchestrator.supervision.mailboxes import OpenRequest, RequestBook
from orchestrator.supervision.table import ProcessEntry
from protocol.ids import Address, parse_address
from protocol.messages import Delta, Message
from protocol.stream import DeltaKind, StreamDelta

WORKER = parse_address("agent:worker:k")
OTHER = parse_address("agent:other:k")
CONNECTOR = parse_address("connector:tg:telegram")


def entry(address: Address, protocol: int = 2) -> ProcessEntry:
    return ProcessEntry(address=address, generation=1, protocol=protocol)


class Routes:
    def __init__(self, requester: str, connector_protocol: int = 2) -> None:
        self.book = RequestBook()
        self.book.open(OpenRequest("c1", requester, WORKER, "e1"))
        self.connector = entry(CONNECTOR, connector_protocol)
        self.sent: list[tuple[ProcessEntry, Message]] = []
        self.routes = DeltaRoutes(self.book, self._ready, self._send, parse_address)

    def _ready(self, address: Address) -> ProcessEntry | None:
        return self.connector if address == CONNECTOR else None

    def _send(self, to: ProcessEntry, msg: Message) -> bool:
        self.sent.append((to, msg))
        return True


def delta(correlation_id: str = "c1") -> StreamDelta:
    return StreamDelta(correlation_id=correlation_id, seq=0, kind=DeltaKind.TEXT, text="hi")


def test_a_watcher_gets_the_deltas_of_its_request_from_the_serving_process() -> None:
    r = Routes("control")
    seen: list[StreamDelta] = []
    r.routes.watch("c1", seen.append)
    r.routes.route(entry(WORKER), delta())
    assert seen == [delta()] and r.routes.passed == 1
    r.routes.unwatch("c1")
    r.routes.route(entry(WORKER), delta())
    assert len(seen) == 1 and r.routes.dropped == 1  # nobody watches: dropped


def test_another_process_cannot_write_into_the_stream() -> None:
    r = Routes("control")
    seen: list[StreamDelta] = []
    r.routes.watch("c1", seen.append)
    r.routes.route(entry(OTHER), delta())
    r.routes.route(entry(WORKER), delta("unknown"))
    assert seen == [] and r.routes.foreign == 1 and r.routes.dropped == 1


def test_a_connector_requester_gets_delta_frames_only_if_it_reads_them() -> None:
    r = Routes(str(CONNECTOR))
    r.routes.route(entry(WORKER), delta())
    [(to, msg)] = r.sent
    assert to is r.connector and isinstance(msg, Delta) and msg.payload == delta()
    old = Routes(str(CONNECTOR), connector_protocol=1)  # a connector host before `delta`
    old.routes.route(entry(WORKER), delta())
    assert old.sent == [] and old.routes.dropped == 1


def test_an_agent_requester_gets_no_deltas() -> None:
    r = Routes(str(parse_address("agent:caller:k")))
    r.routes.route(entry(WORKER), delta())
    assert r.sent == [] and r.routes.dropped == 1
