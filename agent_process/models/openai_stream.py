"""`provider: openai`, streamed: the same Chat Completions request with `stream: true`.

Used when a turn is streamed (`ModelRequest.on_text`). The SDK sends and retries the request
and raises the provider's errors; the server-sent events are read from the body here (sse.py,
faster than the SDK's decoder), an `error` object in the middle of the stream raised as the
SDK raises it; each chunk is decoded into the few fields a turn uses (msgspec), the text
pieces go to `on_text` as they arrive, and tool calls are put back together from their
fragments (by `index`). `stream_options.include_usage` asks for the final usage chunk, so what
`openai_chat` makes of the `Streamed` reply (text, tool calls, usage, finish reason) is what
the unstreamed call returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import msgspec
import openai

from agent_process.models.base import ModelError, Usage
from agent_process.models.errors import map_provider_error
from agent_process.models.sse import EventParser, SseEvent
from protocol.errors import ErrorCode


class _FunctionPart(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _CallPart(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _FunctionPart | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_CallPart] | None = None


class _ChunkChoice(msgspec.Struct):
    index: int = 0
    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = 0


class _ChunkUsage(msgspec.Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: _PromptDetails | None = None


class _Chunk(msgspec.Struct):
    choices: list[_ChunkChoice] = msgspec.field(default_factory=list)
    usage: _ChunkUsage | None = None
    error: Any = None
    """A provider's failure in the middle of the stream (`{"error": {"message": ...}}`)."""


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
DRAIN_SECONDS = 0.1


class Streamed(msgspec.Struct, kw_only=True):
    text: str
    calls: list[tuple[str, str, str | None]]
    """(id, name, raw arguments) of each tool call, in order."""
    usage: Usage
    finish_reason: str | None


class _Assembly:
    """The reply as its chunks arrive."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self.on_text = on_text
        self.text: list[str] = []
        self.calls: dict[int, tuple[list[str], list[str], list[str]]] = {}
        """index -> (id, name, argument fragments)."""
        self.finish_reason: str | None = None
        self.usage = Usage()
        self.chunks = 0

    def add(self, chunk: _Chunk) -> None:
        self.chunks += 1
        usage = chunk.usage
        if usage is not None:
            details = usage.prompt_tokens_details
            self.usage = Usage(
                input_tokens=usage.prompt_tokens or 0,
                output_tokens=usage.completion_tokens or 0,
                cached_input_tokens=(details.cached_tokens or 0) if details else 0,
            )
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                self.on_text(delta.content)
            for part in delta.tool_calls or ():
                ids, names, args = self.calls.setdefault(part.index, ([], [], []))
                if part.id:
                    ids.append(part.id)
                if part.function is not None:
                    names.append(part.function.name or "")
                    args.append(part.function.arguments or "")
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def streamed(self) -> Streamed:
        calls = [("".join(ids), "".join(names), "".join(args) or None)
                 for ids, names, args in (self.calls[i] for i in sorted(self.calls))]  # fmt: skip
        return Streamed(text="".join(self.text), calls=calls, usage=self.usage,
                        finish_reason=self.finish_reason)  # fmt: skip


async def stream_chat(
    client: openai.AsyncOpenAI, model: str, body: dict[str, Any], on_text: Callable[[str], None]
) -> Streamed:
    """One streamed chat completion; raises ModelError (E_MODEL_*) as `complete` does."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    assembly = _Assembly(on_text)
    try:
        # the SDK sends, retries and maps an error status; the body is read here (sse.py)
        stream = await client.post("/chat/completions", body=body, cast_to=object, stream=True,
                                   stream_cls=openai.AsyncStream[object])  # fmt: skip
        async with stream:
            await _read(stream.response, assembly)
    except openai.OpenAIError as exc:
        raise map_provider_error("openai", model, exc) from exc
    except (ValueError, msgspec.ValidationError) as exc:  # a chunk that is not JSON, or not one
        raise _unusable(model, f"a chunk is unusable: {exc}") from exc
    if assembly.chunks == 0:
        raise _unusable(model, "it ended without a chunk")
    return assembly.streamed()


async def _read(response: httpx2.Response, assembly: _Assembly) -> None:
    """The chunks up to `[DONE]` into `assembly`, then the end of the body (so the connection
    can serve the next call); the SDK's transport errors, as its own stream raises them."""
    events = EventParser()
    parts = response.aiter_bytes()
    try:
        async for part in parts:
            if _add(events.feed(part), assembly, response):
                await _drain(parts)
                return
        _add(events.end(), assembly, response)
    except httpx2.TimeoutException as exc:
        raise openai.APITimeoutError(request=response.request) from exc
    except httpx2.RequestError as exc:
        raise openai.APIConnectionError(request=response.request) from exc


def _add(events: list[SseEvent], assembly: _Assembly, response: httpx2.Response) -> bool:
    """True at `[DONE]`."""
    for _, data in events:
        if data.startswith(b"[DONE]"):
            return True
        chunk = _decode_chunk(data)
        if chunk.error is not None:
            raise _stream_error(response, chunk.error)
        assembly.add(chunk)
    return False


async def _drain(parts: AsyncIterator[bytes]) -> None:
    """What follows `[DONE]` (the chunked body's end), so the connection serves the next call:
    a server that keeps talking loses the connection after DRAIN_SECONDS instead of holding
    the turn."""
    with contextlib.suppress(TimeoutError, httpx2.RequestError, httpx2.StreamError):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in parts:
                pass


def _stream_error(response: httpx2.Response, error: object) -> openai.APIError:
    """An `error` object in the middle of the stream, as the SDK raises it."""
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    return openai.APIError(message, response.request, body=error)


def _unusable(model: str, why: str) -> ModelError:
    return ModelError(
        ErrorCode.E_MODEL_ERROR,
        f"openai model {model!r}: the server's streamed chat completion is unusable: {why}",
        suggestion="check that the endpoint speaks the OpenAI Chat Completions API",
    )
