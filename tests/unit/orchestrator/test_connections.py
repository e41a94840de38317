"""Connections of a swarm (one always-up connector process each) and the reconciler's view."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundles.loader import load_bundle
from orchestrator.ingress import route
from orchestrator.reconciler import KillWedged, Start, plan
from orchestrator.settings import Settings
from orchestrator.states import ProcessStatus
from orchestrator.swarm import swarm_connections
from orchestrator.table import ProcessEntry
from protocol.ids import Address, ProcessKind

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
