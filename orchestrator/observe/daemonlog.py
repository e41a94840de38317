"""structlog for the daemon: JSON lines to logs/<swarm>/orchestrator.log, and the console.

The file is always JSON lines (for `goondan logs` and machines); the console uses
`--log-format json|console`. Children's stdout/stderr go to
logs/<swarm>/<agent>.<instanceKey>.log through a pipe the daemon reads
(`orchestrator.supervision.childlog`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, MutableMapping
from pathlib import Path
from typing import Any, TextIO

import msgspec
import structlog

from bundles import logsetup, redact
from orchestrator.supervision.logfiles import NEVER, LogFile, Rotation

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50, "exception": 40}


class _Sink:
    """The last processor: writes the event to the file and the console, then drops it."""

    def __init__(self, file: LogFile, console: TextIO, fmt: str, console_level: int) -> None:
        self.file = file
        self.console = console
        self.console_level = console_level
        self.render_console = (
            self._json if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
        )

    @staticmethod
    def _json(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> str:
        return msgspec.json.encode(event, enc_hook=str).decode()

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> str:
        line = self._json(logger, name, event)
        self.file.write(f"{line}\n".encode())
        if LEVELS.get(str(event.get("level", "info")), 20) >= self.console_level:
            rendered = self.render_console(logger, name, dict(event))
            self.console.write(f"{rendered}\n")
            self.console.flush()
        raise structlog.DropEvent


def configure(
    log_file: Path,
    fmt: str = "console",
    *,
    quiet: bool = False,
    secrets: Iterable[str] = (),
    rotation: Rotation = NEVER,
) -> LogFile:
    """Set up structlog for this process; return the open log file (close it at exit).

    `secrets` (the bundle's resolved ValueSource values) are masked in every line, file and
    console alike; every line carries the daemon's `pid`. The file rotates by `rotation`.
    """
    redact.install(secrets)
    file = LogFile(log_file, rotation)
    os.register_at_fork(after_in_child=file.detach)  # the fork server, then every agent
    level = logging.WARNING if quiet else logging.INFO
    logsetup.configure(_Sink(file, sys.stderr, fmt, level), bind={"pid": os.getpid()})
    return file
