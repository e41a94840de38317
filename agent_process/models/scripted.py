"""`provider: scripted`: an offline, deterministic model driven by `Model.spec.options`.

Each step, the first rule that fits answers it (`bundles.kinds.ScriptRule`):
- a rule **without** `afterTool` fits a step that follows new input (the last message is not a
  tool result) and whose latest user input matches `match` (a regex, searched; absent = any);
- a rule **with** `afterTool: NAME` fits only the step right after tool `NAME` ran (`*` = any
  tool), and `match` is then searched in the latest user input as well;
- no fitting rule: the reply is `defaultReply` (default `{input}`, an echo).
`reply` and string arguments of `toolCalls` may use `{input}` (the latest user input),
`{last_tool_result}` (the JSON text of the last tool result) and `{last_tool_name}`.
A rule with `toolCalls` makes the step call those tools (and continue); `delayMs` waits first.

When the turn is streamed (`ModelRequest.on_text`), the reply is handed out in pieces of
`streamChunkChars` characters (0: in one piece) with `streamDelayMs` between them; a rule may
override both. The response is the same either way.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agent_process.models.base import ModelError, ModelRequest, ModelResponse, Usage
from bundles.kinds import ScriptedOptions, ScriptRule
from protocol.conversation import Message, Role, ToolCall
from protocol.errors import ErrorCode


class _Rule:
    __slots__ = ("pattern", "rule")

    def __init__(self, rule: ScriptRule) -> None:
        self.rule = rule
        self.pattern = re.compile(rule.match, re.S) if rule.match is not None else None


class _Situation:
    """What the rules look at: the latest user input and the tool result just before."""

    __slots__ = ("input", "last_tool_name", "last_tool_result")

    def __init__(self, messages: list[Message]) -> None:
        self.input = next((m.content for m in reversed(messages) if m.role is Role.USER), "")
        last = messages[-1] if messages else None
        after_tool = last is not None and last.role is Role.TOOL
        self.last_tool_name = last.tool_name if after_tool and last is not None else None
        self.last_tool_result = last.content if after_tool and last is not None else ""

    def fill(self, template: str) -> str:
        return (
            template.replace("{input}", self.input)
            .replace("{last_tool_result}", self.last_tool_result)
            .replace("{last_tool_name}", self.last_tool_name or "")
        )


class ScriptedModel:
    def __init__(self, name: str, options: ScriptedOptions) -> None:
        self.name = name
        self._options = options
        negative = [k for k, v in _stream_settings(options) if v < 0]
        if negative:
            raise ModelError(
                ErrorCode.E_MODEL_SCRIPT,
                f"model {name!r}: {', '.join(sorted(set(negative)))} must be 0 or more",
            )
        try:
            self._rules = [_Rule(r) for r in options.script]
        except re.error as exc:
            raise ModelError(
                ErrorCode.E_MODEL_SCRIPT,
                f"model {name!r}: a script rule's match is not a valid regex: {exc}",
            ) from exc
        self.requests: deque[ModelRequest] = deque(maxlen=100)
        """The most recent requests, for tests and debugging."""

    @classmethod
    def from_options(cls, name: str, options: dict[str, Any], root: Path) -> ScriptedModel:
        try:
            parsed = msgspec.convert(options, ScriptedOptions)
            if parsed.script_file is not None:
                text = (root / parsed.script_file).read_bytes()
                extra = msgspec.yaml.decode(text, type=list[ScriptRule])
                parsed = msgspec.structs.replace(parsed, script=[*parsed.script, *extra])
        except (msgspec.ValidationError, msgspec.DecodeError, OSError) as exc:
            raise ModelError(
                ErrorCode.E_MODEL_SCRIPT,
                f"model {name!r}: invalid scripted options: {exc}",
                suggestion="see the scripted model in docs/guides/tools-and-models.md: match, "
                "afterTool, reply, toolCalls",
            ) from exc
        return cls(name, parsed)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        situation = _Situation(request.messages)
        rule = self._pick(situation)
        if rule is not None and rule.delay_ms > 0:
            await asyncio.sleep(rule.delay_ms / 1000)
        reply = situation.fill(
            (rule.reply or "") if rule is not None else self._options.default_reply
        )
        if request.on_text is not None and reply:
            await self._stream(reply, rule, request.on_text)
        calls = [
            ToolCall(
                id=c.id or f"call_{uuid.uuid4().hex[:12]}",
                name=c.name,
                args=_fill_args(c.args, situation),
            )
            for c in (rule.tool_calls if rule is not None else [])
        ]
        return ModelResponse(
            text=reply,
            tool_calls=calls,
            usage=_estimate(request, reply),
            finish_reason="tool_calls" if calls else "stop",
        )

    async def _stream(
        self, reply: str, rule: ScriptRule | None, on_text: Callable[[str], None]
    ) -> None:
        options = self._options
        size = options.stream_chunk_chars
        delay = options.stream_delay_ms
        if rule is not None:
            size = rule.stream_chunk_chars if rule.stream_chunk_chars is not None else size
            delay = rule.stream_delay_ms if rule.stream_delay_ms is not None else delay
        size = size or len(reply)
        for start in range(0, len(reply), size):
            if start:  # each piece on its own turn of the loop, as a provider's would arrive
                await asyncio.sleep(delay / 1000)
            on_text(reply[start : start + size])

    def _pick(self, situation: _Situation) -> ScriptRule | None:
        for compiled in self._rules:
            rule = compiled.rule
            if rule.after_tool is None:
                if situation.last_tool_name is not None:
                    continue
            elif situation.last_tool_name is None or rule.after_tool not in (
                "*",
                situation.last_tool_name,
            ):
                continue
            if compiled.pattern is None or compiled.pattern.search(situation.input):
                return rule
        return None

    async def aclose(self) -> None:
        return None


def _stream_settings(options: ScriptedOptions) -> list[tuple[str, int]]:
    rules = [(r.stream_chunk_chars, r.stream_delay_ms) for r in options.script]
    pairs = [("streamChunkChars", options.stream_chunk_chars),
             ("streamDelayMs", options.stream_delay_ms)]  # fmt: skip
    for chars, delay in rules:
        pairs += [("streamChunkChars", chars or 0), ("streamDelayMs", delay or 0)]
    return pairs


def _fill_args(value: Any, situation: _Situation) -> Any:
    if isinstance(value, str):
        return situation.fill(value)
    if isinstance(value, dict):
        return {k: _fill_args(v, situation) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_args(v, situation) for v in value]
    return value


def _estimate(request: ModelRequest, reply: str) -> Usage:
    """A deterministic stand-in for token counts (about 4 characters per token)."""
    chars = len(request.system or "") + sum(len(m.content) for m in request.messages)
    return Usage(input_tokens=chars // 4 + 1, output_tokens=len(reply) // 4 + 1)
