"""The delays every exponential backoff in goondan waits, pinned per caller with its own settings:
the crash-loop policy, an MCP server's reconnects, a chat connector's polling retries and a
cluster node waiting for JetStream. They all compute through `protocol.backoff`; these figures
are the ones each caller waited before that, so moving a caller onto it changes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_process.mcp.connection import Backoff as McpBackoff
from orchestrator.cluster import link
from orchestrator.supervision.policy import RestartSettings, backoff_delay

from ..base_tools.conftest import load_tool

chatbot = load_tool("connectors/telegram.py").chatbot  # as the connectors load it

CRASH_LOOP = [  # (base, max) of the swarm's restart policy, n-th delay (n >= 1), seconds
    (1.0, 300.0, 1, 1.0),
    (1.0, 300.0, 2, 2.0),
    (1.0, 300.0, 3, 4.0),
    (1.0, 300.0, 9, 256.0),
    (1.0, 300.0, 10, 300.0),
    (1.0, 300.0, 63, 300.0),
    (1.0, 300.0, 64, 300.0),
    (1.0, 300.0, 10**9, 300.0),
    (1.0, 300.0, 0, 1.0),  # a zero count is read as the first delay
    (0.5, 3.0, 1, 0.5),
    (0.5, 3.0, 3, 2.0),
    (0.5, 3.0, 4, 3.0),
    (0.001, 1e9, 40, 0.001 * 2**39),
    (0.001, 1e9, 64, 1e9),
]


@pytest.mark.parametrize(("base", "cap", "n", "expected"), CRASH_LOOP)
def test_crash_loop_delays(base: float, cap: float, n: int, expected: float) -> None:
    settings = RestartSettings(backoff_base=base, backoff_max=cap)
    assert backoff_delay(n, settings) == expected


MCP_RECONNECT = [  # attempt (0 = the first reconnect) -> seconds, default 0.5 s doubling to 30 s
    (0, 0.5),
    (1, 1.0),
    (2, 2.0),
    (5, 16.0),
    (6, 30.0),
    (30, 30.0),
    (31, 30.0),
    (10**9, 30.0),
]


@pytest.mark.parametrize(("attempt", "expected"), MCP_RECONNECT)
def test_mcp_reconnect_delays(attempt: int, expected: float) -> None:
    assert McpBackoff().delay(attempt) == expected


def test_mcp_reconnect_delays_with_other_settings() -> None:
    assert [McpBackoff(first=0.01, cap=1.0).delay(n) for n in range(8)] == [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0,
    ]  # fmt: skip
    assert McpBackoff(first=3600).delay(0) == 30.0  # the cap holds even over the first delay


CHAT_POLLING = [  # (first, cap, at_least per call) -> delays of consecutive failures
    (1.0, 60.0, [0, 0, 0, 0, 0, 0, 0, 0], [1, 2, 4, 8, 16, 32, 60, 60]),
    (1.0, 4.0, [0, 0, 0, 0], [1, 2, 4, 4]),
    (1.0, 4.0, [3, 100], [3, 4]),  # a 429's retry_after counts, never past the cap
    (1.0, 60.0, [0, 7, 0], [1, 7, 4]),  # a retry_after does not change the doubling
    (0.001, 0.5, [0] * 11, [0.001 * 2**n for n in range(9)] + [0.5, 0.5]),
]


@pytest.mark.parametrize(("first", "cap", "at_least", "expected"), CHAT_POLLING)
def test_chat_connector_polling_delays(
    first: float, cap: float, at_least: list[float], expected: list[float]
) -> None:
    backoff = chatbot.Backoff(first=first, cap=cap)
    assert [backoff.next(n) for n in at_least] == expected
    backoff.reset()  # a success starts over from the first delay
    assert backoff.next() == first


def test_chat_connector_first_delay_over_the_cap() -> None:
    """`backoffMs` larger than `maxBackoffMs`: the cap wins from the first delay on, as it does
    for every other caller (the connector once waited `backoffMs` for the first retry only)."""
    backoff = chatbot.Backoff(first=120.0, cap=60.0)
    assert [backoff.next() for _ in range(3)] == [60.0, 60.0, 60.0]


async def test_cluster_prepare_waits() -> None:
    """A starting node waits 0.25 s, then doubles up to 2 s, while JetStream is not ready."""
    pauses: list[float] = []
    failures = 7

    async def not_ready_yet(*_args: Any) -> str:
        if len(pauses) < failures:
            raise link.ClusterUnavailable("no meta leader", "wait")
        return "prepared"

    async def no_sleep(delay: float) -> None:
        pauses.append(delay)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(link, "_prepare", not_ready_yet)
        patch.setattr(asyncio, "sleep", no_sleep)  # what link awaits between tries
        async with asyncio.timeout(10):
            got: object = await link._prepare_patiently(None, None, None)  # type: ignore[arg-type]
    assert got == "prepared"
    assert pauses == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0, 2.0]
