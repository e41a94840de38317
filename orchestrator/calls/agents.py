"""The orchestrator's side of the `agents` tool: spawn/list/catalog calls and request checks.

Requests and sends are ordinary events routed by the router; before one is queued,
`check_route` refuses what can never be answered: an unknown agent (E_AGENT_NOT_FOUND,
listing the Swarm's agents), one declared but not in the Swarm (E_AGENT_NOT_IN_SWARM), a
request to the caller's own instance (E_AGENT_SELF_REQUEST) and a request that would close a
cycle of waiting callers (E_AGENT_CYCLE, naming the chain carried in `metadata.callChain`:
the instances blocked in a sync request above this one; sends and async requests carry none).

Ownership of spawned instances (owner, createdAt, cwd) is kept here and persisted as
`spawn.json` in the instance directory, where the child also reads its `cwd` (its workdir).
A spawn never re-roots an agent: `cwd` must resolve (symlinks followed) inside the caller's own
workdir or a root the operator allows (`Swarm.spec.policy.spawn.allowedRoots`), and an
instance that already exists keeps its record and workdir whoever asks
(E_AGENT_SPAWN_DENIED).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from orchestrator.supervision.table import ProcessTable
from orchestrator.swarm.view import CurrentSwarm
from protocol.codec import to_builtins
from protocol.durable import write_atomic
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.events import AgentEvent
from protocol.ids import Address, ProcessKind, agent_address, check_instance_key
from protocol.jsontypes import JsonObject
from protocol.messages import CallOp, CallPayload, CallResultPayload
from protocol.private import private_dir

AGENT_OPS = frozenset({CallOp.SPAWN, CallOp.LIST, CallOp.CATALOG})
SPAWN_FILE = "spawn.json"
CALL_CHAIN = "callChain"
log = structlog.get_logger("goondan.agents")


def label(address: Address) -> str:
    return f"{address.name}@{address.instance_key}"


def _error(code: ErrorCode, message: str, suggestion: str | None = None) -> ErrorInfo:
    return ErrorInfo(code=code, message=message, suggestion=suggestion)


def _denied(message: str, suggestion: str) -> ErrorInfo:
    return _error(ErrorCode.E_AGENT_SPAWN_DENIED, message, suggestion)


@dataclass(slots=True)
class AgentsService:
    table: ProcessTable
    swarm: CurrentSwarm
    """Members, declared agents and entry agent: read at each call (a reload swaps them)."""
    instance_root: Callable[[Address], Path]
    ensure: Callable[[Address], None]
    allowed_roots: tuple[Path, ...] = ()
    """Directories an agent may give a spawned instance as its workdir, besides its own."""
    _owners: dict[Address, JsonObject] = field(default_factory=dict)

    # -- requests and sends ------------------------------------------------------------

    def check_target(self, name: str) -> ErrorInfo | None:
        view = self.swarm.view
        if name in view.members:
            return None
        agents = ", ".join(view.members)
        if name in view.declared:
            return _error(
                ErrorCode.E_AGENT_NOT_IN_SWARM,
                f"agent {name!r} is declared but not in swarm {view.name!r}",
                f"add it to Swarm.spec.agents or use one of: {agents}",
            )
        return _error(
            ErrorCode.E_AGENT_NOT_FOUND,
            f"no agent named {name!r} in swarm {view.name!r}; its agents are: {agents}",
            f"use one of: {agents}",
        )

    def check_route(self, caller: Address, target: Address, event: AgentEvent) -> ErrorInfo | None:
        """Why the event from `caller` must be refused (None: route it)."""
        if target.kind is not ProcessKind.AGENT:
            return None
        problem = self.check_target(target.name)
        if problem is not None or event.reply_to is None:
            return problem
        if target == caller:
            return _error(
                ErrorCode.E_AGENT_SELF_REQUEST,
                f"{label(caller)} sent a request to its own instance; it would wait for itself",
                "request another agent or instanceKey, or do the work in this turn",
            )
        chain = event.metadata.get(CALL_CHAIN)
        chain = [str(c) for c in chain] if isinstance(chain, list) else []
        if label(target) in chain:
            path = " → ".join([*chain, label(target)])
            return _error(
                ErrorCode.E_AGENT_CYCLE,
                f"request cycle: {path}; {label(target)} is already waiting in this chain",
                "answer from the information at hand, or use agents__send (no reply awaited)",
            )
        return None

    # -- calls -------------------------------------------------------------------------

    def answer(self, caller: Address, payload: CallPayload) -> CallResultPayload:
        try:
            match payload.op:
                case CallOp.SPAWN:
                    result: Any = self._spawn(caller, payload.args)
                case CallOp.LIST:
                    result = self._list(caller, bool(payload.args.get("includeAll")))
                case _:
                    result = self._catalog(caller)
        except _Refused as exc:
            return CallResultPayload(call_id=payload.call_id, ok=False, error=exc.error)
        return CallResultPayload(call_id=payload.call_id, ok=True, result=result)

    def _spawn(self, caller: Address, args: JsonObject) -> JsonObject:
        name, key, cwd = args.get("target"), args.get("instanceKey"), args.get("cwd")
        if not isinstance(name, str) or not name:
            raise _Refused(_error(ErrorCode.E_CONTROL_BAD_REQUEST, "spawn needs a target"))
        problem = self.check_target(name)
        if problem is not None:
            raise _Refused(problem)
        key = key if isinstance(key, str) and key else f"{name}-{uuid.uuid4().hex[:8]}"
        try:
            target = agent_address(name, check_instance_key(key))
        except ProtocolError as exc:
            raise _Refused(_error(ErrorCode.E_AGENT_INVALID_INSTANCE_KEY, exc.message)) from exc
        entry = self.table.get(target)
        exists = (entry is not None and entry.live) or self.instance_root(target).exists()
        record = self._record(target) or {}
        workdir = self._workdir(caller, cwd) if cwd is not None else None
        if exists:  # its record and workdir are its own: never rewritten by another agent
            if workdir is not None and workdir != record.get("cwd"):
                why = f"{label(target)} already exists; its workdir cannot be changed by a spawn"
                raise _Refused(_denied(why, "spawn a new instanceKey"))
        else:
            record = {
                "ownerAgent": caller.name,
                "ownerInstanceKey": caller.instance_key,
                "createdAt": time.time(),
                "cwd": workdir,
            }
            self._save(target, record)
        self.ensure(target)
        spawned = entry is None or not entry.live
        return {"target": name, "instanceKey": key, "spawned": spawned, "cwd": record.get("cwd")}

    def _own_workdir(self, caller: Address) -> Path:
        record = self._record(caller) or {}
        cwd = record.get("cwd")
        return Path(cwd) if isinstance(cwd, str) else self.instance_root(caller) / "workdir"

    def _workdir(self, caller: Address, cwd: Any) -> str:
        """`cwd` resolved (relative to the caller's workdir) and checked to stay inside it or
        an allowed root, created 0700; _Refused otherwise."""
        if not isinstance(cwd, str) or not cwd or "\x00" in cwd:
            raise _Refused(_denied(f"cwd must be a path, not {cwd!r}", "pass a directory path"))
        own = self._own_workdir(caller)
        resolved = Path(os.path.realpath(own / cwd))  # a symlink leading out counts as out
        roots = [Path(os.path.realpath(r)) for r in (own, *self.allowed_roots)]
        if not any(resolved.is_relative_to(root) for root in roots):
            allowed = ", ".join(str(r) for r in roots)
            raise _Refused(_denied(
                f"cwd {cwd!r} resolves to {resolved}, outside the caller's workdir and the "
                f"allowed roots ({allowed})",
                "use a directory inside your workdir, or ask the operator to add a root to "
                "Swarm.spec.policy.spawn.allowedRoots",
            ))  # fmt: skip
        try:
            private_dir(resolved)
        except OSError as exc:
            why = f"cwd {resolved} cannot be created: {exc.strerror}"
            raise _Refused(_denied(why, "choose a directory this daemon can write")) from exc
        return str(resolved)

    def _list(self, caller: Address, include_all: bool) -> JsonObject:
        agents = []
        for entry in self.table:
            if entry.address.kind is not ProcessKind.AGENT:
                continue
            record = self._record(entry.address) or {}
            owned = (record.get("ownerAgent"), record.get("ownerInstanceKey")) == (
                caller.name,
                caller.instance_key,
            )
            if not include_all and not owned:
                continue
            info = to_builtins(entry.info())
            agents.append(
                {
                    "target": entry.address.name,
                    "instanceKey": entry.address.instance_key,
                    "ownerAgent": record.get("ownerAgent"),
                    "ownerInstanceKey": record.get("ownerInstanceKey"),
                    "createdAt": record.get("createdAt"),
                    "status": info["status"],
                    "pid": info["pid"],
                    "cwd": record.get("cwd"),
                }
            )
        return {"count": len(agents), "agents": agents}

    def _catalog(self, caller: Address) -> JsonObject:
        view = self.swarm.view
        return {
            "swarmName": view.name,
            "entryAgent": view.entry_agent,
            "selfAgent": caller.name,
            "selfInstanceKey": caller.instance_key,
            "availableAgents": list(view.members),
            "callableAgents": [m for m in view.members if m != caller.name],
        }

    # -- ownership records -------------------------------------------------------------

    def _record(self, target: Address) -> JsonObject | None:
        """The ownership record of `target`, read once from disk after a daemon restart."""
        if target not in self._owners:
            path = self.instance_root(target) / SPAWN_FILE
            try:
                loaded = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            self._owners[target] = loaded if isinstance(loaded, dict) else {}
        return self._owners[target]

    def _save(self, target: Address, record: JsonObject) -> None:
        write_atomic(self.instance_root(target) / SPAWN_FILE, json.dumps(record).encode())
        self._owners[target] = record


class _Refused(Exception):
    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error
