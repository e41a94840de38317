"""What the CLI can read and change from the state files alone, when no daemon runs.

`goondan instance list|delete` and `goondan calls list` work without a daemon: the instances
are directories under `<state root>/instances/<swarm>/`, the pending calls files in them. With
a daemon running, its answer wins (it knows which processes are live); these are the same views
of the same files.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from urllib.parse import unquote

import msgspec

from orchestrator.supervision.trees import is_aside
from protocol.endpoints import StateLayout, path_segment
from protocol.jsonrpc import ANSWER_SUFFIX, PENDING_SUFFIX, PendingCall
from protocol.jsontypes import JsonObject


def swarms(layout: StateLayout) -> list[str]:
    """The swarms that have instances under the state root."""
    base = layout.swarm_instances_dir("x").parent
    return sorted(unquote(d.name) for d in base.iterdir()) if base.is_dir() else []


def instances(layout: StateLayout, swarm: str) -> list[JsonObject]:
    found = []
    root = layout.swarm_instances_dir(swarm)
    for key_dir in sorted(root.iterdir()) if root.is_dir() else []:
        if is_aside(key_dir.name):
            continue
        for agent_dir in sorted(p for p in key_dir.iterdir() if p.is_dir()):
            if is_aside(agent_dir.name):
                continue
            found.append({
                "instanceKey": unquote(key_dir.name), "agent": unquote(agent_dir.name),
                "status": "stopped", "path": str(agent_dir), "updatedAt": _spoke(agent_dir),
            })  # fmt: skip
    return found


def _spoke(agent_dir: Path) -> float | None:
    """When its conversation last changed (Studio opens the most recent one)."""
    try:
        return (agent_dir / "messages" / "base.jsonl").stat().st_mtime
    except OSError:
        return None


def instance_dir(layout: StateLayout, swarm: str, key: str, agent: str | None) -> Path:
    key_dir = layout.swarm_instances_dir(swarm) / path_segment(key)
    return key_dir / path_segment(agent) if agent else key_dir


def delete(layout: StateLayout, swarm: str, key: str, agent: str | None) -> str | None:
    """Remove an instance's state; the directory removed, or None when there is none."""
    target = instance_dir(layout, swarm, key, agent)
    if not target.exists():
        return None
    shutil.rmtree(target)
    return str(target)


def pending_calls(layout: StateLayout, swarm: str, now: float | None = None) -> list[JsonObject]:
    """The unanswered, unexpired deferred calls on disk (what `calls list` shows)."""
    now = time.time() if now is None else now
    root = layout.swarm_instances_dir(swarm)
    rows = []
    for path in sorted(root.glob("*/*/pending-calls/*" + PENDING_SUFFIX)) if root.is_dir() else []:
        if path.name.endswith(ANSWER_SUFFIX):
            continue
        answered = path.with_name(path.name[: -len(PENDING_SUFFIX)] + ANSWER_SUFFIX)
        try:
            call = msgspec.json.decode(path.read_bytes(), type=PendingCall)
        except (OSError, msgspec.DecodeError):
            continue
        if answered.exists() or call.expires_at <= now:
            continue
        rows.append({
            "id": call.id, "agent": call.agent, "instanceKey": call.instance_key,
            "method": call.method, "params": call.params,
            "ageSeconds": round(now - call.created_at, 3),
            "expiresInSeconds": round(call.expires_at - now, 3),
        })  # fmt: skip
    return rows
