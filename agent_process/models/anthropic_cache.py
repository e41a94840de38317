"""Anthropic prompt caching: `cache_control` breakpoints and cached token counts.

By default (`Model.spec.options.promptCaching: false` turns it off) a request marks three
breakpoints, within the API's four: the last tool definition, the system prompt, and the last
content block of the conversation. Everything up to a breakpoint is the same on the next step
of the turn (and the next turn), so the provider reads it from its cache at a tenth of the
input price instead of processing it again; a prefix under the model's minimum cacheable
length is simply not cached.

The API counts cached tokens apart: `input_tokens` excludes `cache_read_input_tokens` and
`cache_creation_input_tokens`. `usage_of` folds them back so `Usage.input_tokens` means every
input token for both providers, and `cached_input_tokens` the part read from the cache.
"""

from __future__ import annotations

from typing import Any

from agent_process.models.base import Usage

EPHEMERAL = {"type": "ephemeral"}


def add_breakpoints(kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """Mark the request's stable prefix (in place): tools, system prompt, conversation."""
    tools = kwargs.get("tools")
    if tools:
        tools[-1] = {**tools[-1], "cache_control": EPHEMERAL}
    system = kwargs.get("system")
    if isinstance(system, str) and system:
        kwargs["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    if messages and messages[-1].get("content"):
        blocks = messages[-1]["content"]
        blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}


def usage_of(usage: Any) -> Usage:
    read = getattr(usage, "cache_read_input_tokens", 0) or 0
    written = getattr(usage, "cache_creation_input_tokens", 0) or 0
    return Usage(
        input_tokens=(getattr(usage, "input_tokens", 0) or 0) + read + written,
        output_tokens=getattr(usage, "output_tokens", 0) or 0,
        cached_input_tokens=read,
    )
