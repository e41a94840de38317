"""The edge limits of the HTTP connectors, loaded by path as the connector host does: which
connection makes room for a new one (`_admission.py`), the request rates (`_ratelimit.py`)
and the api connector's `sharedInstances` setting. Driven through a real server in
tests/integration/test_attacks_api_edge.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from agent_process.loading import load_entry

from .conftest import BASE
from .test_api_edge import Ctx

api: Any = load_entry("./connectors/api.py", BASE)
Admission = api.http.Admission
Rates = api.ratelimit.Rates


@dataclass(eq=False)
class Conn:
    busy: bool = False
    evicted: bool = False

    def idle(self) -> bool:
        return not self.busy

    def evict(self) -> None:
        self.evicted = True


def test_a_new_connection_closes_the_oldest_idle_one_of_its_client_first() -> None:
    room = Admission(max_connections=3, max_per_client=2)
    a1, a2, b1 = Conn(busy=True), Conn(), Conn()
    assert room.admit(a1, "a") and room.admit(a2, "a") and room.admit(b1, "b")
    a3 = Conn()
    assert room.admit(a3, "a")  # a is at its limit: its idle a2 goes, not b's
    assert (a1.evicted, a2.evicted, b1.evicted) == (False, True, False)
    c1 = Conn()
    assert room.admit(c1, "c")  # the server is full: the oldest idle one goes (b1)
    assert b1.evicted and len(room) == 3
    room.leave(a2)  # an evicted connection's own close: no double count
    assert len(room) == 3


def test_when_every_connection_has_a_request_in_progress_a_new_one_is_refused() -> None:
    room = Admission(max_connections=2, max_per_client=5)
    busy = [Conn(busy=True), Conn(busy=True)]
    assert all(room.admit(c, str(i)) for i, c in enumerate(busy))
    assert not room.admit(Conn(), "x")
    room.leave(busy[0])
    assert room.admit(Conn(), "x")


def test_a_rate_allows_its_burst_then_says_when_to_come_back() -> None:
    now = [100.0]
    rates = Rates(3, clock=lambda: now[0])
    assert [rates.wait("t") for _ in range(3)] == [0, 0, 0]
    assert rates.wait("t") == 20  # one request every 20 s at 3 a minute
    assert rates.wait("u") == 0  # each client has its own bucket
    now[0] += 20
    assert rates.wait("t") == 0
    assert Rates(0).wait("t") == 0  # 0: no limit


def test_shared_instances_is_true_or_false_and_nothing_else() -> None:
    assert api.Api(Ctx(config={"tokens": "t", "sharedInstances": "true"})).edge.shared
    assert not api.Api(Ctx(config={"tokens": "t"})).edge.shared
    with pytest.raises(RuntimeError, match="sharedInstances"):
        api.Api(Ctx(config={"tokens": "t", "sharedInstances": "yes"}))
