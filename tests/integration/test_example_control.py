"""bundles/examples/control as the README's "Cost and control" runs it: an approval, a budget."""

from __future__ import annotations

import asyncio
import json

from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, run_cli

BUNDLE = REPO / "bundles" / "examples" / "control"
NOON = {"GOONDAN_SCHEDULE_CLOCK": "2026-01-01T12:00:00Z x1"}  # the nightly run stays away


async def test_approval_then_budget(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon(BUNDLE, swarm="control", env=NOON)
        staging = await daemon.send("deploy to staging")
        assert json.loads(staging.result["input"]) == {
            "status": "ok",
            "output": {"deployed": "staging"},
        }
        asked = await daemon.send("deploy to prod")
        request = asked.result["metadata"]["deferred"]
        assert request["params"]["message"] == "Deploy to production?"
        code, out, err = await run_cli("calls", "approve", request["id"])
        assert code == 0, err
        assert json.loads(out)["output"] == {"deployed": "prod"}
        third = await daemon.send("hello")
        assert third.result["input"] == "You said: hello"
        refused = await daemon.send("one more")
        assert refused.error is not None and refused.error.code == "E_AGENT_BUDGET_EXCEEDED"
        code, out, err = await run_cli("status")
        assert code == 0, err
        assert "3/3" in out and "turnsPerDay" in out
