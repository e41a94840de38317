"""The base extensions (logging, message-window, required-tools-guard) in a real agent runtime:
real Turn/Step engine, pipelines, executor and store, a scripted model, and the base package's
own Tool and Extension resources from bundles/base/goondan.yaml."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from protocol.conversation import Role, new_message
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime, scripted, tool_results, turn

from .conftest import base_resource as base
from .conftest import load_tool

window = load_tool("extensions/message_window.py")


# -- message-window ------------------------------------------------------------------------


def msg(role: str, **fields: Any) -> Any:
    return new_message(Role(role), role, **fields)


def test_window_drops_the_oldest_and_never_orphans_a_tool_result() -> None:
    history = [
        msg("system"),
        msg("user"),
        msg("assistant"),
        msg("tool"),
        msg("tool"),
        msg("user", metadata={"pinned": True}),
        msg("assistant"),
        msg("user"),
    ]
    dropped = window.messages_to_drop(history, 3)
    # 6 countable messages, keep 3: the cut after the assistant would orphan two tool results
    assert dropped == [history[1].id, history[2].id, history[3].id, history[4].id]
    assert window.messages_to_drop(history, 10) == []


async def test_message_window_bounds_what_the_model_sees_and_what_is_stored() -> None:
    rt = await make_runtime(
        b.scripted(),
        b.agent(extensions=["message-window"]),
        base("Extension", "message-window", maxMessages=3),
    )
    try:
        for n in range(1, 6):
            result = await turn(rt, f"in{n}")
            assert result.outcome is TurnOutcome.COMPLETED
        sent = [len(request.messages) for request in scripted(rt).requests]
        contents = [m.content for m in rt.store.messages]
    finally:
        await rt.close()
    assert max(sent) <= 3
    assert contents == ["in4", "in4", "in5", "in5"]  # echo model: reply == input


def test_message_window_rejects_a_bad_setting() -> None:
    with pytest.raises(ValueError, match="maxMessages"):
        window._max_messages({"maxMessages": 0})


# -- required-tools-guard ------------------------------------------------------------------

GUARDED_SCRIPT = [
    {"afterTool": "wait__wait", "reply": "finished after waiting"},
    {
        "match": "required-tools-guard",
        "toolCalls": [{"name": "wait__wait", "args": {"seconds": 0}}],
    },
    {"match": "go", "reply": "done too early"},
]


async def test_guard_reminds_the_model_until_the_required_tool_ran() -> None:
    rt = await make_runtime(
        b.scripted(script=GUARDED_SCRIPT),
        b.agent(tools=["wait"], extensions=["required-tools-guard"]),
        base("Tool", "wait"),
        base("Extension", "required-tools-guard", requiredTools=["wait"]),
    )
    try:
        result = await turn(rt, "go")
        roles = [(m.role.value, m.content[:40]) for m in rt.store.messages]
        waited = tool_results(rt)
    finally:
        await rt.close()
    assert result.outcome is TurnOutcome.COMPLETED
    assert result.text == "finished after waiting"
    assert waited[0]["status"] == "ok"
    assert roles[1] == ("assistant", "done too early")
    assert roles[2][0] == "user"
    assert roles[2][1].startswith("[required-tools-guard]")


async def test_guard_fails_the_turn_when_reminders_run_out() -> None:
    rt = await make_runtime(
        b.scripted(script=[{"reply": "never calling tools"}]),
        b.agent(tools=["wait"], extensions=["required-tools-guard"]),
        base("Tool", "wait"),
        base("Extension", "required-tools-guard", requiredTools=["wait__wait"], maxReminders=1),
    )
    try:
        result = await turn(rt, "go")
        reminders = [m for m in rt.store.messages if m.content.startswith("[required")]
    finally:
        await rt.close()
    assert result.outcome is TurnOutcome.FAILED
    assert result.error is not None
    assert result.error.code == "E_EXT_REQUIRED_TOOLS_MISSING"
    assert len(reminders) == 1


async def test_guard_with_on_missing_allow_lets_the_answer_stand() -> None:
    rt = await make_runtime(
        b.scripted(script=[{"reply": "fine without"}]),
        b.agent(tools=["wait"], extensions=["required-tools-guard"]),
        base("Tool", "wait"),
        base(
            "Extension",
            "required-tools-guard",
            requiredTools=["wait"],
            maxReminders=0,
            onMissing="allow",
        ),
    )
    try:
        result = await turn(rt, "go")
    finally:
        await rt.close()
    assert (result.outcome, result.text) == (TurnOutcome.COMPLETED, "fine without")


# -- logging -------------------------------------------------------------------------------


async def test_logging_writes_one_line_per_turn_step_and_tool_call() -> None:
    rt = await make_runtime(
        b.scripted(
            script=[
                {"match": "go", "toolCalls": [{"name": "wait__wait", "args": {"seconds": 0}}]},
                {"afterTool": "*", "reply": "ok"},
            ]
        ),
        b.agent(tools=["wait"], extensions=["logging"]),
        base("Tool", "wait"),
        base("Extension", "logging", includeArgs=True),
    )
    try:
        with structlog.testing.capture_logs() as logs:
            result = await turn(rt, "go")
    finally:
        await rt.close()
    assert result.outcome is TurnOutcome.COMPLETED
    events = [entry for entry in logs if entry.get("extension") == "logging"]
    assert [e["event"] for e in events] == [
        "turn.begin",
        "tool.end",
        "step.end",
        "step.end",
        "turn.end",
    ]
    tool_line = events[1]
    assert (tool_line["tool"], tool_line["status"]) == ("wait__wait", "ok")
    assert tool_line["args"] == "{'seconds': 0}"
    assert events[-1]["outcome"] == "completed"
    assert events[2]["tool_calls"] == ["wait__wait"]


async def test_base_tools_run_through_the_real_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    rt = await make_runtime(
        b.scripted(
            script=[
                {
                    "match": "go",
                    "toolCalls": [
                        {
                            "name": "file-system__write",
                            "args": {"path": "a.txt", "content": "hi\n"},
                        },
                        {
                            "name": "bash__exec",
                            "args": {"command": "cat a.txt; echo $OPENAI_API_KEY"},
                        },
                        {"name": "file-system__read", "args": {"path": "../escape"}},
                        {"name": "bash__exec", "args": {"command": "true", "bogus": 1}},
                    ],
                },
                {"afterTool": "*", "reply": "done"},
            ]
        ),
        b.agent(tools=["bash", "file-system"]),
        base("Tool", "bash"),
        base("Tool", "file-system"),
    )
    try:
        await turn(rt, "go")
        results = tool_results(rt)
    finally:
        await rt.close()
    assert results[0]["status"] == "ok"
    assert results[1]["output"]["stdout"] == "hi\n\n"
    assert results[2]["error"]["code"] == "E_TOOL_PATH_ESCAPE"
    assert results[3]["error"]["code"] == "E_TOOL_INVALID_ARGS"
