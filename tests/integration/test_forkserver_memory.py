"""The fork server's memory over a daemon's life, and what an idle agent forked from it costs.

These are memory budgets of real processes (a fork server started as the daemon starts it,
agents spawned through the daemon's supervisor and spawner), not timings: a change that makes
every agent bigger, or the fork server grow with each reload, fails here instead of being
noticed in a benchmark later. The probes run outside coverage even under `make test`
(`unmeasured_env`): the budgets are the product's, not those of a process carrying a tracer.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
from pathlib import Path

import pytest

from agent_process.forkprep.gate import Step, steps
from tests.integration.harness import REPO, unmeasured_env

FIXTURE = REPO / "tests" / "fixtures" / "reload" / "two"
EXAMPLES = REPO / "bundles" / "examples"
RELOADS = 20
GROWTH_MIB = 8.0
"""Allowed RSS growth from the first reload to the last. A reload whose preparation stayed
behind cost ~2 MiB each (~40 MiB over 20); a healthy server settles within a few arenas
(1 MiB each) of where it started."""
IDLE_AGENTS = 4
IDLE_BUDGET_MIB = {(3, 11): 6.5, (3, 12): 5.75, (3, 13): 6.0}
"""Median USS of an idle agent, per CPython version: about 1-1.5 MiB above what
tests/bench/bench_spawn.py measures for the greeter (hello) and the operator (workspace, the
built-in bash and file-system tools): 5.2 and 5.5 MiB on 3.11, 4.3 and ~4.7 on 3.12, 4.5 and
4.9 on 3.13. An operator whose tools the fork server did not prepare costs ~9 MiB."""
WARM_GAIN_MIB = 0.1
"""The fork server's preparation makes an idle greeter at least this much smaller than with
GOONDAN_FORK_WARM=0: measured 0.5-0.6 MiB on 3.11-3.13 on a quiet machine, down to ~0.2 MiB
during a full test run; without the preparation the gain is ~0, which this still catches."""


async def _probe(*args: str, env: dict[str, str] | None = None) -> list[float]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.forkserver_probe", *args,
        env=unmeasured_env(env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    assert not err, err.decode()[-3000:]  # the fork server's preparation says nothing
    result: dict[str, list[float]] = json.loads(out.decode().splitlines()[-1])
    return next(iter(result.values()))


async def test_the_fork_server_stays_small_over_reloads(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    async with asyncio.timeout(120):
        rss = await _probe("reloads", str(RELOADS), str(root), str(tmp_path / "state"))
    assert len(rss) == RELOADS + 1
    first, last = rss[1], rss[-1]
    assert last - first <= GROWTH_MIB, f"RSS over {RELOADS} reloads (MiB): {rss}"


async def _idle_uss(tmp_path: Path, bundle: str, agent: str, **env: str) -> float:
    async with asyncio.timeout(120):
        uss = await _probe(
            "idle-uss", str(IDLE_AGENTS), str(EXAMPLES / bundle), agent, str(tmp_path), env=env
        )
    assert len(uss) == IDLE_AGENTS
    return statistics.median(uss)


@pytest.mark.parametrize(("bundle", "agent"), [("hello", "greeter"), ("workspace", "operator")])
async def test_an_idle_agent_stays_within_its_memory_budget(
    tmp_path: Path, bundle: str, agent: str
) -> None:
    budget = IDLE_BUDGET_MIB.get(sys.version_info[:2])
    if budget is None:
        pytest.skip(f"no idle-agent budget measured for Python {sys.version_info[:2]}")
    median = await _idle_uss(tmp_path, bundle, agent)
    assert median <= budget, f"median USS of an idle {agent}: {median:.2f} MiB"


async def test_the_preparation_makes_idle_agents_smaller(tmp_path: Path) -> None:
    prepared = await _idle_uss(tmp_path / "on", "hello", "greeter")
    plain = await _idle_uss(tmp_path / "off", "hello", "greeter", GOONDAN_FORK_WARM="0")
    assert prepared <= plain - WARM_GAIN_MIB, f"prepared {prepared:.2f}, plain {plain:.2f} MiB"


IMMORTAL_GAIN_MIB = 1.0
"""What the immortal step saves an idle greeter (3.13): measured 5.0 -> 2.9 MiB (bench_spawn)."""


async def test_immortal_objects_make_idle_agents_smaller(tmp_path: Path) -> None:
    if Step.IMMORTAL not in steps():
        pytest.skip(f"the immortal step does not run on Python {sys.version_info[:2]}")
    others = ",".join(step.value for step in Step if step is not Step.IMMORTAL)
    immortal = await _idle_uss(tmp_path / "on", "hello", "greeter")
    mortal = await _idle_uss(tmp_path / "off", "hello", "greeter", GOONDAN_FORK_WARM=others)
    assert immortal <= mortal - IMMORTAL_GAIN_MIB, f"immortal {immortal:.2f}, mortal {mortal:.2f}"
