"""The key of a recorded model call: a hash of the request with what changes between two runs of
the same conversation left out (docs/guides/evals.md, Record and replay).

Kept: the provider and model, the system prompt, each message's role, text, tool calls (name and
arguments) and tool results, the tool catalog, the request params. Dropped: message ids, turn
ids, timestamps and metadata (new on every run), the endpoint (a recording made against one
server is replayed in CI without it). Tool-call ids are the provider's random strings; they are
renamed `call_0`, `call_1`, ... in order of appearance, so a tool result still points at its
call and two runs whose model chose different ids hash the same.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from agent_process.models.base import ModelRequest
from protocol.conversation import Message, Role

KEY_VERSION = 1
"""Part of every key: a change of what is normalized changes every key, never collides."""


def normalized(provider: str, model: str, request: ModelRequest) -> dict[str, Any]:
    """The request as hashed (also written beside each recording, to diff a miss against)."""
    ids: dict[str, str] = {}

    def call_id(raw: str) -> str:
        return ids.setdefault(raw, f"call_{len(ids)}")

    tools = [{"name": t.name, "description": t.description, "parameters": t.parameters}
             for t in request.tools]  # fmt: skip
    return {
        "v": KEY_VERSION,
        "provider": provider,
        "model": model,
        "system": request.system,
        "messages": [_message(m, call_id) for m in request.messages],
        "tools": sorted(tools, key=lambda t: str(t["name"])),
        "params": request.params,
    }


def _message(m: Message, call_id: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role.value, "content": m.content}
    if m.tool_calls:
        out["toolCalls"] = [
            {"id": call_id(c.id), "name": c.name, "args": c.args, "invalidArgs": c.invalid_args}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["toolCallId"] = call_id(m.tool_call_id)
    if m.tool_name is not None:
        out["toolName"] = m.tool_name
    return out


def request_hash(shape: dict[str, Any]) -> str:
    """sha256 of the canonical JSON (sorted keys) of a `normalized` request."""
    data = msgspec.json.encode(shape, order="sorted", enc_hook=repr)
    return hashlib.sha256(data).hexdigest()


def step_of(request: ModelRequest) -> int:
    """The step of the turn this request is (1: the turn's first model call): one more than the
    assistant messages since the latest user message."""
    step = 1
    for m in reversed(request.messages):
        if m.role == Role.USER:
            break
        step += m.role == Role.ASSISTANT
    return step
