"""context-message in a real agent runtime: what the model receives, one context message in the
stored history, inbound context from a connector event; rendering switches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from protocol.conversation import Role
from protocol.events import ReplyTo, Source, SourceKind, new_event
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import TIMEOUT, make_runtime, scripted, turn

from .conftest import base_resource as base
from .conftest import load_tool

context = load_tool("extensions/context_message.py")


def telegram_event(text: str) -> Any:
    return new_event(
        type="telegram.message",
        input=text,
        instance_key="k1",
        source=Source(kind=SourceKind.CONNECTOR, name="telegram", properties={"chatId": 42}),
        reply_to=ReplyTo(target="connector/telegram", correlation_id="c-1"),
        metadata={"messageId": 7, "user": "ana"},
    )


async def test_the_model_gets_one_current_context_message() -> None:
    rt = await make_runtime(
        b.scripted(),
        b.agent(extensions=["context-message"]),
        base(
            "Extension",
            "context-message",
            prompt="Answer in one sentence.",
            agents=["helper", {"name": "coder", "description": "writes code"}],
        ),
    )
    try:
        first = await turn(rt, "hello")
        async with asyncio.timeout(TIMEOUT):
            second = await rt.run_turn(telegram_event("from telegram"))
        requests = list(scripted(rt).requests)
        stored = [(m.role, m.content) for m in rt.store.messages]
    finally:
        await rt.close()
    assert (first.text, second.text) == ("hello", "from telegram")  # the input is still "input"
    assert second.outcome is TurnOutcome.COMPLETED
    seen = [m.role for m in requests[0].messages]
    assert seen == [Role.USER, Role.SYSTEM]  # right after the turn's input
    text = requests[1].messages[-1].content
    assert text.split("\n\n") == [
        "[context]",
        "Answer in one sentence.",
        "You are agent a (instance k1).",
        "Agents in this swarm (reach them with the agents tool):\n- helper\n- coder: writes code",
        "Inbound event: type telegram.message from connector/telegram.\n"
        'Source properties: {"chatId": 42}\n'
        "A reply is awaited by connector/telegram: your final answer is sent there.\n"
        'Event metadata: {"messageId": 7, "user": "ana"}',
    ]
    assert "from cli/cli" in requests[0].messages[-1].content
    contexts = [content for role, content in stored if role is Role.SYSTEM]
    assert contexts == [text]  # the previous turn's context message was removed
    assert [role for role, _ in stored] == [
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
        Role.SYSTEM,
        Role.ASSISTANT,
    ]


async def test_sections_can_be_switched_off() -> None:
    rt = await make_runtime(
        b.scripted(),
        b.agent(extensions=["context-message"]),
        base(
            "Extension",
            "context-message",
            includeAgent=False,
            includeInbound=False,
            includeTime=True,
            maxMetadataChars=10,
        ),
    )
    try:
        await turn(rt, "hi")
        message = scripted(rt).requests[0].messages[-1]
    finally:
        await rt.close()
    assert message.content.startswith("[context]\n\nCurrent time (UTC): ")
    assert "agent a" not in message.content


def test_long_metadata_is_cut() -> None:
    assert context._json({"k": "x" * 100}, 20).endswith("...(cut)")


def test_bad_agents_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="config agents"):
        context.Settings({"agents": [{"description": "no name"}]})
