"""The A2A part of the `api` connector: each agent of the swarm is an A2A v1.0 agent, served
by a2a-sdk's JSON-RPC server (the v0.3 method names `message/send`, `message/stream`,
`tasks/get` and `tasks/cancel` are accepted too).

- Card: `/a2a/<agent>/.well-known/agent-card.json`, one skill for the agent (its
  description) and one per tool its Agent resource declares; bearer auth; streaming.
- A message is a task. The instance is the `X-Goondan-Instance` header, else the message's
  `metadata.instanceKey`, else `a2a:<contextId>` (one conversation per A2A context), in the
  token's namespace (`_edge.Edge.key`).

- The reply is the task's artifact `reply` and it ends `completed` (or `failed`, with the
  coded error). The agent streams into the task (`_edge.Edge.pieces`), so `message/stream`
  sends the task, `working`, the model's text as artifact chunks (`append`) as it is written,
  a `working` status update with a message for each tool call that starts or finishes
  (metadata `tool`, `toolCallId`, `status`), then the whole reply as the artifact's last chunk
  (`append: false, lastChunk: true`: it replaces the chunks, so the artifact is exactly the
  reply even where chunks were merged or lost, and a step's text before a tool call does not
  stay), and the final status.
- A client-side call (ARCHITECTURE.md §10) ends the turn's part as `input-required`, with the
  JSON-RPC request as a data part of the status message. The client's next message on that
  task answers it: a data part holding a JSON-RPC response (`{result}` or `{error}`, `id`
  optional), else the message's data or text is the result.
- `tasks/cancel` of a task waiting for input answers its call as cancelled by the user
  (-32002) and the task is `canceled`; a running turn cannot be stopped (not cancelable).

Tasks live in memory, each seen only with the token that started it (`owner`): a restart
of the connector forgets them (the conversations stay).
Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from a2a.helpers.proto_helpers import (
    get_data_parts,
    get_text_parts,
    new_data_part,
    new_task_from_user_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError
from starlette.routing import BaseRoute

from bundles.sdk import AgentSummary, load_sibling

edge = load_sibling(__file__, "_edge")
INSTANCE_HEADER = "x-goondan-instance"
MODES = ["text/plain", "application/json"]


def interface(url: str) -> AgentInterface:
    return AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")


def card_of(agent: AgentSummary, swarm: str, url: str) -> AgentCard:
    about = agent.description or f"Agent {agent.name} of the goondan swarm {swarm}."
    skills = [AgentSkill(id=agent.name, name=agent.name, description=about, tags=["agent"])]
    skills += [AgentSkill(id=t.name, name=t.name, description=t.description or t.name,
                          tags=["tool"]) for t in agent.tools]  # fmt: skip
    bearer = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer"))
    return AgentCard(
        name=agent.name,
        description=about,
        version="1.0.0",
        supported_interfaces=[interface(url)],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=skills,
        security_schemes={"bearer": bearer},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
    )


def pending_call(task: Task | None) -> Mapping[str, Any] | None:
    """The JSON-RPC request a task waiting for input asked its client to run."""
    if task is None or task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        return None
    for data in get_data_parts(list(task.status.message.parts)):
        if isinstance(data, dict) and data.get("jsonrpc") == "2.0" and "method" in data:
            return data
    return None


def answer_of(parts: list[Part]) -> dict[str, Any]:
    """`Edge.answer`'s keywords from the client's message: a JSON-RPC response in a data
    part, else the data (or the text) as the result."""
    data = get_data_parts(parts)
    for item in data:
        if isinstance(item, dict) and ("result" in item or "error" in item):
            if "error" in item and isinstance(item["error"], dict):
                return {"error": item["error"]}
            return {"result": item.get("result")}
    if data:
        return {"result": data[0] if len(data) == 1 else data}
    return {"result": edge.result_of("\n".join(get_text_parts(parts)))}


class Executor(AgentExecutor):
    """One agent of the swarm as an A2A agent."""

    def __init__(self, edge_: Any, agent: str) -> None:
        self.edge = edge_
        self.agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        assert context.task_id
        assert context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        task = context.current_task
        if task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        call = pending_call(task)
        await updater.start_work()
        parts = list(message.parts)
        headers = context.call_context.state.get("headers", {})
        meta = dict(message.metadata) if message.HasField("metadata") else {}
        client = headers.get(edge.CLIENT_HEADER, "")
        key = self.edge.key(client, headers.get(INSTANCE_HEADER), meta.get("instanceKey"),
                            f"a2a:{context.context_id}")  # fmt: skip
        if call is not None:  # answered for this task's instance, as its token (§10)
            answer = answer_of(parts)
            pieces = self.edge.answer(str(call["id"]), stream=True, client=client,
                                      agent=self.agent, key=str(key), **answer)  # fmt: skip
        else:
            text = "\n".join(get_text_parts(parts))
            pieces = self.edge.pieces(self.agent, str(key), text, stream=True)
        await self._report(updater, pieces)

    async def _report(self, updater: TaskUpdater, pieces: Any) -> None:
        streamed = False
        try:
            async for piece in pieces:
                if piece.tool is not None:
                    await self._tool(updater, piece.tool)
                elif piece.done is not None:
                    await self._finish(updater, piece.done, streamed)
                elif piece.text:
                    append = streamed and not piece.fresh  # a new step's text starts over
                    await updater.add_artifact([new_text_part(piece.text)], artifact_id="reply",
                                               name="reply", append=append)  # fmt: skip
                    streamed = True
        except edge.Refusal as exc:
            said = updater.new_agent_message([new_text_part(exc.message)], {"code": exc.code})
            await updater.failed(said)

    async def _tool(self, updater: TaskUpdater, tool: Any) -> None:
        what = "started" if tool.status is None else f"finished: {tool.status}"
        meta = {"tool": tool.name, "toolCallId": tool.call_id, "status": tool.status or "started"}
        said = updater.new_agent_message([new_text_part(f"{tool.name} {what}")], meta)
        await updater.update_status(TaskState.TASK_STATE_WORKING, said)

    async def _finish(self, updater: TaskUpdater, done: Any, streamed: bool) -> None:
        usage = dict(done.usage)
        if done.error is not None:
            text = new_text_part(f"{done.error.code}: {done.error.message}")
            await updater.failed(updater.new_agent_message([text], {"code": done.error.code}))
        elif done.call is not None:
            call = dict(done.call)
            ask = new_text_part(f"run {call.get('method')} and answer with its result")
            status = updater.new_agent_message([ask, new_data_part(call)], {"usage": usage})
            await updater.requires_input(status)
        else:
            if done.text or streamed:  # the whole reply replaces the chunks
                await updater.add_artifact([new_text_part(done.text)], artifact_id="reply",
                                           name="reply", append=False, last_chunk=True)  # fmt: skip
            await updater.complete(updater.new_agent_message([], {"usage": usage}))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        call = pending_call(context.current_task)
        if call is None:
            raise UnsupportedOperationError(
                message="the agent's turn is running and cannot be stopped (it finishes and "
                "is recorded); a task can be canceled while it waits for input"
            )
        await self.edge.cancel(str(call["id"]), "the A2A client canceled the task")
        assert context.task_id
        assert context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def owner(context: ServerCallContext) -> str:
    """Whose tasks a request sees: its token's (the gate's header). A task is found by its id
    only with the token that started it: another client cannot read its reply or continue it
    (with sharedInstances too: the instance is shared, a client's tasks are not)."""
    return str(context.state.get("headers", {}).get(edge.CLIENT_HEADER, ""))


def routes(edge_: Any, public_url: str) -> list[BaseRoute]:
    """The card and JSON-RPC routes of every agent the Connection serves."""
    found: list[BaseRoute] = []
    swarm = edge_.ctx.swarm
    for agent in swarm.agents:
        if agent.name not in edge_.agents:
            continue
        base = f"/a2a/{agent.name}"
        card = card_of(agent, swarm.name, f"{public_url}{base}")
        executor = Executor(edge_, agent.name)
        handler = DefaultRequestHandler(executor, InMemoryTaskStore(owner_resolver=owner), card)
        found += create_agent_card_routes(card, card_url=f"{base}/.well-known/agent-card.json")
        found += create_jsonrpc_routes(handler, rpc_url=base, enable_v0_3_compat=True)
    return found
