"""A node reads the NATS server's version when it connects: one older than the supported floor
is refused with E_CLUSTER_SERVER_VERSION (no stream or bucket touched), a release with known
data-loss bugs is joined with a warning. The servers here speak just enough of the NATS
protocol (INFO, then PONG to the client's PING) to announce a version: no real server of an
old release is installed for the tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from nats.aio.client import ServerVersion
from structlog.testing import capture_logs

from bundles.kinds import ClusterPolicy
from orchestrator.cluster import link, serverversion
from orchestrator.cluster.link import ClusterUnavailable, open_swarm
from orchestrator.cluster.options import options
from protocol.errors import ErrorCode


@asynccontextmanager
async def announcing(version: str) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP server that says it is nats-server `version`; yields its port and what clients
    sent after CONNECT (a refused node must send nothing: no JetStream request)."""
    received: list[bytes] = []
    info = {"server_id": "fake", "version": version, "proto": 1, "headers": True,
            "max_payload": 1 << 20, "auth_required": False}  # fmt: skip

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"INFO " + json.dumps(info).encode() + b"\r\n")
        try:
            while line := await reader.readline():
                if line.startswith(b"PING"):
                    writer.write(b"PONG\r\n")
                elif not line.startswith(b"CONNECT"):
                    received.append(line)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], received
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("version", ["2.9.10", "2.9.21", "1.4.1", "not-a-version"])
async def test_a_server_below_the_floor_is_refused_with_the_coded_error(version: str) -> None:
    async with announcing(version) as (port, received):
        opts = options(f"nats://n1:pw@127.0.0.1:{port}", "n1", None, ClusterPolicy(partitions=8))
        async with asyncio.timeout(15):
            with pytest.raises(ClusterUnavailable) as refused:
                await open_swarm(opts, "old", "n1")
    assert refused.value.code == ErrorCode.E_CLUSTER_SERVER_VERSION
    assert serverversion.TESTED in refused.value.suggestion
    assert not [line for line in received if line.startswith(b"PUB $JS")], received


def test_the_verdicts() -> None:
    def judge(version: str) -> serverversion.Verdict:
        return serverversion.judge(serverversion.release(ServerVersion(version)))

    assert judge("2.15.1") == serverversion.Verdict()
    assert judge("2.10.0") == serverversion.Verdict()
    assert judge("2.11.0-RC.2") == serverversion.Verdict()
    for lossy in ("2.10.20", "2.10.21", "2.10.22"):
        verdict = judge(lossy)
        assert verdict.refused is None and verdict.warning is not None
        assert lossy in verdict.warning
    for old in ("2.9.10", "2.2.0", "0.0.0-unknown", "", "v2", "2.10"):
        assert judge(old).refused is not None, old


async def test_a_release_with_known_loss_is_joined_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(link, "API_TIMEOUT", 0.3)
    monkeypatch.setattr(link, "PREPARE_PATIENCE", 0.5)
    async with announcing("2.10.21") as (port, _):
        opts = options(f"nats://n1:pw@127.0.0.1:{port}", "n1", None, ClusterPolicy(partitions=8))
        with capture_logs() as logs:
            async with asyncio.timeout(15):
                # past the version check the fake answers no JetStream request: unavailable
                with pytest.raises(ClusterUnavailable) as refused:
                    await open_swarm(opts, "lossy", "n1")
    assert refused.value.code == ErrorCode.E_CLUSTER_UNAVAILABLE
    warned = [e for e in logs if e["event"] == "nats_server_version"]
    assert len(warned) == 1 and "2.10.21" in warned[0]["problem"]
