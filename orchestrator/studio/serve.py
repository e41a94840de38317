"""Run Studio: the app behind its guard, served by uvicorn on a socket bound by the command."""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from orchestrator.studio.app import Studio, build
from orchestrator.studio.guard import Guard, Policy


def serve(studio: Studio, policy: Policy, sock: socket.socket) -> None:
    config = uvicorn.Config(
        Guard(build(studio), policy), log_level="warning", access_log=False, lifespan="off"
    )
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
