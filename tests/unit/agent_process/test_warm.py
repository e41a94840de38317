"""The fork server's warm-up of a child's start steps: pure, and safe on any bundle."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import structlog

from agent_process import preload, resolve, warm, warm_turn
from agent_process.bridge import Bridge
from bundles.loader import load_bundle
from protocol.events import Source, SourceKind
from protocol.messages import Message, TurnOutcome
from tests.unit.agent_process.helpers import launch_for

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "reload" / "two"
pytestmark = pytest.mark.usefixtures("restore_preloaded")


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def no_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fork server must not get an event loop, a thread or an open file: creating or
    setting a loop fails, and afterwards the policy holds the loop it held before (if any)."""

    def refuse(*args: object) -> None:
        raise AssertionError("an event loop was created or set in the fork server's warm-up")

    for name in ("new_event_loop", "set_event_loop", "get_event_loop"):
        monkeypatch.setattr(asyncio, name, refuse)
    local = cast(Any, asyncio.get_event_loop_policy())._local
    loop, threads = getattr(local, "_loop", None), threading.active_count()
    fds = sorted(os.listdir("/proc/self/fd"))
    yield
    assert sorted(os.listdir("/proc/self/fd")) == fds  # nothing left open for a child
    assert asyncio.events._get_running_loop() is None
    assert getattr(local, "_loop", None) is loop
    assert threading.active_count() == threads


@pytest.mark.usefixtures("no_loop")
def test_warming_runs_the_start_steps_and_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    state = tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    preload.remember(bundle, launch_for(bundle, state))
    before = _tree(tmp_path)
    warm.child_start(bundle, launch_for(bundle, state))
    assert _tree(tmp_path) == before  # no instance dir, log or pending call was written
    assert preload.take(root, (), state) is bundle  # the held bundle is still current


def test_an_agent_that_cannot_start_is_left_to_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    yaml = root / "goondan.yaml"
    key = "  model: test\n  apiKey: {valueFrom: {env: WARM_TEST_KEY}}"
    yaml.write_text(yaml.read_text().replace("  model: test", key))
    monkeypatch.setenv("WARM_TEST_KEY", "sk-test")
    state = tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    monkeypatch.delenv("WARM_TEST_KEY")  # gone by the time a child would resolve it
    with pytest.raises(resolve.ConfigProblem):
        resolve.api_key(bundle, bundle.model("scripted"), state)
    warm.child_start(
        bundle, launch_for(bundle, state)
    )  # no exception: the child reports it as start_error


async def _no_send(msg: Message) -> None:
    return None


@pytest.mark.usefixtures("no_loop")
def test_the_warm_turn_completes_without_a_loop_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    inbox = tmp_path / "state" / "agent" / "inbox"
    inbox.mkdir(parents=True)  # an inbox that exists is only looked at
    source = Source(kind=SourceKind.AGENT, name="greeter", instance_key="warm")
    bridge = Bridge(_no_send)
    bridge.bind("agent:greeter:warm:1", "agent:greeter:warm", source)
    before = _tree(tmp_path)
    bound = structlog.contextvars.get_contextvars()
    result = warm_turn.turn("agent:greeter:warm:1", source, inbox, bridge)
    assert result is not None
    assert (result.outcome, result.text, result.steps) == (TurnOutcome.COMPLETED, "warm: hello", 1)
    assert _tree(tmp_path) == before  # no message, runtime event or base file was written
    assert structlog.contextvars.get_contextvars() == bound  # the turn's span did not leak
