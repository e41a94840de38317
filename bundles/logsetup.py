"""The structlog setup every goondan process shares: the daemon, each agent or connector child
and Studio. It lives in `bundles`, below both process packages (which never import each other),
next to the masking it always installs (`bundles.redact`).

What differs between processes is passed in: where a line goes and how it is rendered (the
daemon's file-and-console sink, a child's renderer on stdout), the logger factory, and keys
bound to every line (the daemon's pid). What is the same is kept here: the bound context,
the level, a UTC ISO timestamp, exceptions rendered as text, and secrets masked in every field
(a process with no secrets installed pays one attribute test per line).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
from structlog.typing import Processor, WrappedLogger

from bundles import redact


def configure(
    output: Processor,
    *,
    logger_factory: Callable[..., WrappedLogger] | None = None,
    bind: dict[str, Any] | None = None,
) -> None:
    """Set up structlog for this process. `output` is the last processor: it renders the line
    (or writes it and drops the event); `logger_factory` is structlog's, left as it was when None;
    `bind` is bound to every later line of this process's context."""
    if bind:
        structlog.contextvars.bind_contextvars(**bind)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact.processor,  # after format_exc_info: a traceback may quote a secret
            output,
        ],
        logger_factory=logger_factory,
        cache_logger_on_first_use=True,
    )
