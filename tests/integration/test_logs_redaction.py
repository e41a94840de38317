"""A bundle's API key never reaches a log file or the runtime events, however a tool leaks it.

The scripted Model takes its `apiKey` from `$TEST_API_KEY` (a ValueSource, so the value is a
bundle secret); the tool prints it, writes it to stderr, logs it through ctx.logger and stdlib
logging, and fails with it in the error message (the variable itself is gone from the agent's
environment once it started: the tool takes the key from `ctx.secret_values`). Then every file
under the logs dir and every runtime-events.jsonl is searched for the value.
"""

from __future__ import annotations

import asyncio
import signal
import textwrap
from pathlib import Path

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon

KEY = "sk-test-redact-4f1c9a7be2d04c55"

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: scripted
spec:
  provider: scripted
  model: leak-script
  apiKey:
    valueFrom:
      env: TEST_API_KEY
  options:
    script:
      - match: "^leak"
        toolCalls: [{name: leaky__leak}]
      - match: "^fail"
        toolCalls: [{name: leaky__fail}]
      - afterTool: "*"
        reply: "tool answered"
    defaultReply: "{input}"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: leaky
spec:
  entry: ./leaky.py
  exports:
    - name: leak
    - name: fail
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/scripted
  tools: [Tool/leaky]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: leak
spec:
  entryAgent: Agent/alpha
  agents: [Agent/alpha]
"""

TOOL = """\
import logging
import sys
from typing import Any

from bundles.sdk import ToolContext


async def leak(ctx: ToolContext, input: dict[str, Any]) -> Any:
    (key,) = ctx.secret_values
    print(f"printed {key}", flush=True)
    print(f"stderr {key}", file=sys.stderr, flush=True)
    ctx.logger.info("tool_saw_key", key=key, nested={"list": [key]})
    logging.getLogger("leaky").warning("stdlib says %s", key)
    return "leaked"


async def fail(ctx: ToolContext, input: dict[str, Any]) -> Any:
    (key,) = ctx.secret_values
    raise RuntimeError(f"upstream refused key {key}")


handlers = {"leak": leak, "fail": fail}
"""


def _files(layout: StateLayout, swarm: str) -> list[Path]:
    logs = [p for p in layout.logs_dir(swarm).rglob("*") if p.is_file()]
    events = list(layout.swarm_instances_dir(swarm).rglob("runtime-events.jsonl"))
    return logs + events


async def test_api_key_is_in_no_log_file(start_daemon: StartDaemon, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)
    (bundle / "leaky.py").write_text(textwrap.dedent(TOOL))
    async with asyncio.timeout(60):
        daemon = await start_daemon(bundle, swarm="leak", env={"TEST_API_KEY": KEY})
        for text in ("leak it", "fail with it"):
            reply = await daemon.send(text)
            assert reply.ok, reply.error
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
    layout = StateLayout.from_env()
    files = _files(layout, "leak")
    process_log = layout.process_log("leak", "alpha", "leak")
    events = layout.instance_paths("leak", "leak", "alpha").runtime_events_jsonl
    assert {layout.orchestrator_log("leak"), process_log, events} <= set(files)
    leaking = [p for p in files if KEY in p.read_text(errors="replace")]
    assert leaking == [], f"the API key is written in {leaking}"
    # the tool did run and every channel it used was masked, not dropped
    text = process_log.read_text()
    for masked in ("printed ***", "stderr ***", "stdlib says ***", '"key": "***"'):
        assert masked in text, f"{masked!r} missing from {process_log}"
    assert "upstream refused key ***" in events.read_text()
