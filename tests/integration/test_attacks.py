"""Attacks from the security review, each performed against a real daemon the way it was found.

Each test fails without its fix; the unit tests beside the code cover the mechanisms."""

from __future__ import annotations

import asyncio

import pytest

from protocol.ids import MAX_INSTANCE_KEY_BYTES
from tests.integration.conftest import StartDaemon
from tests.integration.test_supervision import output


@pytest.mark.parametrize(
    "key",
    ["/" * MAX_INSTANCE_KEY_BYTES, "é" * (MAX_INSTANCE_KEY_BYTES // 2)],
    ids=["slashes", "accents"],
)
async def test_any_key_the_api_accepts_gets_a_working_agent(
    start_daemon: StartDaemon, key: str
) -> None:
    """A legal key whose escaped name was over 255 bytes crash-looped its agent."""
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        reply = await daemon.send("pid", "alpha", key=key)
        assert reply.ok, reply.error
        again = await daemon.send("pid", "alpha", key=key)
        assert again.ok, again.error
        assert output(again.result) == output(reply.result)  # the same process serves the key
        alpha = next(p for p in (await daemon.status()).processes if p.instance_key == key)
        assert (alpha.restarts, alpha.generation) == (0, 1)
