"""Hostile arguments at the built-in tools, through the real executor (schema + handler).

The runtime is the one an agent process builds (AgentRuntime.create) from the real manifest of
bundles/base, with the workspace in a sandbox tree that also holds an `outside` directory, a
symlink to it from inside the workspace and one to an absolute path. Every call must end in an
ok result or an error result with a code from a ToolFailed the tool raised on purpose (an
unexpected exception would surface as plain E_TOOL with its own type name); and nothing outside
the workspace may change. FUZZ_EXAMPLES sets examples per export (default 25).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_process.catalog import CatalogBuilder
from agent_process.middleware_contexts import StepContext, TurnContext
from agent_process.results import ResultStatus
from agent_process.runtime import AgentRuntime
from protocol.conversation import Role, ToolCall, new_message
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode
from protocol.events import Source, SourceKind, TraceContext, new_event
from tests.fuzz import hostile
from tests.unit.agent_process import builders

BASE = Path(__file__).resolve().parents[2] / "bundles" / "base"
TOOLS = ("file-system", "bash", "json-query", "text-transform", "http-fetch")
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES_TOOLS", os.environ.get("FUZZ_EXAMPLES", "25")))
CODES = {c.value for c in ErrorCode}


def manifest() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((BASE / "goondan.yaml").read_text()) if d]
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Tool"}


def snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every entry under root except the workspace itself."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if Path(dirpath) == skip:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if Path(path) != skip:  # its own mtime moves when the tools work inside it
                st_ = os.lstat(path)
                out[path] = (st_.st_size, st_.st_mtime_ns)
    return out


class Sandbox:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / "work"
        self.outside = root / "outside"
        self.abs_target = root / "abs-target"
        for d in (self.work, self.outside, self.abs_target):
            d.mkdir(parents=True)
        (self.outside / "secret.txt").write_text("top secret\n")
        (self.work / "link").symlink_to(self.outside)
        (self.work / "abslink").symlink_to(self.abs_target)
        (self.work / "data.json").write_text('{"a": [1, 2, {"b": "c"}]}')


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path / "box")
    yield box
    shutil.rmtree(box.root, ignore_errors=True)


async def make_runtime(work: Path) -> AgentRuntime:
    specs = manifest()
    tools = [builders.resource("Tool", name, specs[name], root=BASE) for name in TOOLS]
    bundle = builders.bundle(
        builders.scripted(), builders.agent(tools=list(TOOLS)), builders.swarm(agents=["a"]),
        *tools, root=BASE,
    )  # fmt: skip
    return await AgentRuntime.create(
        bundle=bundle, agent="a", instance_key="k", swarm="s", layout=StateLayout.from_env(),
        workdir=work,
    )  # fmt: skip


def step_of(runtime: AgentRuntime) -> StepContext:
    event = new_event(
        type="fuzz", input="", instance_key="k", source=Source(kind=SourceKind.CLI, name="f")
    )
    turn = TurnContext(
        event=event, turn_id="t", agent_name="a", instance_key="k",
        conversation=runtime.store, span=TraceContext.root(),
    )  # fmt: skip
    step = StepContext(
        turn=turn, index=1, catalog=CatalogBuilder(runtime.registry), span=turn.span.child()
    )
    step.catalog_names = frozenset(i.name for i in step.tool_catalog)
    return step


def exports() -> list[tuple[str, str, dict[str, Any]]]:
    specs = manifest()
    return [(t, e["name"], e.get("parameters", {})) for t in TOOLS for e in specs[t]["exports"]]


@pytest.mark.parametrize(("tool", "export", "schema"), exports(), ids=lambda v: str(v)[:20])
async def test_hostile_args_give_coded_results_and_write_nothing_outside(
    sandbox: Sandbox, tool: str, export: str, schema: dict[str, Any]
) -> None:
    async with asyncio.timeout(120):
        runtime = await make_runtime(sandbox.work)
        try:
            step = step_of(runtime)
            name = f"{tool}__{export}"
            assert name in step.catalog_names, sorted(step.catalog_names)
            before = snapshot(sandbox.root, sandbox.work)
            seen = await asyncio.to_thread(fuzz, runtime, step, name, tool, schema)
            after = snapshot(sandbox.root, sandbox.work)
            changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
            assert not changed, f"written outside the workdir: {sorted(changed)}"
            assert seen["calls"] > 0
        finally:
            await runtime.close()


def fuzz(
    runtime: AgentRuntime, step: StepContext, name: str, tool: str, schema: dict[str, Any]
) -> dict[str, int]:
    """Hypothesis drives the calls from a thread; each runs on a private loop."""
    runner = runtime._tool_calls  # the executor the turn engine uses (no public handle)
    seen = {"calls": 0}

    @settings(
        max_examples=EXAMPLES, deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(args=hostile.args_for(tool, schema), raw=st.booleans())
    def one(args: dict[str, Any], raw: bool) -> None:
        call = ToolCall(id="c1", name=name, args=args)
        if raw:  # what the model sent was not a JSON object at all
            call = ToolCall(id="c1", name=name, args={}, invalid_args="[1, \x00")
        message = new_message(Role.ASSISTANT, "", tool_calls=[call])
        result = asyncio.run(asyncio.wait_for(runner.run(step, call, message), 60))
        seen["calls"] += 1
        if result.status is ResultStatus.ERROR:
            assert result.error is not None
            assert result.error.code in CODES, result.error
            # a tool's own refusal is a ToolFailed; anything else escaped the handler
            escaped = result.error.code == ErrorCode.E_TOOL and result.error.name != "ToolFailed"
            assert not escaped, f"{name}({str(args)[:300]}) -> {result.error}"
        else:
            assert result.status is ResultStatus.OK, result

    one()
    assert not os.path.lexists("/tmp/pwn.txt")  # an absolute path in the arguments
    return seen
