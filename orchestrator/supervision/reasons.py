"""The coded errors the supervisor answers with, each naming the process and what to do."""

from __future__ import annotations

from orchestrator.supervision.table import ProcessEntry
from protocol.errors import ErrorCode, ErrorInfo


def backing_off(entry: ProcessEntry, now: float, log_file: str) -> ErrorInfo:
    """A request for an agent in crashLoopBackOff."""
    wait = max(0.0, (entry.retry_at or 0.0) - now)
    exit_text = ""
    if entry.last_exit is not None and entry.last_exit.code is not None:
        exit_text = f", last exit code {entry.last_exit.code}"
    return ErrorInfo(
        code=ErrorCode.E_AGENT_BACKOFF,
        message=f"{entry.address} is in crashLoopBackOff after {entry.crashes} crashes"
        f"{exit_text}; next start in {wait:.1f} s",
        suggestion=f"see {log_file}, fix the cause, then `goondan restart`",
    )


def start_failed(entry: ProcessEntry) -> ErrorInfo:
    """Events for an agent whose last start failed (held down, not respawned in a loop)."""
    cause = entry.start_error.message if entry.start_error else "it failed to start"
    return ErrorInfo(
        code=ErrorCode.E_AGENT_START_FAILED,
        message=f"{entry.address} cannot start: {cause}",
        suggestion="fix the bundle and run `goondan restart`, or send again later",
    )


def shutting_down() -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.E_AGENT_SHUTTING_DOWN, message="the daemon is stopping")
