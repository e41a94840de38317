"""`self-restart__request` (the `restart` call): an agent asks for its swarm to be restarted.

The use is an agent that edited its own bundle (prompt, tools) and wants the edit live. So the
bundle is re-read first: an invalid edit is answered to the tool as a coded error naming every
diagnostic (the model can fix it), and nothing is touched. A valid one is answered at once, then
the reload restarts what changed and every other agent of the swarm is restarted too.

The answer must go out before any restart: each restart drains its process (`shutdown`, the
current turn finishes), and the caller's turn is waiting on this very answer.
"""

from __future__ import annotations

import asyncio

import structlog

from bundles.diagnostics import BundleError
from orchestrator.reload.apply import Reloader
from orchestrator.routing.broker import Broker
from orchestrator.supervision.table import ProcessEntry
from protocol.errors import ErrorCode, ErrorInfo
from protocol.ids import ProcessKind
from protocol.messages import CallPayload, CallResultPayload, ShutdownReason

log = structlog.get_logger("goondan.orchestrator")

MAX_DIAGNOSTICS = 10


class SelfRestart:
    def __init__(self, reloader: Reloader, broker: Broker) -> None:
        self.reloader = reloader
        self.broker = broker
        self._tasks: set[asyncio.Task[None]] = set()

    def on_call(self, entry: ProcessEntry, payload: CallPayload) -> None:
        task = asyncio.ensure_future(self._run(entry, payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, entry: ProcessEntry, payload: CallPayload) -> None:
        reason = str(payload.args.get("reason") or "requested by the agent")
        problem = await self._check_bundle()
        if problem is not None:
            self.broker.reply(
                entry, CallResultPayload(call_id=payload.call_id, ok=False, error=problem)
            )
            return
        swarm = self.reloader.source.swarm
        self.broker.reply(
            entry,
            CallResultPayload(
                call_id=payload.call_id,
                ok=True,
                result={
                    "scheduled": True,
                    "swarm": swarm,
                    "reason": reason,
                    "when": "after the current turns complete",
                },
            ),
        )
        log.info("self_restart", requested_by=str(entry.address), reason=reason)
        outcome = await self.reloader.reload(f"self-restart by {entry.address}")
        if not outcome.ok:
            return  # the bundle changed again under us; the reloader logged why
        already = set(outcome.plan.agents) if outcome.plan is not None else set()

        def others(e: ProcessEntry) -> bool:
            return e.address.kind is ProcessKind.AGENT and e.address.name not in already

        await self.reloader.supervisor.restart_where(others, ShutdownReason.RESTART)

    async def _check_bundle(self) -> ErrorInfo | None:
        try:
            await asyncio.to_thread(self.reloader.source.load)
        except BundleError as exc:
            lines = [str(d) for d in exc.diagnostics[:MAX_DIAGNOSTICS]]
            return ErrorInfo(
                code=exc.codes[0] if exc.codes else ErrorCode.E_CONFIG_SCHEMA_INVALID,
                message="the bundle is invalid, nothing was restarted: " + "; ".join(lines),
                suggestion="fix the bundle files, then call self-restart again",
            )
        except Exception as exc:  # bad input must come back as data, never end the daemon
            return ErrorInfo(code=ErrorCode.E_CONFIG_PARSE_ERROR, message=f"cannot load: {exc!r}")
        return None
