"""message-compaction: the pure plan (thresholds, pinned/system kept, no orphaned tool result,
summaries folded) and the extension in a real agent runtime with the scripted model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol.conversation import Role, ToolCall, new_message
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime, scripted, turn

from .conftest import base_resource as base
from .conftest import load_tool

compaction = load_tool("extensions/message_compaction.py")


def msg(role: str, content: str | None = None, **fields: Any) -> Any:
    return new_message(Role(role), role if content is None else content, **fields)


def settings(**config: Any) -> Any:
    return compaction.Settings.from_config(config)


def test_nothing_happens_below_the_thresholds() -> None:
    history = [msg("user", "a"), msg("assistant", "b")]
    assert compaction.plan(history, settings(maxMessages=2, keepMessages=1)) is None


def test_plan_keeps_system_pinned_and_recent_messages() -> None:
    system = msg("system", "context")
    pinned = msg("user", "remember: the deadline is Friday", metadata={"pinned": True})
    call = ToolCall(id="c1", name="wait__wait", args={})
    history = [
        system,
        msg("user", "first question\nwith details"),
        msg("assistant", "", tool_calls=[call]),
        msg("tool", '{"status":"ok"}', tool_name="wait__wait", metadata={"status": "ok"}),
        pinned,
        msg("assistant", "first answer"),
        msg("user", "second question"),
        msg("assistant", "second answer"),
    ]
    found = compaction.plan(history, settings(maxMessages=5, keepMessages=2))
    assert found is not None
    assert found.anchor_id == history[1].id
    assert found.remove_ids == [history[2].id, history[3].id, history[5].id]
    assert found.summary.splitlines() == [
        compaction.SUMMARY_HEADER,
        "- user: first question",
        "- assistant called wait__wait",
        '- tool wait__wait (ok): {"status":"ok"}',
        "- assistant: first answer",
    ]
    untouched = {system.id, pinned.id, history[6].id, history[7].id}
    assert untouched.isdisjoint({found.anchor_id, *found.remove_ids})


def test_the_cut_never_orphans_a_tool_result() -> None:
    call = ToolCall(id="c1", name="t__x", args={})
    history = [
        msg("user", "go"),
        msg("assistant", "", tool_calls=[call]),
        msg("tool", "r1", tool_name="t__x"),
        msg("tool", "r2", tool_name="t__x"),
        msg("assistant", "done"),
    ]
    found = compaction.plan(history, settings(maxMessages=3, keepMessages=2))
    assert found is not None
    # keeping the last 2 would start at a tool result: the cut moves past both results
    assert found.remove_ids == [history[1].id, history[2].id, history[3].id]


def test_a_previous_summary_is_folded_not_summarized() -> None:
    old = msg("user", f"{compaction.SUMMARY_HEADER}\n- user: long ago")
    history = [old, msg("assistant", "x"), msg("user", "y"), msg("assistant", "z")]
    found = compaction.plan(history, settings(maxMessages=3, keepMessages=1))
    assert found is not None
    assert found.summary.splitlines()[1:] == [
        "- user: long ago",
        "- assistant: x",
        "- user: y",
    ]


def test_character_threshold_and_summary_cap() -> None:
    history = [
        msg("user" if i % 2 == 0 else "assistant", f"line {i} " + "x" * 50) for i in range(40)
    ]
    found = compaction.plan(
        history, settings(maxMessages=1000, keepMessages=5, maxChars=1000, maxSummaryChars=300)
    )
    assert found is not None
    assert found.compacted == 35
    assert len(found.summary) <= 300
    assert "earlier lines omitted" in found.summary
    assert "line 34" in found.summary  # the newest compacted lines are the ones kept


@pytest.mark.parametrize(
    "config",
    [{"maxMessages": 0}, {"keepMessages": 10, "maxMessages": 10}, {"summarizer": "model"}],
)
def test_bad_settings_are_refused(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="config"):
        compaction.Settings.from_config(config)


async def test_compaction_in_a_real_runtime() -> None:
    rt = await make_runtime(
        b.scripted(),
        b.agent(extensions=["message-compaction"]),
        base("Extension", "message-compaction", maxMessages=4, keepMessages=2),
    )
    try:
        for n in range(1, 6):
            result = await turn(rt, f"in{n}")
            assert result.outcome is TurnOutcome.COMPLETED
            assert result.text == f"in{n}"  # the echo model still sees the latest input
        sent = [len(request.messages) for request in scripted(rt).requests]
        stored = [(m.role.value, m.content) for m in rt.store.messages]
        events = rt.paths.runtime_events_jsonl.read_text().splitlines()
    finally:
        await rt.close()
    assert max(sent) <= 5
    summary = stored[0][1].splitlines()
    assert stored[0][0] == "user"
    assert summary[0] == compaction.SUMMARY_HEADER
    assert summary[1:] == [
        "- user: in1",
        "- assistant: in1",
        "- user: in2",
        "- assistant: in2",
        "- user: in3",
        "- assistant: in3",
        "- user: in4",
    ]
    assert stored[1:] == [("assistant", "in4"), ("user", "in5"), ("assistant", "in5")]
    compacted = [json.loads(e) for e in events if '"compaction.completed"' in e]
    assert compacted
    assert compacted[0]["data"]["extension"] == "message-compaction"
