"""The `api` connector's A2A and MCP edges through a real daemon, driven by the `a2a-sdk`
client and the `mcp` SDK client: each completes a turn and a client-side (deferred) call;
A2A streams, gets and cancels tasks; MCP reports progress; a wrong token or agent is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import httpx2
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import get_data_parts, new_data_part
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.integration.api_edge import TOKEN, Edge, start_edge
from tests.integration.api_edge import conversation as history
from tests.integration.conftest import StartDaemon

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _message(text: str = "", *, task: Task | None = None, data: Any = None) -> Message:
    parts = [Part(text=text)] if text else [new_data_part(data)]
    message = Message(role=Role.ROLE_USER, message_id=f"m-{id(parts)}", parts=parts)
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    return message


async def _task(client: Any, message: Message) -> tuple[Task, list[Any]]:
    """Send; the last task state seen and every stream response."""
    responses, task = [], None
    async for response in client.send_message(SendMessageRequest(message=message)):
        responses.append(response)
        if response.HasField("task"):
            task = response.task
        elif task is not None and response.HasField("status_update"):
            task.status.CopyFrom(response.status_update.status)
    assert task is not None, responses
    return task, responses


async def test_an_a2a_client_sends_streams_and_answers_a_client_side_call(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        async with httpx.AsyncClient(headers=AUTH, timeout=30) as http:
            card = await A2ACardResolver(http, f"{edge.url}/a2a/front").get_agent_card()
            plain = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
            streaming = await create_client(card, ClientConfig(httpx_client=http, streaming=True))
            done, _ = await _task(plain, _message("hello a2a"))
            fetched = await plain.get_task(GetTaskRequest(id=done.id))
            streamed, responses = await _task(streaming, _message("stream this"))
            waiting, _ = await _task(plain, _message("calendar today"))
            answered, _ = await _task(plain, _message(task=waiting, data={"result": {"n": 1}}))
            # the resumed turn streams its reply too (docs/guides/api.md's example prints it)
            later, _ = await _task(plain, _message("calendar later"))
            answer = SendMessageRequest(message=_message(task=later, data={"result": {"n": 2}}))
            resumed = [r async for r in streaming.send_message(answer)]  # no task: updates only
            second, _ = await _task(plain, _message("calendar tomorrow"))
            canceled = await plain.cancel_task(CancelTaskRequest(id=second.id))
            with pytest.raises(TaskNotCancelableError):  # it is completed
                await plain.cancel_task(CancelTaskRequest(id=done.id))
            stranger = await http.get(f"{edge.url}/a2a/nobody/.well-known/agent-card.json")
        async with httpx.AsyncClient(timeout=30) as anonymous:
            refused = await anonymous.get(f"{edge.url}/a2a/front/.well-known/agent-card.json")
    assert card.name == "front" and "calendar" in card.description
    assert {s.id for s in card.skills} == {"front", "client__calendar", "clock__now"}
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in fetched.artifacts for p in a.parts] == ["echo: hello a2a"]
    assert streamed.status.state == TaskState.TASK_STATE_COMPLETED
    kinds = [r.WhichOneof("payload") for r in responses]
    assert kinds[0] == "task" and "artifact_update" in kinds and kinds[-1] == "status_update"
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    request = get_data_parts(list(waiting.status.message.parts))[0]
    assert (request["jsonrpc"], request["method"]) == ("2.0", "calendar.read")
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    reply = [p.text for a in answered.artifacts for p in a.parts]
    assert reply and reply[-1].startswith("calendar says")
    chunks = [r.artifact_update for r in resumed if r.HasField("artifact_update")]
    assert len(chunks) > 1 and chunks[-1].last_chunk and not chunks[0].last_chunk
    assert chunks[-1].artifact.parts[0].text.startswith("calendar says")
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert stranger.status_code == 404
    assert refused.status_code == 401
    instance = f"a2a:{done.context_id}"  # one conversation per A2A context
    assert history(instance) == ["hello a2a", "echo: hello a2a"]


async def _mcp(edge: Edge, token: str = TOKEN, seen: list[int] | None = None) -> Any:
    async def record(response: httpx2.Response) -> None:
        if seen is not None:
            seen.append(response.status_code)

    headers = {"Authorization": f"Bearer {token}"}
    http = httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [record]})
    return http, streamable_http_client(f"{edge.url}/mcp", http_client=http)


async def test_an_mcp_client_asks_agents_and_answers_a_client_side_call(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(90):
        edge = await start_edge(start_daemon)
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        http, transport = await _mcp(edge)
        async with http, transport as (read, write, *_), ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            asked = await session.call_tool("ask_front", {"input": "hello mcp"},
                                            progress_callback=on_progress)  # fmt: skip
            keyed = await session.call_tool("ask_back", {"input": "hi", "instanceKey": "ops"})
            pending = await session.call_tool("ask_front", {"input": "calendar now"})
            call = pending.structured_content["pendingCall"]
            answer = {"id": call["id"], "result": {"events": []}}
            answered = await session.call_tool("answer_call", answer)
            unknown = await session.call_tool("ask_nobody", {"input": "x"})
            empty = await session.call_tool("ask_front", {"input": ""})
    assert {t.name for t in tools.tools} == {"ask_front", "ask_back", "ask_capped", "answer_call"}
    assert (asked.is_error, asked.content[0].text) == (False, "echo: hello mcp")
    assert progress and progress[-1][1] == "echo: hello mcp"  # while it worked, then its reply
    assert keyed.content[0].text == "back: hi" and history("ops", "back") == ["hi", "back: hi"]
    assert call["method"] == "calendar.read"
    assert answered.content[0].text.startswith("calendar says")
    assert unknown.is_error and unknown.structured_content["code"] == "E_AGENT_NOT_FOUND"
    assert empty.is_error and empty.structured_content["code"] == "E_API_BAD_REQUEST"


async def test_an_mcp_client_without_the_token_is_refused(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        edge = await start_edge(start_daemon)
        statuses: list[int] = []
        http, transport = await _mcp(edge, token="wrong", seen=statuses)
        with pytest.raises(ExceptionGroup) as refused:
            async with http, transport as (read, write, *_), ClientSession(read, write) as s:
                await s.initialize()
    assert refused.group_contains(MCPError)
    assert statuses == [401]
