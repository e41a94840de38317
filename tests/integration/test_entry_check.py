"""`goondan run` checks the bundle as `validate --deep` does before it starts anything, and
prints the validation warnings it used to keep to itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

from protocol.endpoints import StateLayout
from tests.integration.harness import run_cli
from tests.unit.orchestrator.test_deepcheck import _bundle

WARNED = """
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: feed2}
spec:
  connectorRef: Connector/src
  secrets: {token: {valueFrom: {env: GOONDAN_TEST_SURELY_UNSET}}}
  ingress: {rules: [{match: {event: message}, route: {}}]}
"""


async def test_run_refuses_an_export_without_a_handler_before_starting(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, calc_py="handlers = {'add': lambda c, i: 1}\n")
    async with asyncio.timeout(60):
        code, _, err = await run_cli("run", str(bundle), "--input", "hi")
    assert code == 2
    assert "E_TOOL_LOAD" in err and "'sub'" in err and "nothing was started" in err
    assert not (StateLayout.from_env().root / "run" / "s" / "active.json").exists()


async def test_run_prints_validation_warnings_and_runs(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    bundle.write_text(bundle.read_text() + WARNED)
    async with asyncio.timeout(60):
        code, out, err = await run_cli("run", str(bundle), "--input", "hi")
    assert (code, out) == (0, "hi\n"), err
    assert "warning:" in err and "GOONDAN_TEST_SURELY_UNSET" in err


async def test_no_entry_check_leaves_a_broken_entry_to_its_agent(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, calc_py="x = 1\n")
    async with asyncio.timeout(60):
        code, _, err = await run_cli("run", str(bundle), "--no-entry-check", "--input", "hi")
    assert code == 1 and "E_AGENT_START_FAILED" in err
