"""Shared helpers: load built-in tool files BY PATH (as the agent process does) and a context.

`bundles/base` is data to the daemon, not a package; importing it as `bundles.base.tools.x`
would hide bugs in how the files load their helpers, so every test goes through
`importlib.util.spec_from_file_location` like the runtime.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import structlog
import yaml

from bundles.sdk import ToolContext
from tests.unit.agent_process import builders

if TYPE_CHECKING:
    from .fake_chat_api import FakeApi

BASE = Path(__file__).resolve().parents[3] / "bundles" / "base"


def load_tool(entry: str) -> ModuleType:
    """Load `bundles/base/<entry>` under a private module name, as the runtime will.

    Deliberately not registered in sys.modules: entry files must not depend on it.
    """
    path = BASE / entry
    spec = importlib.util.spec_from_file_location(f"_test_tool_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class FakeContext:
    """A context satisfying `bundles.sdk.ToolContext` for calling handlers directly."""

    workdir: Path
    config: Mapping[str, Any] = field(default_factory=dict)
    secret_values: frozenset[str] = frozenset()
    runtime: Any = None
    message: Mapping[str, Any] = field(default_factory=dict)
    tool_call_id: str = "call-1"
    agent_name: str = "tester"
    instance_key: str = "test"
    logger: Any = field(default_factory=structlog.get_logger)


async def call(module: ModuleType, export: str, ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Run one handler the way the executor does: await it if it is a coroutine function."""
    handler = module.handlers[export]
    result = handler(ctx, args)
    if inspect.isawaitable(result):
        return await result
    return result


def names(directory: Path) -> list[str]:
    """Sorted entry names (a sync helper: async tests must not block on pathlib)."""
    return sorted(p.name for p in directory.iterdir())


def real(path: Path) -> str:
    return str(path.resolve())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The instance workspace; `tmp_path/outside` is a sibling the tools must never reach."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret\n")
    return work


@pytest.fixture
def ctx(workdir: Path) -> FakeContext:
    context = FakeContext(workdir=workdir)
    assert isinstance(context, ToolContext)
    return context


@pytest.fixture
def api() -> Iterator[FakeApi]:
    """A local stand-in of a chat HTTP API (Telegram, Slack) for the tools and connectors."""
    from .fake_chat_api import serve  # it uses `call` of this module

    with serve() as fake:
        yield fake


BASE_DOCS: dict[tuple[str, str], dict[str, Any]] = {
    (doc["kind"], doc["metadata"]["name"]): doc
    for doc in yaml.safe_load_all((BASE / "goondan.yaml").read_text())
}
"""The documents of bundles/base/goondan.yaml by (kind, name)."""


def base_resource(kind: str, name: str, **config: Any) -> Any:
    """A resource of the base package as the loader would give it, with config overrides."""
    spec = copy.deepcopy(BASE_DOCS[(kind, name)]["spec"])
    spec.setdefault("config", {}).update(config)
    return builders.resource(kind, name, spec, root=BASE)
