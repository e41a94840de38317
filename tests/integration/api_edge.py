"""What the `api` connector's integration tests share: a daemon of tests/fixtures/api with its
api Connection on a free port, and the token that opens it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon
from tests.integration.test_connectors import free_port

FIXTURE = REPO / "tests" / "fixtures" / "api"
TOKEN = "test-token-0123456789"
CONNECTOR = "connector:api:api:1"


@dataclass(frozen=True)
class Edge:
    daemon: Daemon
    url: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}


async def start_edge(start_daemon: StartDaemon) -> Edge:
    port = free_port()
    daemon = await start_daemon(FIXTURE, swarm="edge", env={"API_PORT": str(port),
                                                            "API_TOKEN": TOKEN})  # fmt: skip
    await daemon.wait_for("transition", process=CONNECTOR, target="idle")
    return Edge(daemon, f"http://127.0.0.1:{port}")


def conversation(key: str, agent: str = "front") -> list[str]:
    """The texts of an instance's conversation on disk."""
    path = StateLayout.from_env().instance_paths("edge", key, agent).base_jsonl
    return [json.loads(line).get("content") or "" for line in path.read_text().splitlines()]
