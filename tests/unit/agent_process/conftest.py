"""Shared by the agent runtime's unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import zmq
import zmq.asyncio

from agent_process import prebuilt_tools, preload
from agent_process.forkprep import heap, immortal


@pytest.fixture
def restore_preloaded() -> Iterator[None]:
    """What a test makes the fork-server preparation hold (the bundle, the built-in tools'
    entries, the heap filling) is dropped after it. The test process is never made immortal
    (`forkprep.immortal`: none of its objects would be freed again)."""
    immortal._done[:] = [True]
    saved, built = list(preload._held), dict(prebuilt_tools._held)
    yield
    preload._held[:] = saved
    prebuilt_tools._held.clear()
    prebuilt_tools._held.update(built)
    heap._held.clear()


@pytest.fixture
async def router(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[zmq.asyncio.Socket]:
    """The daemon's side of a child's link: a real ZeroMQ ROUTER bound over ipc (a short
    directory: unix socket paths are limited to 107 bytes)."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"ipc://{tmp_path_factory.mktemp('l')}/agents.sock")
    try:
        yield sock
    finally:
        sock.close()
        ctx.term()
