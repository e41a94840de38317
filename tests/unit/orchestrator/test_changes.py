"""The change planner: one edit of a copied bundle -> exactly the processes that restart."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bundles.loader import load_bundle
from orchestrator.reload.changes import describe, plan_changes, snapshot

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "reload" / "planner"
Edit = Callable[[Path], None]


def replace(name: str, old: str, new: str) -> Edit:
    def edit(root: Path) -> None:
        path = root / name
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} not in {name}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")

    return edit


def write(name: str, text: str) -> Edit:
    def edit(root: Path) -> None:
        (root / name).write_text(text, encoding="utf-8")

    return edit


def append(name: str, text: str) -> Edit:
    def edit(root: Path) -> None:
        with (root / name).open("a", encoding="utf-8") as f:
            f.write(text)

    return edit


Y = "goondan.yaml"
BOTH = {"hook-to-s", "hook-b"}
CASES: list[tuple[str, Edit, set[str], set[str], set[str]]] = [
    # (what, edit, agents restarted, agents removed, connections whose connector restarts)
    ("nothing", lambda root: None, set(), set(), set()),
    ("prompt file of a", append("prompts/a.md", "Be brief.\n"), {"a"}, set(), set()),
    ("inline prompt of b", replace(Y, "You are b.", "You are B."), {"b"}, set(), set()),
    (
        "tool entry t1 (a uses it; c is another swarm)",
        append("t1.py", "X = 1\n"),
        {"a"},
        set(),
        set(),
    ),
    (
        "tool resource t2",
        replace(
            Y, "./t2.py\n  exports: [{name: go}]", "./t2.py\n  exports: [{name: go}, {name: stop}]"
        ),
        {"b"},
        set(),
        set(),
    ),
    ("extension entry e1", append("e1.py", "Y = 2\n"), {"a"}, set(), set()),
    ("model m2 (only b uses it)", replace(Y, "model: two", "model: deux"), {"b"}, set(), set()),
    (
        "model m1 (a here, c in the other swarm)",
        replace(Y, "model: one", "model: un"),
        {"a"},
        set(),
        set(),
    ),
    (
        "our swarm: everyone",
        replace(Y, "entryAgent: Agent/a", "entryAgent: Agent/b"),
        {"a", "b"},
        set(),
        BOTH,
    ),
    (
        "the other swarm: nobody",
        replace(
            Y,
            "entryAgent: Agent/c\n  agents: [Agent/c]",
            "entryAgent: Agent/c\n  agents: [Agent/c, Agent/a]",
        ),
        set(),
        set(),
        set(),
    ),
    (
        "agent removed from the swarm",
        replace(Y, "agents: [Agent/a, Agent/b]", "agents: [Agent/a]"),
        {"a"},
        {"b"},
        BOTH,
    ),
    ("connector entry", append("hook.py", "Z = 3\n"), set(), set(), BOTH),
    (
        "connection rules",
        replace(Y, "      - route: {}", "      - route: {agentRef: Agent/b}"),
        set(),
        set(),
        {"hook-to-s"},
    ),
    (
        "a new .env value: everyone",
        write(".env", "A=1\n"),
        {"a", "b"},
        set(),
        BOTH,
    ),
    (
        "tool removed from an agent",
        replace(Y, "  tools: [Tool/t1]\n  extensions", "  tools: []\n  extensions"),
        {"a"},
        set(),
        set(),
    ),
]


@pytest.mark.parametrize(
    ("edit", "agents", "removed", "connections"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_plan(
    tmp_path: Path, edit: Edit, agents: set[str], removed: set[str], connections: set[str]
) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    old = snapshot(load_bundle(root))
    edit(root)
    new = snapshot(load_bundle(root))
    plan = plan_changes(old, new, "s")
    assert (set(plan.agents), set(plan.removed_agents), set(plan.connections)) == (
        agents,
        removed,
        connections,
    ), describe(plan)
    assert plan.empty == (not (agents or removed or connections))
    for agent in agents:
        assert plan.why[agent], f"no reason recorded for {agent}"


def test_reasons_name_the_changed_resource(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    old = snapshot(load_bundle(root))
    append("t1.py", "X = 1\n")(root)
    plan = plan_changes(old, snapshot(load_bundle(root)), "s")
    assert plan.changed == ("Tool/t1",)
    assert plan.why == {"a": ("Tool/t1",)}


def test_a_removed_connection_is_stopped_not_restarted(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    old = snapshot(load_bundle(root))
    text = (root / Y).read_text(encoding="utf-8")
    (root / Y).write_text(
        text.split("---\napiVersion: goondan.ai/v1\nkind: Connection\nmetadata: {name: hook-b}")[0]
    )
    plan = plan_changes(old, snapshot(load_bundle(root)), "s")
    assert (set(plan.connections), set(plan.removed_connections)) == (set(), {"hook-b"})
    assert plan.agents == frozenset() and not plan.empty
