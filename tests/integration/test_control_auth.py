"""The control socket serves the operator, not whatever runs under the daemon (issue 27, F3).

A process an agent's `bash` started could leave the call's tree: it killed the per-call reaper,
so it was re-parented to init, passed the parent-chain check and drove the daemon with the
token it read from the run dir (`goondan calls approve`, `goondan stop`). The daemon and the
fork server are child subreapers now: an orphan of an agent is re-parented to one of them, so
it stays under the daemon and is refused; and they reap what they adopt.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, run_cli
from tests.integration.test_deferred import calls_list

BUNDLE = REPO / "tests" / "fixtures" / "control_escape"
SWARM = "escape"


async def escaped_run(daemon: Daemon, out: Path, commands: list[str], via: str) -> dict[str, Any]:
    """Have an agent's tool (`escape`, or the real `bash`) run `escape.py`; what its orphan got
    from each CLI command."""
    if via == "bash":
        cli = ["env", f"GOONDAN_STATE_ROOT={StateLayout.from_env().root}", f"PYTHONPATH={REPO}",
               sys.executable, "-m", "orchestrator"]  # fmt: skip
        argv = [sys.executable, str(BUNDLE / "escape.py"), str(out), "--", *cli, "::",
                "; ".join(commands)]  # fmt: skip
        text = "run " + shlex.join(argv)
    else:
        text = "escape " + json.dumps({"out": str(out), "commands": commands})
    reply = await daemon.send(text, key="attacker")
    assert reply.ok, reply.error
    while True:  # written by a process the test does not own: poll it
        report = read_report(out)
        if report is not None:
            assert "failed" not in report, report["failed"]
            return report
        await asyncio.sleep(0.05)


def read_report(out: Path) -> dict[str, Any] | None:
    if not out.exists():
        return None
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def instance_dir(key: str) -> Path:
    return StateLayout.from_env().instance_paths(SWARM, key, "holder").root


async def defer(daemon: Daemon, text: str, key: str) -> dict[str, Any]:
    reply = await daemon.send(text, key=key)
    assert reply.ok, reply.error
    request: dict[str, Any] = reply.result["metadata"]["deferred"]
    return request


def zombies_under(daemon: Daemon) -> list[int]:
    found = []
    for proc in daemon.descendants():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return found


async def no_zombies_under(daemon: Daemon) -> None:
    """Until no process under the daemon is a zombie (the daemon's sweep runs each second)."""
    while True:
        if not zombies_under(daemon):
            return
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    ("spawn_mode", "via"), [("forkserver", "bash"), ("forkserver", "tool"), ("cold", "tool")]
)
async def test_an_orphan_of_a_tool_cannot_drive_the_daemon(
    start_daemon: StartDaemon, tmp_path: Path, spawn_mode: str, via: str
) -> None:
    """F3: a command kills its call's reaper, the orphan setsids and runs `goondan calls
    approve` and `goondan stop` with the token: both are refused, the call stays pending, the
    daemon keeps running, what it adopted does not stay a zombie, and what still runs under it
    when it stops is killed. Agents forked by the fork server leave their orphans to it;
    cold-started ones to the daemon itself. `bash` is the real one with `sandbox: off` (its
    sandbox would hide the token); `tool` runs the command the same way from a tool of ours."""
    async with asyncio.timeout(60):
        daemon = await start_daemon(BUNDLE, swarm=SWARM, env={"GOONDAN_SPAWN_MODE": spawn_mode})
        pending = await defer(daemon, "wipe", key="victim")
        mark = daemon.mark()
        report = await escaped_run(
            daemon, tmp_path / "report.json", [f"calls approve {pending['id']}", "stop"], via
        )
        assert report["killed"] and report["parent"] not in report["killed"], report
        # adopted by a subreaper (the fork server, or the daemon when there is none), not init
        assert report["parent"] in {daemon.pid, *(p.pid for p in daemon.descendants())}, report
        assert (report["parent"] == daemon.pid) == (spawn_mode == "cold"), report
        for ran in report["ran"]:
            assert ran["code"] == 1, ran
            assert "E_CONTROL_FORBIDDEN" in ran["stderr"], ran
        refused = await daemon.wait_for("control_forbidden", since=mark, type="Stop")
        assert refused["uid"] is not None and refused["pid"] is not None
        assert "token" not in json.dumps(refused).replace('"token":', "")
        assert (await daemon.status()).orchestrator.pid == daemon.pid  # still running
        calls = await calls_list()
        assert [(c["id"], c["method"]) for c in calls] == [(pending["id"], "goondan.approve")]
        assert not (instance_dir("victim") / "workdir" / "ran.log").exists()
        code, _, err = await run_cli("calls", "deny", pending["id"])
        assert code == 0, err  # the operator's shell (this test) still decides
        await no_zombies_under(daemon)
        assert psutil.pid_exists(report["pid"])  # the orphan lingers, meaning to outlive it
        code, _, err = await run_cli("stop")
        assert code == 0, err
        assert await daemon.wait() == 0
        assert daemon.find("strays_killed")
        assert not psutil.pid_exists(report["pid"])  # killed and reaped at the daemon's end
