"""A process SIGKILLed between two events of a turn restarts with the written events replayed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import msgspec

from protocol.conversation import Role
from protocol.endpoints import StateLayout
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import TIMEOUT, make_runtime, scripted, turn

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "tests" / "fixtures" / "runtime" / "crash_agent.py"


async def test_sigkill_mid_turn_loses_no_written_event() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    async with asyncio.timeout(TIMEOUT):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(SCRIPT),
            "please hang",
            env=env,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        # The tool prints this after the user and assistant messages were written, before
        # its own result exists: the kill lands between two events of the turn.
        line = b"?"
        while line and line != b"HANGING\n":  # skip any log lines printed before it
            line = await proc.stdout.readline()
        assert line == b"HANGING\n"
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL

    paths = StateLayout.from_env().instance_paths("s", "k1", "a")
    lines = paths.events_jsonl.read_bytes().splitlines()
    assert [msgspec.json.decode(line)["type"] for line in lines] == ["append", "append"]
    assert not paths.base_jsonl.exists()  # the turn never reached its end

    script = [{"match": "again", "reply": "recovered"}]
    tool = b.tool("t", "tools/basic.py", [{"name": "hang"}, {"name": "echo"}])
    rt = await make_runtime(b.scripted(script=script), b.agent(tools=["t"]), tool)
    try:
        assert rt.recovered_events == 2
        replayed = rt.store.messages
        assert [m.role for m in replayed] == [Role.USER, Role.ASSISTANT]
        assert replayed[0].content == "please hang"
        assert replayed[1].tool_calls[0].name == "t__hang"
        result = await turn(rt, "again")
        assert result.outcome is TurnOutcome.COMPLETED and result.text == "recovered"
        # the interrupted call was answered before the new input, so the history stays valid
        seen = scripted(rt).requests[0].messages
        assert [m.role for m in seen] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.USER]
        assert (
            "E_AGENT_CRASHED" in seen[2].content
            and seen[2].tool_call_id == replayed[1].tool_calls[0].id
        )
    finally:
        await rt.close()
    base = [msgspec.json.decode(line) for line in paths.base_jsonl.read_bytes().splitlines()]
    assert [m["role"] for m in base] == ["user", "assistant", "tool", "user", "assistant"]
    assert not paths.events_jsonl.exists()  # closed with nothing unfolded: no empty file
