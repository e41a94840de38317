"""Studio's HTTP routes (Starlette): JSON for each view, server-sent events for live ones, the
static page (`static/`: plain HTML, CSS and JS, no build step, nothing from a CDN)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from orchestrator.control import localstate
from orchestrator.control.client import new_request_id
from orchestrator.observe import logview
from orchestrator.observe.conversations import InstanceConversation, Line, NoSuchInstance
from orchestrator.observe.loglines import LogLine
from orchestrator.studio import evals, views
from orchestrator.studio.cluster import ClusterUnavailable, ClusterViews
from orchestrator.studio.hub import ProcessHub, sse, sse_loop
from orchestrator.studio.link import DaemonLink
from orchestrator.studio.runtime import RuntimeIndex
from protocol.control import CallsResolve, ControlReply, InstanceList, OrchestratorInfo
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo

STATIC = Path(__file__).parent / "static"
CONVERSATION_INTERVAL = 0.3
LOGS_INTERVAL = 0.5
LOG_LINES = 300
APPROVE_METHOD = "goondan.approve"


class BadRequest(Exception):
    pass


@dataclass(slots=True)
class Studio:
    layout: StateLayout
    swarm: str
    link: DaemonLink
    index: RuntimeIndex
    hub: ProcessHub
    allow_actions: bool
    cluster: ClusterViews = field(init=False)
    """What a cluster node shows: the whole swarm (studio/cluster.py)."""

    def __post_init__(self) -> None:
        self.cluster = ClusterViews(self.link, RuntimeIndex(self.layout, self.swarm))

    def node(self) -> OrchestratorInfo | None:
        """The daemon when it is a cluster node (asked each time: it may have restarted)."""
        info = self.link.info()
        return info if info is not None and info.node else None

    async def events(self) -> RuntimeIndex:
        """The runtime events: this machine's files, or every node's on a cluster node."""
        if self.node() is not None:
            return await self.cluster.refresh()
        self.index.refresh()
        return self.index

    async def instances(self) -> list[dict[str, Any]]:
        """Every instance with its process's status: the daemon's answer while one runs (the
        files alone say `stopped` of a live one), the files when none does."""
        if self.node() is not None:
            return await self.cluster.instances()
        if self.link.info() is not None:
            reply = await self.link.ask(InstanceList(request_id=new_request_id()))
            if reply.ok and isinstance(reply.result, dict):
                return list(reply.result["instances"])
        return localstate.instances(self.layout, self.swarm)


def _error(status: int, code: str, message: str, suggestion: str | None = None) -> JSONResponse:
    info = ErrorInfo(code=code, message=message, suggestion=suggestion)
    return JSONResponse({"error": msgspec.to_builtins(info)}, status_code=status)


def _reply(reply: ControlReply) -> JSONResponse:
    if reply.ok:
        return JSONResponse({"result": reply.result})
    error = reply.error or ErrorInfo(code=ErrorCode.E_CONTROL_BAD_REQUEST, message="failed")
    status = 503 if error.code == ErrorCode.E_DAEMON_NOT_RUNNING else 409
    return _error(status, error.code, error.message, error.suggestion)


async def _body(request: Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError:
        raise BadRequest("the body is not JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value or len(value) > 512:
        raise BadRequest(f"{key!r} must be a non-empty string")
    return value


class _Handlers:
    def __init__(self, studio: Studio) -> None:
        self.s = studio

    async def index(self, _: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def info(self, _: Request) -> Response:
        s = self.s
        daemon = s.link.info()
        return JSONResponse(
            {
                "swarm": s.swarm,
                "allowActions": s.allow_actions,
                "daemon": msgspec.to_builtins(daemon) if daemon else None,
            }
        )

    async def processes(self, _: Request) -> Response:
        s = self.s
        return JSONResponse(await s.hub.snapshot())

    async def processes_stream(self, request: Request) -> Response:
        s = self.s
        return _stream(s.hub.subscribe(request))

    async def restart(self, request: Request) -> Response:
        s = self.s
        data = await _body(request)
        key = _text(data, "instanceKey") if data.get("instanceKey") is not None else None
        return _reply(await s.link.restart(_text(data, "agent"), key))

    async def stop(self, request: Request) -> Response:
        s = self.s
        data = await _body(request)
        agent, key = _text(data, "agent"), _text(data, "instanceKey")
        return _reply(await s.link.stop_process(agent, key))

    async def instances(self, request: Request) -> Response:
        if (run := request.query_params.get("eval")) is not None:
            layout, swarm = evals.state(self.s.layout, run)
            return JSONResponse({"instances": localstate.instances(layout, swarm)})
        return JSONResponse({"instances": await self.s.instances()})

    async def conversation_stream(self, request: Request) -> Response:
        s = self.s
        key, agent = request.query_params.get("key", ""), request.query_params.get("agent")
        run = request.query_params.get("eval")
        node = s.node()
        poll: Callable[[], Awaitable[list[Line]]]
        try:
            if run is not None:  # a case of a kept eval run: its own daemon's state
                layout, swarm = evals.state(s.layout, run)
                poll = _local_poll(InstanceConversation(layout, swarm, key, agent or None))
            elif node is not None:
                poll = (await s.cluster.conversation(node, key, agent or None)).poll
            else:
                poll = _local_poll(InstanceConversation(s.layout, s.swarm, key, agent or None))
        except NoSuchInstance as exc:
            return _error(404, exc.error.code, exc.error.message, exc.error.suggestion)

        async def added() -> str | None:
            lines = await poll()
            return sse("messages", [line.as_json() for line in lines]) if lines else None

        return _stream(sse_loop(request, added, CONVERSATION_INTERVAL))

    async def trace(self, request: Request) -> Response:
        if (run := request.query_params.get("eval")) is not None:
            index = RuntimeIndex(*evals.state(self.s.layout, run))
            index.refresh()
        else:
            index = await self.s.events()
        trace_id = request.path_params["trace_id"]
        rows = views.waterfall(index.of_trace(trace_id))
        if not rows:
            return _error(
                404,
                ErrorCode.E_EVENT_NOT_FOUND,
                f"no runtime events of trace "
                f"{trace_id!r} (Studio keeps the newest {index.events.maxlen})",
            )
        return JSONResponse({"traceId": trace_id, "spans": rows})

    async def graph(self, _: Request) -> Response:
        s = self.s
        index = await s.events()
        agents = {str(r["agent"]) for r in await s.instances()}
        snapshot = await s.hub.snapshot()
        connectors = {p["name"] for p in snapshot["processes"] if p["kind"] == "connector"}
        agents |= {p["name"] for p in snapshot["processes"] if p["kind"] == "agent"}
        return JSONResponse(views.graph(index.events, agents, connectors))

    async def charts(self, _: Request) -> Response:
        index = await self.s.events()
        now = time.time()
        return JSONResponse(views.charts(index.since(now - 3600), now))

    async def calls(self, _: Request) -> Response:
        s = self.s
        reply = await s.link.calls()
        rows = reply.result["calls"] if reply.ok else localstate.pending_calls(s.layout, s.swarm)
        for row in rows:
            row["approval"] = row.get("method") == APPROVE_METHOD
        return JSONResponse({"calls": rows, "daemon": reply.ok})

    async def resolve(self, request: Request) -> Response:
        s = self.s
        return _reply(
            await s.link.resolve(_resolution(request.path_params["call_id"], await _body(request)))
        )

    async def decide(self, request: Request) -> Response:
        """Approve or deny: the control request of `goondan calls approve|deny`."""
        decision = request.path_params["decision"]
        if decision not in ("approve", "deny"):
            raise BadRequest(f"no action {decision!r} on a call: approve or deny")
        data = await _body(request)
        message = data.get("message")
        if message is not None and (not isinstance(message, str) or len(message) > 512):
            raise BadRequest("message must be a string of at most 512 characters")
        call_id = request.path_params["call_id"]
        return _reply(await self.s.link.decide(call_id, decision == "approve", message))

    async def evals(self, _: Request) -> Response:
        return JSONResponse({"runs": evals.listing(self.s.layout)})

    async def eval_run(self, request: Request) -> Response:
        return JSONResponse(evals.one(self.s.layout, request.path_params["run_id"]))

    async def logs(self, request: Request) -> Response:
        s = self.s
        keep = _log_filter(request)
        if s.node() is not None:
            lines = await s.cluster.lines(keep)
            return JSONResponse({"lines": [_node_row(line) for line in lines[-LOG_LINES:]]})
        readers = _log_readers(s)
        records = [r for r in logview.merged([rd.read_new() for rd in readers]) if keep(r)]
        return JSONResponse({"lines": [_log_row(r) for r in records[-LOG_LINES:]]})

    async def logs_stream(self, request: Request) -> Response:
        s = self.s
        keep = _log_filter(request)
        if s.node() is not None:
            return _stream(sse_loop(request, await _node_lines(s, keep), LOGS_INTERVAL))
        readers = _log_readers(s)
        for reader in readers:  # from the end: the page asked /api/logs for what was there
            reader.read_new()

        async def new_lines() -> str | None:
            readers.extend(_log_readers(s, known={str(r.source.path) for r in readers}))
            records = [r for r in logview.merged([rd.read_new() for rd in readers]) if keep(r)]
            return sse("lines", [_log_row(r) for r in records]) if records else None

        return _stream(sse_loop(request, new_lines, LOGS_INTERVAL))


def build(studio: Studio) -> Starlette:
    h = _Handlers(studio)
    routes = [
        Route("/", h.index),
        Route("/api/info", h.info),
        Route("/api/processes", h.processes),
        Route("/api/stream/processes", h.processes_stream),
        Route("/api/processes/restart", h.restart, methods=["POST"]),
        Route("/api/processes/stop", h.stop, methods=["POST"]),
        Route("/api/instances", h.instances),
        Route("/api/stream/conversation", h.conversation_stream),
        Route("/api/trace/{trace_id}", h.trace),
        Route("/api/graph", h.graph),
        Route("/api/charts", h.charts),
        Route("/api/calls", h.calls),
        Route("/api/calls/{call_id}", h.resolve, methods=["POST"]),
        Route("/api/calls/{call_id}/{decision}", h.decide, methods=["POST"]),
        Route("/api/evals", h.evals),
        Route("/api/evals/{run_id}", h.eval_run),
        Route("/api/logs", h.logs),
        Route("/api/stream/logs", h.logs_stream),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    handlers = {
        BadRequest: _bad_request,
        ClusterUnavailable: _unavailable,
        evals.RunNotFound: _no_run,
    }
    return Starlette(routes=routes, exception_handlers=handlers)


async def _unavailable(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ClusterUnavailable)
    error = exc.error
    return _error(503, error.code, error.message, error.suggestion)


async def _no_run(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, evals.RunNotFound)
    error = exc.error
    return _error(404, error.code, error.message, error.suggestion)


async def _bad_request(_: Request, exc: Exception) -> Response:
    return _error(400, ErrorCode.E_STUDIO_BAD_REQUEST, str(exc))


def _stream(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        events, media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )


def _resolution(call_id: str, data: dict[str, Any]) -> CallsResolve:
    """`{"result": ...}` or `{"error": {"code": int, "message": str, "data"?: ...}}`."""
    if ("result" in data) == ("error" in data):
        raise BadRequest("send exactly one of result and error")
    if "result" in data:
        return CallsResolve(
            request_id=new_request_id(), call_id=call_id, result=data["result"], timeout_ms=30_000
        )
    error = data["error"]
    if not isinstance(error, dict) or type(error.get("code")) is not int:
        raise BadRequest("error must be {code: integer, message: string}")
    return CallsResolve(
        request_id=new_request_id(),
        call_id=call_id,
        error_code=error["code"],
        error_message=str(error.get("message") or ""),
        error_data=error.get("data"),
        timeout_ms=30_000,
    )


def _log_filter(request: Request) -> logview.Filter:
    q = request.query_params
    try:
        since = logview.parse_since(q["since"], time.time()) if q.get("since") else None
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return logview.Filter(
        agent=q.get("agent") or None,
        instance=q.get("instance") or None,
        trace=q.get("trace") or None,
        since=since,
    )


def _log_readers(s: Studio, known: set[str] | None = None) -> list[logview.Reader]:
    return [
        logview.Reader(src)
        for src in logview.discover(s.layout, s.swarm)
        if known is None or str(src.path) not in known
    ]


def _log_row(record: logview.Record) -> dict[str, Any]:
    return {
        "at": record.at,
        "agent": record.agent,
        "instance": record.instance,
        "trace": record.trace,
        "kind": record.source.kind,
        "text": logview.render(record),
        "data": json.loads(logview.as_json(record)),
    }


def _local_poll(conversation: InstanceConversation) -> Callable[[], Awaitable[list[Line]]]:
    async def poll() -> list[Line]:
        return conversation.poll()

    return poll


def _node_row(line: LogLine) -> dict[str, Any]:
    return {**_log_row(line.record()), "node": line.node}


async def _node_lines(s: Studio, keep: logview.Filter) -> Poll:
    """A cluster node's new lines for a log stream: every node keeps how far this stream
    read (its follower id), from the end at the start (the page asked /api/logs for what was
    there)."""
    follower = f"studio-logs-{new_request_id()}"
    await s.cluster.lines(keep, follower)

    async def new_lines() -> str | None:
        try:
            lines = await s.cluster.lines(keep, follower)
        except ClusterUnavailable:  # the node is away for now: the next poll asks again
            return None
        return sse("lines", [_node_row(line) for line in lines]) if lines else None

    return new_lines


Poll = Callable[[], Awaitable[str | None]]
