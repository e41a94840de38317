"""A user tool that hangs, raises or returns too much: bounded, debuggable, and the model sees
only what it should."""

from __future__ import annotations

import json

from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime, tool_results, turn

EXPORTS = [{"name": "slow"}, {"name": "fail_long"}, {"name": "echo"}]


def calls(name: str, args: dict[str, object] | None = None) -> list[dict[str, object]]:
    return [
        {"match": "go", "toolCalls": [{"name": f"t__{name}", "args": args or {}}]},
        {"afterTool": "*", "reply": "done"},
    ]


async def test_a_tool_without_timeout_gets_the_swarm_default() -> None:
    """With no timeoutMs, a hanging tool blocked its instance forever."""
    rt = await make_runtime(
        b.scripted(script=calls("slow", {"seconds": 30})), b.agent(tools=["t"]),
        b.tool("t", "tools/basic.py", EXPORTS),
        b.swarm(agents=["a"], tools={"defaultTimeoutMs": 200}),
    )  # fmt: skip
    try:
        result = await turn(rt, "go")
        assert result.outcome is TurnOutcome.COMPLETED
        [failed] = tool_results(rt)
        assert failed["error"]["code"] == "E_TOOL_TIMEOUT"
        assert "defaultTimeoutMs" in failed["error"]["suggestion"]
    finally:
        await rt.close()


async def test_an_exception_is_traced_for_the_operator_not_the_model() -> None:
    """An exception in a user tool left no traceback anywhere."""
    rt = await make_runtime(
        b.scripted(script=calls("fail_long")), b.agent(tools=["t"]),
        b.tool("t", "tools/basic.py", EXPORTS),
    )  # fmt: skip
    try:
        await turn(rt, "go")
        [failed] = tool_results(rt)
        assert failed["error"]["code"] == "E_TOOL" and "traceback" not in json.dumps(failed)
    finally:
        await rt.close()
    events = [json.loads(x) for x in rt.paths.runtime_events_jsonl.read_text().splitlines()]
    [event] = [e for e in events if e["type"] == "tool.failed"]
    trace = event["data"]["traceback"]
    assert "RuntimeError" in trace and "basic.py" in trace and "fail_long" in trace


async def test_a_large_result_is_cut_with_a_marker() -> None:
    rt = await make_runtime(
        b.scripted(script=calls("echo", {"text": "y" * 5000})), b.agent(tools=["t"]),
        b.tool("t", "tools/basic.py", EXPORTS, resultLimit=1000),
    )  # fmt: skip
    try:
        await turn(rt, "go")
        [cut] = tool_results(rt)
        assert cut["status"] == "ok" and isinstance(cut["output"], str)
        assert len(cut["output"]) == 1000 and "truncated: 1000 of" in cut["output"]
    finally:
        await rt.close()
