"""Connections of a swarm (one always-up connector process each), the reconciler's view of
them, and the routing of a connector's events (against a fake broker)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import MappingProxyType

import pytest

from bundles.loader import load_bundle
from orchestrator.ingress.connections import Connections
from orchestrator.ingress.direct import DirectIngress
from orchestrator.supervision.liveness import KillWedged
from orchestrator.supervision.reconciler import Start, plan
from orchestrator.supervision.settings import Settings
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessEntry
from orchestrator.swarm.rules import CompiledRule, Ingress, route
from orchestrator.swarm.view import Connection, CurrentSwarm, SwarmView, swarm_connections
from protocol.errors import ErrorCode
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event
from protocol.ids import Address, ProcessKind, agent_address
from protocol.messages import Event
from tests.unit.orchestrator.fakes import FakeBroker, FakeTargets

S = ProcessStatus
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "connectors"
HOOK = Address(kind=ProcessKind.CONNECTOR, name="hook", instance_key="webhook")


@pytest.fixture
def ports(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOOK_PORT", "SIGNED_PORT", "SIGNED_SECRET"):
        monkeypatch.setenv(name, "0")


def test_every_connection_of_the_swarm_gets_one_connector_address(
    ports: None, tmp_path: Path
) -> None:
    bundle = load_bundle(FIXTURE, state_root=tmp_path)
    found = {c.name: c for c in swarm_connections(bundle, bundle.swarm())}
    assert set(found) == {"hook", "signed"}
    assert found["hook"].address == HOOK
    assert str(found["signed"].address) == "connector:signed:webhook"
    hook = found["hook"].ingress
    ticket = route(hook, "ticket", {"user": "ann"})
    assert ticket is not None
    assert (ticket.agent, ticket.instance_key, ticket.reply) == ("front", "user:ann", True)
    notify = route(hook, "notify", {})
    assert notify is not None
    assert (notify.agent, notify.instance_key, notify.reply) == ("ops", "notices", False)
    assert route(hook, "unknown", {}) is None
    signed = route(found["signed"].ingress, "anything", {})  # no rules: the entry agent
    assert signed is not None
    assert (signed.agent, signed.instance_key) == ("front", "hooks")


def test_a_stopped_connector_is_started_without_queued_events() -> None:
    entry = ProcessEntry(address=HOOK, status=S.TERMINATED)
    assert plan([entry], {}, 10.0, Settings()) == [Start(HOOK)]
    held = ProcessEntry(address=HOOK, status=S.TERMINATED, retry_at=20.0)
    assert plan([held], {}, 10.0, Settings()) == []
    assert plan([held], {}, 20.0, Settings()) == [Start(HOOK)]


def test_an_idle_connector_is_never_stopped_for_idleness_but_a_wedged_one_is_killed() -> None:
    settings = Settings(idle_timeout=1.0, heartbeat_timeout=10.0)
    idle = ProcessEntry(address=HOOK, status=S.IDLE, changed_at=0.0, last_seen=95.0)
    assert plan([idle], {}, 100.0, settings) == []
    wedged = ProcessEntry(address=HOOK, status=S.IDLE, changed_at=0.0, last_seen=0.0)
    assert plan([wedged], {}, 100.0, settings) == [KillWedged(HOOK, silent_for=100.0)]


# -- routing a connector's events, against a fake broker ---------------------------------------

RULES = (
    CompiledRule(agent="front", event="ticket", key_property="user", key_prefix="user:"),
    CompiledRule(agent="ops", event="notify", instance_key="notices", reply=False),
)


def view(*connections: Connection) -> SwarmView:
    return SwarmView(
        name="hooks", entry_agent="front", default_instance_key="hooks", members=("front", "ops"),
        connections=MappingProxyType({c.address: c for c in connections}),
    )  # fmt: skip


HOOK_VIEW = view(Connection("hook", "webhook", HOOK, Ingress("hooks", "front", "hooks", RULES)))


def connector_event(type: str, reply: bool = True, **metadata: object) -> AgentEvent:
    source = Source(kind=SourceKind.CONNECTOR, name="hook")
    reply_to = ReplyTo(target=str(HOOK), correlation_id="c1") if reply else None
    return new_event(type=type, input="hi", instance_key="", source=source, reply_to=reply_to,
                     metadata=dict(metadata))  # fmt: skip


async def routed(event: AgentEvent, current: CurrentSwarm | None = None) -> FakeBroker:
    broker = FakeBroker()
    connections = Connections(broker, current or CurrentSwarm(HOOK_VIEW), FakeTargets().ensure,
                              DirectIngress(broker.submit))  # fmt: skip
    connections.on_event(ProcessEntry(address=HOOK, status=S.IDLE, generation=1), event)
    async with asyncio.timeout(5):
        await connections.settled()
    return broker


def answers(broker: FakeBroker) -> list[AgentEvent]:
    events = [msg.payload for _, msg in broker.sent if isinstance(msg, Event)]
    assert all(e.in_reply_to == "c1" for e in events)
    return events


async def test_an_event_with_a_reply_rule_keeps_its_reply_to_and_gets_no_answer_yet() -> None:
    event = connector_event("ticket", user="ann")
    broker = await routed(event)
    [(submitted, target)] = broker.submitted
    assert target == agent_address("front", "user:ann")
    assert (submitted.id, submitted.instance_key, submitted.reply_to) == (
        event.id,
        "user:ann",
        event.reply_to,
    )
    assert broker.sent == []  # the agent's reply is routed back by correlation id


async def test_an_event_without_a_reply_rule_is_accepted_at_once() -> None:
    event = connector_event("notify")
    broker = await routed(event)
    [(submitted, target)] = broker.submitted
    assert (target, submitted.reply_to) == (agent_address("ops", "notices"), None)
    [accepted] = answers(broker)
    assert accepted.metadata["accepted"] is True
    assert accepted.metadata["eventId"] == event.id


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (connector_event("unknown"), ErrorCode.E_CONNECTOR_NO_ROUTE),
        (connector_event("ticket", user="bad\nkey"), ErrorCode.E_AGENT_INVALID_INSTANCE_KEY),
    ],
)
async def test_an_event_no_rule_can_route_is_answered_with_a_coded_error(
    event: AgentEvent, code: ErrorCode
) -> None:
    broker = await routed(event)
    assert broker.submitted == []
    [answer] = answers(broker)
    assert answer.error is not None and answer.error.code == code


async def test_a_rejected_event_without_reply_to_is_only_logged() -> None:
    broker = await routed(connector_event("unknown", reply=False))
    assert (broker.submitted, broker.sent) == ([], [])


async def test_routing_and_start_all_read_the_current_view() -> None:
    """A reload swaps the view: a Connection it removed no longer routes, a new one starts."""
    current = CurrentSwarm(HOOK_VIEW)
    other = Address(kind=ProcessKind.CONNECTOR, name="other", instance_key="webhook")
    current.swap(view(Connection("other", "webhook", other, Ingress("hooks", "front", "hooks"))))
    broker = await routed(connector_event("ticket", user="ann"), current)
    [answer] = answers(broker)
    assert answer.error is not None and answer.error.code == ErrorCode.E_CONNECTOR_NO_ROUTE
    targets = FakeTargets()
    broker = FakeBroker()
    Connections(broker, current, targets.ensure, DirectIngress(broker.submit)).start_all()
    assert targets.ensured == [other]


async def test_the_routed_line_is_written_once_the_event_is_on_its_way() -> None:
    """`ingress_routed` (~20 µs: a line to the file and one to the console) is not on the path
    of a connector's event to its agent: it follows the submit."""
    from structlog.testing import capture_logs

    broker = FakeBroker()
    seen_at_submit: list[list[str]] = []

    def submit(event: AgentEvent, target: Address, waiter: object = None) -> None:
        seen_at_submit.append([e["event"] for e in logs])
        broker.submit(event, target)

    connections = Connections(broker, CurrentSwarm(HOOK_VIEW), FakeTargets().ensure,
                              DirectIngress(submit))  # fmt: skip
    event = connector_event("ticket", user="ann")
    with capture_logs() as logs:
        connections.on_event(ProcessEntry(address=HOOK, status=S.IDLE, generation=1), event)
        async with asyncio.timeout(5):
            await connections.settled()
    assert seen_at_submit == [[]]
    [line] = [e for e in logs if e["event"] == "ingress_routed"]
    assert (line["connection"], line["event_id"], line["target"], line["rule"], line["reply"]) == (
        "hook", event.id, "agent:front:user:ann", 0, True)  # fmt: skip
