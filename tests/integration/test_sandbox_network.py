"""The sandbox's network allow-list through a real daemon and a real agent's `bash`.

The agent's bash Tool has `sandbox: {mode: bubblewrap, network: {allow: [127.0.0.1:A,
localhost:A]}}`; this test serves HTTP on 127.0.0.1:A (the listed host) and on 127.0.0.1:B
(not listed). Every socket is on the loopback: nothing here reaches another address.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import Daemon
from tests.integration.test_supervision import output
from tests.sandboxing import BODY, needs_bubblewrap

SWARM = "netbox"
BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: scripted}
spec:
  provider: scripted
  model: netbox
  options:
    script:
      - match: "."
        toolCalls: [{name: bash__exec, args: {command: "{input}"}}]
      - afterTool: "*"
        reply: "{last_tool_result}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: main}
spec:
  modelConfig: {modelRef: Model/scripted}
  tools:
    - ref: {kind: Tool, name: bash, package: "@goondan/base"}
      overrides:
        spec:
          sandbox: {mode: bubblewrap, network: {allow: ["127.0.0.1:@PORT@", "localhost:@PORT@"]}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: netbox}
spec:
  entryAgent: Agent/main
  agents: [Agent/main]
  policy:
    shutdown: {gracePeriodSeconds: 5}
"""


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    needs_bubblewrap()


async def bash(daemon: Daemon, command: str) -> Any:
    reply = await daemon.send(command, "main")
    assert reply.ok, reply.error
    return output(reply.result)


def _denials() -> list[tuple[str, int, str]]:
    log = StateLayout.from_env().process_log(SWARM, "main", SWARM).read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [
        (e["host"], e["port"], e["tool"])
        for e in lines
        if e.get("event") == "sandbox_network_denied"
    ]


async def test_only_the_listed_host_is_reachable_through_the_proxy(
    start_daemon: StartDaemon, tmp_path: Path, local_servers: tuple[int, int]
) -> None:
    listed, other = local_servers
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "goondan.yaml").write_text(BUNDLE.replace("@PORT@", str(listed)))
    url = f"http://127.0.0.1:{listed}/"
    async with asyncio.timeout(90):
        daemon = await start_daemon(root, swarm=SWARM)
        via_curl = await bash(daemon, f"curl -sS {url}")
        assert (via_curl["exitCode"], via_curl["stdout"]) == (0, BODY), via_curl
        fetch = f"import urllib.request as u; print(u.urlopen('{url}').read().decode())"
        via_python = await bash(daemon, f'python3 -c "{fetch}"')
        assert via_python["stdout"] == BODY + "\n", via_python
        tunnel = await bash(daemon, f"curl -sS --proxytunnel {url}")  # CONNECT, as https does
        assert tunnel["stdout"] == BODY, tunnel

        status = "curl -s -o /dev/null -w '%{http_code}'"
        assert (await bash(daemon, f"{status} http://127.0.0.1:{other}/"))["stdout"] == "403"
        # `localhost` is listed but resolves to the loopback: only the address itself opens it
        connect = "curl -s -o /dev/null -w '%{http_connect}' --proxytunnel"
        assert (await bash(daemon, f"{connect} http://localhost:{listed}/"))["stdout"] == "403"
        assert _denials() == [("127.0.0.1", other, "bash"), ("localhost", listed, "bash")]

        # what ignores the proxy has no network: the listed server is not there directly
        direct = await bash(daemon, f"curl -sS --noproxy '*' {url}")
        assert direct["exitCode"] != 0 and BODY not in direct["stdout"], direct
        raw = f"import socket; socket.create_connection(('127.0.0.1', {listed}), 3)"
        assert (await bash(daemon, f'python3 -c "{raw}"'))["exitCode"] != 0
