"""The fork server builds the built-in tools' registry entries; children take them as built."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from agent_process import prebuilt_tools, resolve
from agent_process.forkprep import shared
from agent_process.loading import module_name
from agent_process.registry import ToolEntry, ToolRegistry
from agent_process.tool_loader import load_tool_resource
from bundles.kinds import BASE_PACKAGE, Kind
from bundles.loader import load_bundle
from bundles.model import Bundle

WORKSPACE = Path(__file__).resolve().parents[3] / "bundles" / "examples" / "workspace"
USER_TOOL = """
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
"""


pytestmark = pytest.mark.usefixtures("restore_preloaded")


def _bundle(tmp_path: Path) -> tuple[Bundle, Path]:
    root = tmp_path / "bundle"
    root.mkdir()
    text = (WORKSPACE / "goondan.yaml").read_text()
    (root / "goondan.yaml").write_text(text + USER_TOOL)
    (root / "mine.py").write_text("handlers = {'go': lambda ctx, input: {}}\n")
    state = tmp_path / "state"
    return load_bundle(root, state_root=state), state


def _operator_tools(bundle: Bundle) -> list[list[ToolEntry]]:
    agent = resolve.agent(bundle, "operator")
    return [list(load_tool_resource(t)) for t in resolve.tools(bundle, agent)]


def _shape(entries: list[list[ToolEntry]]) -> list[tuple[object, ...]]:
    fields = ("name", "handler", "is_async", "origin", "description", "parameters")
    more = ("timeout_ms", "error_message_limit", "config", "visible")
    return [tuple(getattr(e, f) for f in (*fields, *more)) for group in entries for e in group]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_children_take_the_entries_the_fork_server_built(tmp_path: Path) -> None:
    bundle, _ = _bundle(tmp_path)
    shared.build(bundle)
    taken = _operator_tools(bundle)
    assert all(e.validator is not None for group in taken for e in group)  # compiled once
    assert _operator_tools(bundle)[0][0] is taken[0][0]  # the same objects each time
    prebuilt_tools.clear()
    fresh = _operator_tools(bundle)  # what a child loads itself
    assert _shape(taken) == _shape(fresh)
    assert [e.validator for g in fresh for e in g] == [None] * len(_shape(fresh))
    registry = ToolRegistry.build(taken)
    assert registry.names == ToolRegistry.build(fresh).names


def test_building_imports_no_user_tool_and_leaves_nothing_behind(tmp_path: Path) -> None:
    bundle, _ = _bundle(tmp_path)
    before, threads = _tree(tmp_path), threading.active_count()
    shared.build(bundle)
    mine = module_name((tmp_path / "bundle" / "mine.py").resolve())
    assert mine not in sys.modules  # its import-time code runs in the agent's own process
    assert [r.name for r, _, _ in prebuilt_tools._held.values()] == [
        r.name for r in bundle.of_kind(Kind.TOOL) if r.package == BASE_PACKAGE
    ]
    assert _tree(tmp_path) == before and threading.active_count() == threads


def test_another_bundle_object_builds_its_own(tmp_path: Path) -> None:
    bundle, state = _bundle(tmp_path)
    shared.build(bundle)
    again = load_bundle(bundle.path, state_root=state)  # e.g. reloaded after an edit
    bash = again.tool("bash")
    assert prebuilt_tools.take(bash) is None
    assert [e.validator for e in load_tool_resource(bash)] == [None, None]


def test_a_missing_entry_file_is_loaded_and_reported_by_the_child(tmp_path: Path) -> None:
    bundle, _ = _bundle(tmp_path)
    shared.build(bundle)
    bash = bundle.tool("bash")
    entry_file = prebuilt_tools._held[id(bash)][1]
    prebuilt_tools.keep(bash, str(tmp_path / "gone.py"), [])
    assert prebuilt_tools.take(bash) is None  # falls back to the child's own load
    prebuilt_tools.keep(bash, entry_file, [])
    assert prebuilt_tools.take(bash) == []


def test_a_taken_list_is_the_caller_s_own(tmp_path: Path) -> None:
    bundle, _ = _bundle(tmp_path)
    shared.build(bundle)
    first = prebuilt_tools.take(bundle.tool("bash"))
    assert first is not None
    first.clear()  # assemble extends it with MCP entries
    assert prebuilt_tools.take(bundle.tool("bash"))
