"""The fork server's preparation: the child's real start and turn, and nothing left behind."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import structlog

from agent_process import child, forkprep, preload, resolve
from agent_process.forkprep import rehearsal, standin
from bundles.loader import load_bundle
from protocol.ids import parse_process_id
from protocol.launch import ChildLaunch, encode_launch
from tests.unit.agent_process.helpers import launch_for

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "reload" / "two"
WORKSPACE = Path(__file__).resolve().parents[3] / "bundles" / "examples" / "workspace"
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
    bound = structlog.contextvars.get_contextvars()
    yield
    assert sorted(os.listdir("/proc/self/fd")) == fds  # nothing left open for a child
    assert asyncio.events._get_running_loop() is None
    assert getattr(local, "_loop", None) is loop
    assert threading.active_count() == threads
    assert structlog.contextvars.get_contextvars() == bound  # no run's log context stayed


def _copy(tmp_path: Path, source: Path = FIXTURE) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(source, root)
    return root


@pytest.mark.usefixtures("no_loop")
@pytest.mark.parametrize("source", [FIXTURE, WORKSPACE], ids=["two-agents", "base-tools"])
def test_preparing_rehearses_every_start_and_turn_and_leaves_nothing_behind(
    tmp_path: Path, source: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root, state = _copy(tmp_path, source), tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    launch = launch_for(bundle, state)
    forkprep.preload(bundle, launch)
    before = _tree(tmp_path)
    done = rehearsal.rehearse(standin.bundle(bundle), launch, turns=True)
    assert (done.starts, done.turns) == (rehearsal.RUNS, rehearsal.TURNS)
    assert _tree(tmp_path) == before  # no instance dir, log, message or pending call
    assert preload.take(root, (), state) is bundle  # the held bundle is still current
    assert capfd.readouterr() == ("", "")  # the fork server's output is the daemon's


def test_a_rehearsal_is_the_child_s_own_frames(tmp_path: Path) -> None:
    """hello, ready; then for the event: processing, the reply, the usage report of its last
    model call, idle (as a real child)."""
    root, state = _copy(tmp_path), tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    pid = parse_process_id("agent:alpha:rehearsal:1")
    text = encode_launch(ChildLaunch(process=pid, settings=launch_for(bundle, state)))
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        factory = functools.partial(child.create_runtime, bundle=standin.bundle(bundle), sink=sink)
        sent = rehearsal._run(text, factory, True)
    finally:
        os.close(sink)
    assert sent == ["Hello", "Ready", "Status", "Event", "Call", "Status"]


def test_an_agent_that_cannot_start_is_left_to_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its model key is gone and its prompt file too: the child will report that as
    start_error; its stand-in still starts (scripted model, no prompt) and nothing is raised."""
    root, state = _copy(tmp_path), tmp_path / "state"
    yaml = root / "goondan.yaml"
    key = "  model: test\n  apiKey: {valueFrom: {env: WARM_TEST_KEY}}"
    yaml.write_text(yaml.read_text().replace("  model: test", key))
    monkeypatch.setenv("WARM_TEST_KEY", "sk-test")
    bundle = load_bundle(root, state_root=state)
    monkeypatch.delenv("WARM_TEST_KEY")  # gone by the time a child would resolve it
    (root / "prompts" / "alpha.md").unlink()
    with pytest.raises(resolve.ConfigProblem):
        resolve.api_key(bundle, bundle.model("scripted"), state)
    with pytest.raises(resolve.ConfigProblem):
        resolve.system_prompt(bundle, bundle.agent("alpha"))
    done = rehearsal.rehearse(standin.bundle(bundle), launch_for(bundle, state), turns=True)
    assert (done.starts, done.turns) == (rehearsal.RUNS, rehearsal.TURNS)


USER_CODE = """
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: mine
spec:
  entry: ./mine.py
  exports:
    - name: go
      parameters: {type: object}
---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: ext
spec:
  entry: ./ext.py
"""


def test_stand_ins_keep_the_built_in_tools_and_drop_user_code(tmp_path: Path) -> None:
    root, state = _copy(tmp_path, WORKSPACE), tmp_path / "state"
    yaml = root / "goondan.yaml"
    uses = '    - ref: {kind: Tool, name: file-system, package: "@goondan/base"}\n'
    more = uses + "    - Tool/mine\n  extensions: [Extension/ext]\n"
    yaml.write_text(yaml.read_text().replace(uses, more) + USER_CODE)
    (root / "mine.py").write_text("handlers = {'go': lambda ctx, input: {}}\n")
    (root / "ext.py").write_text("def register(api): pass\n")
    bundle = load_bundle(root, state_root=state)
    forkprep.preload(bundle, launch_for(bundle, state))  # builds the built-in tools' entries
    stand_in = standin.bundle(bundle)
    real, other = bundle.agent("operator"), stand_in.agent("operator")
    assert [t.name for t in resolve.tools(bundle, real)] == ["bash", "file-system", "mine"]
    assert [t.name for t in resolve.tools(stand_in, other)] == ["bash", "file-system"]
    assert [e.name for e in resolve.extensions(bundle, real)] == ["ext"]
    assert resolve.extensions(stand_in, other) == []
    assert resolve.model(stand_in, other).package == standin.PACKAGE
    assert bundle.agent("operator") is real  # the real bundle is not changed
