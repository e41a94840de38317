"""The durable inbox of async `agents__request` replies, shared through the instance directory.

The bridge writes `pending-<correlationId>.json` when an async request leaves (so a reply that
reaches a replacement process is still recognised) and `reply-<ns>-<correlationId>.json`
(fsynced, atomic rename) when its reply arrives. The turn engine takes the replies at the start
of each step and appends them to the conversation as messages marked as inter-agent responses;
a reply file is removed only after its message was written.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.durable import write_atomic
from protocol.events import AgentEvent

WAKE_EVENT_TYPE = "agent.inbox"
"""A child-local event that runs one turn to take stored replies (it adds no user message)."""
SPAWN_FILE = "spawn.json"
"""Written by the orchestrator's `agents.spawn` (owner, createdAt, cwd)."""


@dataclass(frozen=True, slots=True)
class Reply:
    path: Path
    data: dict[str, Any]

    def text(self) -> str:
        """What the model reads: who answered which request, then the answer or the error."""
        d = self.data
        head = f"[agent response from {d.get('from')} to request {d.get('correlationId')}]"
        error = d.get("error")
        if isinstance(error, dict):
            return f"{head}\nerror {error.get('code')}: {error.get('message')}"
        return f"{head}\n{d.get('response', '')}"

    def metadata(self) -> dict[str, Any]:
        d = self.data
        return {
            "interAgentResponse": True,
            "correlationId": d.get("correlationId"),
            "from": d.get("from"),
            "eventId": d.get("eventId"),
            "status": "error" if d.get("error") else "ok",
        }


def _write(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data).encode())


class Inbox:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def expect(self, correlation_id: str, target: str) -> None:
        _write(self.directory / f"pending-{correlation_id}.json", {"target": target})

    def expected(self, correlation_id: str) -> bool:
        return (self.directory / f"pending-{correlation_id}.json").exists()

    def store(self, correlation_id: str, response: AgentEvent | None, error: Any = None) -> None:
        """Keep the reply (or the coded error that replaced it) until the next step takes it."""
        data: dict[str, Any] = {"correlationId": correlation_id}
        if response is not None:
            data["from"] = f"{response.source.name}@{response.source.instance_key}"
            data["eventId"] = response.id
            data["response"] = response.input
            if response.error is not None:
                error = {"code": response.error.code, "message": response.error.message}
        if error is not None:
            data["error"] = error
        _write(self.directory / f"reply-{time.time_ns():020d}-{correlation_id}.json", data)
        (self.directory / f"pending-{correlation_id}.json").unlink(missing_ok=True)

    def has_replies(self) -> bool:
        try:
            return any(n.startswith("reply-") for n in os.listdir(self.directory))
        except FileNotFoundError:
            return False

    def replies(self) -> list[Reply]:
        """Stored replies, oldest first (a half-written or unreadable file is skipped)."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.startswith("reply-"))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            path = self.directory / name
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            found.append(Reply(path, data if isinstance(data, dict) else {}))
        return found


def spawn_workdir(instance_root: Path) -> Path | None:
    """The `cwd` the orchestrator's `agents.spawn` gave this instance, if any."""
    try:
        data = json.loads((instance_root / SPAWN_FILE).read_text())
    except (OSError, ValueError):
        return None
    cwd = data.get("cwd") if isinstance(data, dict) else None
    return Path(cwd) if isinstance(cwd, str) and cwd else None
