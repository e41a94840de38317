"""The daemon's log and an agent's log rotate at `observability.logs.maxFileBytes`, and
`goondan logs` reads each log across its rotated files: every line once, in order.

A tool prints numbered lines (through the agent's stdout, the pipe the daemon reads) until its
log has rotated several times; the daemon's own log rotates from its lines about the turns.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import textwrap
from pathlib import Path

from orchestrator.supervision.logfiles import rotated_files
from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import run_cli

MAX_BYTES = 4096
LINES_PER_CALL = 30

BUNDLE = f"""\
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: scripted
spec:
  provider: scripted
  model: talk-script
  options:
    script:
      - match: "^talk"
        toolCalls: [{{name: chatty__talk, args: {{call: "{{input}}"}}}}]
      - afterTool: "*"
        reply: "talked"
    defaultReply: "{{input}}"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: chatty
spec:
  entry: ./chatty.py
  exports:
    - name: talk
      parameters:
        type: object
        properties: {{call: {{type: string}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/scripted
  tools: [Tool/chatty]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: rot
spec:
  entryAgent: Agent/alpha
  agents: [Agent/alpha]
  observability:
    logs: {{maxFileBytes: {MAX_BYTES}, keepFiles: 100}}
"""

TOOL = f"""\
from typing import Any

from bundles.sdk import ToolContext


async def talk(ctx: ToolContext, input: dict[str, Any]) -> Any:
    call = input["call"].split()[-1]
    for n in range({LINES_PER_CALL}):
        print(f"said {{call}}-{{n:02d}} " + "." * 60, flush=True)
    return "done"


handlers = {{"talk": talk}}
"""


async def test_logs_rotate_and_read_as_one_stream(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)
    (bundle / "chatty.py").write_text(textwrap.dedent(TOOL))
    calls = 8  # enough turns for the daemon's own log to pass 4 KiB
    async with asyncio.timeout(90):
        daemon = await start_daemon(bundle, swarm="rot")
        for call in range(calls):
            reply = await daemon.send(f"talk {call}")
            assert reply.ok, reply.error
        agent = (await daemon.process("alpha")).pid
        fds = f"/proc/{agent}/fd"
        held = [os.readlink(f"{fds}/{fd}") for fd in os.listdir(fds)] if agent else []
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
        code, out, err = await run_cli("logs", "--swarm", "rot", "--json")
    assert code == 0, err
    layout = StateLayout.from_env()
    # forked from the fork server, which the daemon forked after opening its log: neither
    # keeps that file open (a tool could write lines into it; a rotated file's space would stay)
    assert agent is not None and str(layout.logs_dir("rot")) not in " ".join(held), held
    for log in (layout.orchestrator_log("rot"), layout.process_log("rot", "alpha", "rot")):
        files = [*rotated_files(log), log]
        assert len(files) >= 2, f"{log.name} did not rotate"
        assert all(p.stat().st_size <= MAX_BYTES for p in files if p.exists())
    lines = [json.loads(line) for line in out.splitlines()]
    said = [x["text"].split()[1] for x in lines if str(x.get("text", "")).startswith("said ")]
    assert said == [f"{c}-{n:02d}" for c in range(calls) for n in range(LINES_PER_CALL)]
    daemon_events = [x.get("event") for x in lines if x.get("source") == "orchestrator"]
    assert daemon_events.count("started") == 1  # the daemon's first line, in its oldest file
    assert daemon_events.count("spawned") == 1
