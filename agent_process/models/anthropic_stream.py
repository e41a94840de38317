"""`provider: anthropic`, streamed: the same Messages request through the SDK's `stream()`.

Used when a turn is streamed (`ModelRequest.on_text`): the SDK's message stream hands the text
deltas to `on_text` as they arrive and assembles the final message from the events
(`message_start`, `content_block_*`, `message_delta`), which `anthropic_messages` reads exactly
as it reads the unstreamed reply, so text, tool calls, usage and stop reason are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import anthropic

from agent_process.models.base import ModelError
from agent_process.models.errors import map_provider_error
from protocol.errors import ErrorCode


async def stream_messages(
    client: anthropic.AsyncAnthropic,
    model: str,
    messages: list[dict[str, Any]],
    kwargs: dict[str, Any],
    on_text: Callable[[str], None],
) -> Any:
    """The final message of one streamed request (the SDK's `Message`); raises ModelError
    (E_MODEL_*) as `complete` does."""
    try:
        async with client.messages.stream(
            model=model, messages=cast(Any, messages), **kwargs
        ) as stream:
            async for text in stream.text_stream:
                on_text(text)
            return await stream.get_final_message()
    except anthropic.AnthropicError as exc:
        raise map_provider_error("anthropic", model, exc) from exc
    except ValueError as exc:  # an event that is not JSON
        raise ModelError(
            ErrorCode.E_MODEL_ERROR,
            f"anthropic model {model!r}: the server's message stream is unusable: {exc}",
            suggestion="check that the endpoint speaks the Anthropic Messages API",
        ) from exc
