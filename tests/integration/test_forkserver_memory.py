"""The fork server's memory over a daemon's life: flat across bundle reloads.

After each reload the daemon asks the fork server to hold and prepare the new bundle (the
`refresh` hook). What that builds must replace what the previous bundle had, not pile up on
it: this is a memory budget of a real fork server process, not a timing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

from tests.integration.harness import REPO, child_env

FIXTURE = REPO / "tests" / "fixtures" / "reload" / "two"
RELOADS = 20
GROWTH_MIB = 8.0
"""Allowed RSS growth from the first reload to the last. A reload whose preparation stayed
behind cost ~2 MiB each (~40 MiB over 20); a healthy server settles within a few arenas
(1 MiB each) of where it started."""


async def _probe(*args: str) -> dict[str, list[float]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.forkserver_probe", *args,
        env=child_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    assert not err, err.decode()[-3000:]  # the fork server's preparation says nothing
    result: dict[str, list[float]] = json.loads(out.decode().splitlines()[-1])
    return result


async def test_the_fork_server_stays_small_over_reloads(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    async with asyncio.timeout(120):
        rss = (await _probe("reloads", str(RELOADS), str(root), str(tmp_path / "state")))["rss_mib"]
    assert len(rss) == RELOADS + 1
    first, last = rss[1], rss[-1]
    assert last - first <= GROWTH_MIB, f"RSS over {RELOADS} reloads (MiB): {rss}"
