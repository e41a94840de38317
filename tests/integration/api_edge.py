"""What the `api` connector's integration tests share: a daemon of tests/fixtures/api with its
api Connection on a free port, and the token that opens it."""

from __future__ import annotations

import hashlib
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


def owned(name: str, token: str = TOKEN) -> str:
    """The instance key of the instance a client with `token` names `name` (the connector
    keeps each token's instances apart: `api:<Connection>:<token id>:<name>`)."""
    return f"api:api:{hashlib.sha256(token.encode()).hexdigest()[:12]}:{name}"


def conversation(name: str, agent: str = "front") -> list[str]:
    """The texts of the conversation of the instance the test's client names `name`."""
    path = StateLayout.from_env().instance_paths("edge", owned(name), agent).base_jsonl

    return [json.loads(line).get("content") or "" for line in path.read_text().splitlines()]
