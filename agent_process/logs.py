"""structlog for an agent or connector child: JSON lines (or console) on its stdout, a pipe the
daemon reads into the child's log file (`orchestrator/supervision/childlog.py`, which masks secrets
again,
line by line), with secrets masked and the bound context (agent, instanceKey, trace ids)."""

from __future__ import annotations

import structlog

from bundles import logsetup

_configured: list[str] = []


def configure(log_format: str) -> None:
    """Set up once per format (the fork server sets up "json"; a child asking for another
    format redoes it)."""
    if _configured == [log_format]:
        return
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    # stdout is looked up per call: a forked child's fd 1 is its own pipe
    logsetup.configure(renderer, logger_factory=structlog.PrintLoggerFactory())
    _configured[:] = [log_format]
