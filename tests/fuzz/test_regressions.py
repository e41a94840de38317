"""Bugs the fuzzers found, pinned by example (each through the real executor)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from agent_process.results import ResultStatus, ToolResult
from protocol.conversation import Role, ToolCall, new_message
from protocol.errors import ErrorCode
from tests.fuzz.test_tool_args import make_runtime, step_of


async def run(work: Path, name: str, args: dict[str, Any]) -> ToolResult:
    runtime = await make_runtime(work)
    try:
        call = ToolCall(id="c1", name=name, args=args)
        message = new_message(Role.ASSISTANT, "", tool_calls=[call])
        return await runtime._tool_calls.run(step_of(runtime), call, message)
    finally:
        await runtime.close()


async def test_a_lone_surrogate_in_the_arguments_is_invalid_args(tmp_path: Path) -> None:
    """json.loads lets "\\ud800" through; it used to escape as a bare UnicodeEncodeError."""
    async with asyncio.timeout(30):
        for name in ("file-system__mkdir", "bash__script", "text-transform__case"):
            args = {"path": "\ud800"} if "__case" not in name else {"text": "x", "to": "\ud800"}
            result = await run(tmp_path, name, args)
            assert result.status is ResultStatus.ERROR and result.error is not None
            assert result.error.code == ErrorCode.E_TOOL_INVALID_ARGS, result.error
            assert "lone surrogate" in result.error.message or "invalid arguments" in (
                result.error.message
            )
        assert not os.listdir(tmp_path)  # nothing was made


async def test_an_integral_float_is_an_integer_for_text_slice(tmp_path: Path) -> None:
    """JSON Schema's integer accepts 1.0; slicing with it used to raise TypeError."""
    async with asyncio.timeout(30):
        args = {"text": "hello", "start": 1.0, "end": 3.0}
        result = await run(tmp_path, "text-transform__slice", args)
        assert result.status is ResultStatus.OK, result.error
        assert result.output == {"text": "el", "total": 5}
