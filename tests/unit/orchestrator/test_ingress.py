from __future__ import annotations

from typing import Any

import pytest

from orchestrator.swarm.rules import (
    CompiledRule,
    Ingress,
    Route,
    lookup,
    route,
    route_to,
    why_unrouted,
)

RULES = (
    CompiledRule(agent="triage", event="message", properties={"chat.type": "group"},
                 key_property="chat.id", key_prefix="tg:"),
    CompiledRule(agent="coder", event="message", instance_key="dm", reply=False),
    CompiledRule(agent="ops", properties={"kind": "alert"}),
)  # fmt: skip
INGRESS = Ingress(swarm="s", entry_agent="entry", default_key="s", rules=RULES)


@pytest.mark.parametrize(
    ("event", "props", "expected"),
    [
        ("message", {"chat": {"type": "group", "id": 42}}, Route("triage", "tg:42", True, 0)),
        # the first rule fits but has no chat.id: the next rule takes it
        ("message", {"chat": {"type": "group"}}, Route("coder", "dm", False, 1)),
        ("message", {"chat": {"type": "private", "id": 7}}, Route("coder", "dm", False, 1)),
        ("webhook", {"kind": "alert"}, Route("ops", "s", True, 2)),
        ("webhook", {"kind": "other"}, None),
        (
            "message",
            {"chat": {"type": "group", "id": {"nested": 1}}},
            Route("coder", "dm", False, 1),
        ),
    ],
)
def test_first_fitting_rule_wins(event: str, props: dict[str, Any], expected: Route | None) -> None:
    assert route(INGRESS, event, props) == expected


def test_a_missing_routing_property_falls_back_to_the_swarm_key() -> None:
    """The webhook example's one rule routes by `instanceKey`: a POST without it gave
    E_CONNECTOR_NO_ROUTE although the rule matched. No later rule takes it: the first rule
    that fitted routes it to the Swarm's instanceKey."""
    one = Ingress(swarm="s", entry_agent="entry", default_key="s", rules=(
        CompiledRule(agent="op", event="message", key_property="instanceKey"),))  # fmt: skip
    assert route(one, "message", {}) == Route("op", "s", True, 0)
    assert route(one, "message", {"instanceKey": "me"}) == Route("op", "me", True, 0)
    assert route(one, "other", {}) is None


def test_an_unrouted_event_is_told_what_the_rules_want() -> None:
    text = why_unrouted(INGRESS, "webhook", {"kind": "other"})
    assert "event 'message' and chat.type='group'" in text and "kind='alert'" in text
    assert "properties: kind" in text


def test_a_connection_without_rules_goes_to_the_entry_agent_and_swarm_key() -> None:
    plain = Ingress(swarm="s", entry_agent="entry", default_key="main")
    assert route(plain, "anything", {}) == Route("entry", "main", True, -1)


def test_lookup_follows_dotted_paths_only_through_mappings() -> None:
    props = {"a": {"b": [1, 2]}, "c": 0}
    assert lookup(props, "a.b") == [1, 2]
    assert lookup(props, "c") == 0
    sentinel = lookup(props, "a.b.c")
    assert sentinel is lookup(props, "missing")


def test_a_connection_of_a_real_bundle_compiles_to_agent_names_and_the_swarm_key() -> None:
    from pathlib import Path

    from bundles.loader import load_bundle
    from orchestrator.swarm.rules import compile_connection

    root = Path(__file__).resolve().parents[2] / "fixtures" / "integration" / "ingress"
    bundle = load_bundle(root)
    [connection] = bundle.connections()
    ingress = compile_connection(bundle, connection)
    assert (ingress.swarm, ingress.entry_agent, ingress.default_key) == ("desk", "front", "shared")
    assert route(ingress, "alert", {"service": "db"}) == Route("ops", "svc:db", True, 0)
    assert route(ingress, "alert", {}) == Route("front", "shared", True, 1)
    assert route(ingress, "other", {}) == Route("front", "shared", True, 1)


def test_a_connector_may_address_any_agent_of_a_connection_without_rules() -> None:
    """The `api` connector names the agent (model) and instance itself."""
    plain = Ingress(swarm="s", entry_agent="entry", default_key="main",
                    agents=frozenset({"entry", "coder"}))  # fmt: skip
    assert route_to(plain, "chat", {}, "coder", "u1") == Route("coder", "u1", True, -1)
    assert route_to(plain, "chat", {}, "stranger", "u1") is None


def test_with_rules_an_addressed_agent_needs_a_fitting_rule_that_routes_to_it() -> None:
    ruled = Ingress(swarm="s", entry_agent="entry", default_key="s", rules=RULES,
                    agents=frozenset({"triage", "coder", "ops"}))  # fmt: skip
    assert route_to(ruled, "message", {}, "coder", "k") == Route("coder", "k", False, 1)
    assert route_to(ruled, "webhook", {"kind": "alert"}, "ops", "k") == Route("ops", "k", True, 2)
    assert route_to(ruled, "webhook", {}, "ops", "k") is None  # its rule does not fit
    assert route_to(ruled, "message", {}, "ops", "k") is None  # no rule to ops fits
