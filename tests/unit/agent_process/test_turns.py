"""The Turn/Step engine with the scripted model: multi-step turns, errors fed back, max steps."""

from __future__ import annotations

import json

import msgspec

from protocol.conversation import Role
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime, scripted, tool_results, turn

ADD = {
    "name": "add",
    "parameters": b.params(["a", "b"], a={"type": "integer"}, b={"type": "integer"}),
}
ECHO = {"name": "echo", "parameters": {"type": "object"}}


def calc(**spec: object) -> object:
    return b.tool("calc", "tools/basic.py", [ADD, ECHO], **spec)


async def test_multi_step_turn_runs_tools_in_order_and_folds_the_log() -> None:
    script = [
        {"match": "add", "toolCalls": [{"name": "calc__add", "args": {"a": 2, "b": 3}}]},
        {
            "afterTool": "calc__add",
            "toolCalls": [{"name": "calc__echo", "args": {"r": "{last_tool_result}"}}],
        },
        {"afterTool": "calc__echo", "reply": "done: {last_tool_result}"},
    ]
    rt = await make_runtime(b.scripted(script=script), b.agent(tools=["calc"]), calc())
    try:
        result = await turn(rt, "please add")
        assert result.outcome is TurnOutcome.COMPLETED
        assert result.steps == 3 and result.error is None
        assert '{\\"sum\\":5}' in result.text
        assert [m.role for m in rt.store.messages] == [
            Role.USER,
            Role.ASSISTANT,
            Role.TOOL,
            Role.ASSISTANT,
            Role.TOOL,
            Role.ASSISTANT,
        ]
        assert tool_results(rt)[0] == {"status": "ok", "output": {"sum": 5}}
        assert result.usage["inputTokens"] > 0
        # the system prompt goes on every step, and nothing else is injected
        requests = list(scripted(rt).requests)
        assert [r.system for r in requests] == ["You are a test agent."] * 3
        assert all(m.role is not Role.SYSTEM for r in requests for m in r.messages)
        # turn end folded the events into base.jsonl
        assert rt.paths.events_jsonl.read_bytes() == b""
        assert len(rt.paths.base_jsonl.read_bytes().splitlines()) == 6
    finally:
        await rt.close()


async def test_runtime_events_carry_trace_spans_durations_and_usage() -> None:
    script = [
        {"match": "go", "toolCalls": [{"name": "calc__add", "args": {"a": 1, "b": 1}}]},
        {"afterTool": "*", "reply": "ok"},
    ]
    rt = await make_runtime(b.scripted(script=script), b.agent(tools=["calc"]), calc())
    try:
        await turn(rt, "go")
    finally:
        await rt.close()
    events = [json.loads(line) for line in rt.paths.runtime_events_jsonl.read_text().splitlines()]
    types = [e["type"] for e in events]
    assert types == [
        "turn.started",
        "step.started",
        "model.usage",
        "tool.called",
        "tool.completed",
        "step.completed",
        "step.started",
        "model.usage",
        "step.completed",
        "turn.completed",
    ]
    by_type = {e["type"]: e for e in reversed(events)}  # the first of each type
    turn_span = by_type["turn.started"]["spanId"]
    assert len({e["traceId"] for e in events}) == 1
    assert by_type["step.started"]["parentSpanId"] == turn_span
    step_span = by_type["step.started"]["spanId"]
    assert by_type["tool.completed"]["parentSpanId"] == step_span
    assert by_type["tool.completed"]["durationMs"] >= 0
    assert by_type["turn.completed"]["steps"] == 2
    assert by_type["turn.completed"]["usage"]["outputTokens"] > 0


async def test_invalid_args_are_fed_back_with_paths_and_keys() -> None:
    script = [
        {"match": "x", "toolCalls": [{"name": "calc__add", "args": {"a": "two", "c": 1}}]},
        {"afterTool": "calc__add", "reply": "{last_tool_result}"},
    ]
    rt = await make_runtime(b.scripted(script=script), b.agent(tools=["calc"]), calc())
    try:
        result = await turn(rt, "x")
        error = tool_results(rt)[0]["error"]
        assert error["code"] == "E_TOOL_INVALID_ARGS"
        lines = error["message"].splitlines()  # one per problem, after jsonschema's own words
        assert lines[0] == "invalid arguments for calc__add:"
        assert {line.split(": ")[0] for line in lines[1:-2]} == {
            "- at $ (the arguments object)",  # 'b' is missing, 'c' is not allowed
            "- at $.a",  # 'two' is not an integer
        }
        assert lines[-2:] == [
            "required keys: a, b; allowed keys: a, b",
            "no other keys are allowed",
        ]
        assert "E_TOOL_INVALID_ARGS" in result.text  # the model saw it and answered
        assert result.outcome is TurnOutcome.COMPLETED
    finally:
        await rt.close()


async def test_call_to_a_name_not_in_the_catalog_is_refused() -> None:
    script = [
        {"match": "x", "toolCalls": [{"name": "shell__exec", "args": {}}]},
        {"afterTool": "*", "reply": "sorry"},
    ]
    rt = await make_runtime(b.scripted(script=script), b.agent(tools=["calc"]), calc())
    try:
        await turn(rt, "x")
        error = tool_results(rt)[0]["error"]
        assert error["code"] == "E_TOOL_NOT_IN_CATALOG"
        assert "calc__add, calc__echo" in error["message"]
    finally:
        await rt.close()


async def test_long_error_is_cut_to_error_message_limit_inside_the_limit() -> None:
    exports = [{"name": "fail_long"}]
    script = [
        {"match": "x", "toolCalls": [{"name": "calc__fail_long"}]},
        {"afterTool": "*", "reply": "seen"},
    ]
    rt = await make_runtime(
        b.scripted(script=script),
        b.agent(tools=["calc"]),
        b.tool("calc", "tools/basic.py", exports, errorMessageLimit=200),
    )
    try:
        await turn(rt, "x")
        last_request = scripted(rt).requests[-1]
        sent = json.loads(last_request.messages[-1].content)  # what the model received
        message = sent["error"]["message"]
        assert len(message) <= 200
        assert message.endswith("... (truncated)")
        assert message.startswith("xxx")
        assert sent["error"]["code"] == "E_TOOL" and sent["error"]["name"] == "RuntimeError"
    finally:
        await rt.close()


async def test_max_steps_stops_a_model_that_keeps_calling_tools() -> None:
    script = [
        {"match": "loop", "toolCalls": [{"name": "calc__add", "args": {"a": 1, "b": 1}}]},
        {"afterTool": "calc__add", "toolCalls": [{"name": "calc__add", "args": {"a": 1, "b": 1}}]},
    ]
    rt = await make_runtime(
        b.scripted(script=script),
        b.agent(tools=["calc"]),
        calc(),
        b.swarm(agents=["a"], max_steps=3),
    )
    try:
        result = await turn(rt, "loop")
        assert result.outcome is TurnOutcome.MAX_STEPS
        assert result.steps == 3
        assert result.error is not None and result.error.code == "E_AGENT_MAX_STEPS"
        assert len(tool_results(rt)) == 3
    finally:
        await rt.close()


async def test_default_reply_echoes_and_conversation_accumulates_across_turns() -> None:
    rt = await make_runtime(b.scripted(), b.agent())
    try:
        first = await turn(rt, "hello")
        second = await turn(rt, "again")
        assert (first.text, second.text) == ("hello", "again")
        assert len(scripted(rt).requests[-1].messages) == 3  # user, assistant, user
    finally:
        await rt.close()


async def test_closed_runtime_answers_with_a_coded_failure() -> None:
    rt = await make_runtime(b.scripted(), b.agent())
    await rt.close()
    result = await turn(rt, "late")
    assert result.outcome is TurnOutcome.FAILED
    assert result.error is not None and result.error.code == "E_AGENT_SHUTTING_DOWN"


def test_turn_result_encodes_to_json() -> None:
    from agent_process.runtime import TurnResult

    r = TurnResult(turn_id="t", event_id="e", outcome=TurnOutcome.COMPLETED, text="hi")
    assert msgspec.json.decode(msgspec.json.encode(r))["outcome"] == "completed"


async def test_a_turn_whose_log_cannot_be_folded_fails_and_loses_nothing() -> None:
    rt = await make_runtime(b.scripted(), b.agent())
    try:
        blocker = rt.paths.messages_dir / ".base.jsonl.tmp"
        blocker.mkdir()  # the fold's temp file cannot be created
        result = await turn(rt, "first")
        assert result.outcome is TurnOutcome.FAILED
        assert result.error is not None and result.error.code == "E_AGENT_TURN_FAILED"
        assert "could not be saved" in result.error.message
        assert (
            len(rt.paths.events_jsonl.read_bytes().splitlines()) == 3
        )  # still on disk (with the turn-end record)
        blocker.rmdir()
        assert (await turn(rt, "second")).outcome is TurnOutcome.COMPLETED
        assert len(rt.paths.base_jsonl.read_bytes().splitlines()) == 4
    finally:
        await rt.close()
