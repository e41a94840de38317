"""An event delivered again (the daemon redelivers what it accepted until it hears the turn
ended): answered from the conversation when its turn ended, resumed when it was cut."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import msgspec

from protocol.conversation import Role, ToolCall
from protocol.events import AgentEvent
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import TIMEOUT, event, make_runtime, scripted, tool_results

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "tests" / "fixtures" / "runtime" / "crash_agent.py"


async def test_an_event_whose_turn_ended_is_answered_without_a_second_turn() -> None:
    rt = await make_runtime(b.scripted(script=[{"match": "hi", "reply": "hello"}]), b.agent())
    try:
        again = event("hi")
        async with asyncio.timeout(TIMEOUT):
            first = await rt.run_turn(again)
            before = list(rt.store.messages)
            second = await rt.run_turn(again)
        assert (second.outcome, second.text) == (TurnOutcome.COMPLETED, "hello")
        assert second.turn_id == first.turn_id
        assert rt.store.messages == before  # nothing appended: one user message, one reply
        assert len(scripted(rt).requests) == 1  # the model was asked once
        assert before[0].metadata["turnOutcome"] == "completed"
    finally:
        await rt.close()


async def test_a_turn_that_ended_in_error_is_answered_with_its_error_again() -> None:
    call = {"toolCalls": [{"name": "nope", "args": {}}]}
    endless = [call, {"afterTool": "*", **call}]  # until maxStepsPerTurn
    rt = await make_runtime(b.scripted(script=endless), b.agent())
    try:
        again = event("anything")
        async with asyncio.timeout(TIMEOUT):
            first = await rt.run_turn(again)
            asked = len(scripted(rt).requests)
            second = await rt.run_turn(again)
        assert first.outcome is TurnOutcome.MAX_STEPS and first.error is not None
        assert (second.outcome, second.error) == (first.outcome, first.error)
        assert len(scripted(rt).requests) == asked
    finally:
        await rt.close()


async def _cut_mid_tool_call() -> AgentEvent:
    """A real process SIGKILLed inside a tool call: the event whose turn it was running."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    async with asyncio.timeout(TIMEOUT):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(SCRIPT), "please hang", env=env, cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        line = b"?"
        while line and line != b"HANGING\n":
            line = await proc.stdout.readline()
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    return event("please hang")


async def test_a_cut_turn_resumes_where_it_stopped() -> None:
    await _cut_mid_tool_call()
    script = [{"afterTool": "t__hang", "reply": "went on after {last_tool_result}"}]
    tool = b.tool("t", "tools/basic.py", [{"name": "hang"}, {"name": "echo"}])
    rt = await make_runtime(b.scripted(script=script), b.agent(tools=["t"]), tool)
    try:
        [user, asked] = rt.store.messages
        cut = msgspec.structs.replace(event("please hang"), id=user.metadata["eventId"])
        async with asyncio.timeout(TIMEOUT):
            result = await rt.run_turn(cut)
        assert result.outcome is TurnOutcome.COMPLETED and result.turn_id == user.turn_id
        assert [m.role for m in rt.store.messages] == [
            Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT,
        ]  # fmt: skip
        # hang is not idempotent: the cut call is not run again, the model hears why
        assert tool_results(rt)[0]["error"]["code"] == "E_AGENT_CRASHED"
        assert rt.store.messages[2].tool_call_id == asked.tool_calls[0].id
        assert "went on after" in result.text
    finally:
        await rt.close()


async def test_a_cut_call_of_an_idempotent_export_runs_again() -> None:
    exports = [{"name": "echo", "idempotent": True}]
    tool = b.tool("t", "tools/basic.py", exports)
    script = [
        {"match": "go", "toolCalls": [{"name": "t__echo", "args": {"v": 1}}]},
        {"afterTool": "t__echo", "reply": "got {last_tool_result}"},
    ]
    rt = await make_runtime(b.scripted(script=script), b.agent(tools=["t"]), tool)
    the_event = event("go")
    try:
        # what a process that died inside the call leaves: the input and the call, no result
        rt.store.append(Role.USER.value, "go", turn_id="t_cut",
                        metadata={"eventId": the_event.id})  # fmt: skip
        rt.store.append(Role.ASSISTANT.value, "", turn_id="t_cut",
                        tool_calls=[ToolCall(id="c1", name="t__echo", args={"v": 1})])  # fmt: skip
        async with asyncio.timeout(TIMEOUT):
            result = await rt.run_turn(the_event)
        assert result.outcome is TurnOutcome.COMPLETED and result.turn_id == "t_cut"
        assert tool_results(rt) == [{"status": "ok", "output": {"v": 1}}]
        assert result.text.startswith("got ")
    finally:
        await rt.close()


async def test_a_turn_cut_after_its_final_answer_is_not_answered_twice() -> None:
    """The process died between the final answer and the outcome record: the redelivered
    event ends the turn with that answer; the model is not asked again."""
    rt = await make_runtime(b.scripted(script=[{"match": "hi", "reply": "hello"}]), b.agent())
    the_event = event("hi")
    try:
        rt.store.append(Role.USER.value, "hi", turn_id="t_cut",
                        metadata={"eventId": the_event.id})  # fmt: skip
        rt.store.append(Role.ASSISTANT.value, "hello", turn_id="t_cut")
        async with asyncio.timeout(TIMEOUT):
            result = await rt.run_turn(the_event)
        assert (result.outcome, result.text, result.turn_id) == (
            TurnOutcome.COMPLETED, "hello", "t_cut",
        )  # fmt: skip
        assert [m.role for m in rt.store.messages] == [Role.USER, Role.ASSISTANT]
        assert not scripted(rt).requests  # the model was not asked
        assert rt.store.messages[0].metadata["turnOutcome"] == "completed"
    finally:
        await rt.close()
