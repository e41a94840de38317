"""An MCP tool through the real daemon: agent processes (forkserver and cold spawn, uvloop) start
the stdio server of tests/fixtures/mcp/server.py, call it, and no server process survives the
daemon, whether it stops gracefully or is SIGKILLed."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import psutil
import pytest

from tests.integration.conftest import StartDaemon
from tests.integration.harness import run_cli

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp" / "server.py"
COLD = {"GOONDAN_SPAWN_MODE": "cold"}
MODES = [pytest.param({}, id="forkserver"), pytest.param(COLD, id="cold")]

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: model}}
spec:
  provider: scripted
  model: offline
  options:
    script:
      - match: "^add"
        toolCalls: [{{name: calc__add, args: {{a: 2, b: 3}}}}]
      - match: "^pid"
        toolCalls: [{{name: calc__pid}}]
      - afterTool: "*"
        reply: "{{last_tool_result}}"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: calc}}
spec:
  mcp:
    command: {python}
    args: [{server}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: agent}}
spec:
  modelConfig: {{modelRef: Model/model}}
  tools: [Tool/calc]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: mcpswarm}}
spec:
  entryAgent: Agent/agent
  agents: [Agent/agent]
"""


def write_bundle(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = BUNDLE.format(python=json.dumps(sys.executable), server=json.dumps(str(SERVER)))
    (directory / "goondan.yaml").write_text(text)
    return directory


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_gone(pid: int) -> None:
    """Until the process is gone: psutil waits for it (a bounded wait, not a sleep)."""
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    _, alive = await asyncio.to_thread(psutil.wait_procs, [proc], 10)
    assert alive == [] or gone(pid), f"MCP server {pid} survived the daemon"


def servers(daemon_family: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for proc in daemon_family:
        try:
            if str(SERVER) in proc.cmdline():
                found.append(proc)
        except psutil.Error:
            continue
    return found


async def test_goondan_run_input_calls_the_mcp_tool_and_leaves_no_server(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    async with asyncio.timeout(90):
        code, out, err = await run_cli("run", str(bundle), "--input", "add please")
        assert code == 0, err
        assert json.loads(out) == {"status": "ok", "output": {"sum": 5}}
        code, out, err = await run_cli("run", str(bundle), "--input", "pid")
        assert code == 0, err
        pid = int(json.loads(out)["output"])
        await wait_gone(pid)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
@pytest.mark.parametrize("env", MODES)
async def test_no_server_survives_the_daemon(
    start_daemon: StartDaemon, tmp_path: Path, env: dict[str, str], how: signal.Signals
) -> None:
    bundle = write_bundle(tmp_path / "b")
    async with asyncio.timeout(60):
        daemon = await start_daemon(bundle, swarm="mcpswarm", env=env)
        reply = await daemon.send("pid", "agent")
        assert reply.ok, reply.error
        pid = int(json.loads(reply.result["input"])["output"])
        assert pid in {p.pid for p in servers(daemon.descendants())}
        daemon.signal(how)
        await daemon.wait()
        await wait_gone(pid)
