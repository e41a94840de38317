"""The cluster quick start of docs/cluster.md, run as written: its first `sh` block, pasted
into bash at once, with only its directory and ports moved (so it runs beside other tests) and
`goondan` / `nats-server` being the venv's. Each command must print what the block's comments
say it prints."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys

import pytest

from tests.cluster.natsd import free_ports, nats_server_or_skip
from tests.integration.harness import REPO, child_env

DOC = REPO / "docs" / "cluster.md"
PREFIXES = ("1422", "1522")
"""The block's ports are these and a server's number (1 to 3), as `1422$i` in its loop."""


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


async def _end_group(group: int) -> None:
    """The block leaves its servers and nodes running, as a reader's terminal would: SIGTERM
    stops them (the nodes drain), SIGKILL what is left after 10 s. They are bash's children,
    not ours, so their end is polled."""
    if not _alive(group):
        return
    os.killpg(group, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        if not _alive(group):
            return
        if loop.time() > deadline:
            os.killpg(group, signal.SIGKILL)
            return
        await asyncio.sleep(0.1)  # exits of processes we do not parent: poll


def _free_prefixes() -> list[str]:
    """Two port prefixes P (P1, P2, P3 all free now), in place of the block's."""
    found: list[str] = []
    for port in free_ports(40):
        prefix = str(port)[:-1]
        if len(str(port)) != 5 or prefix in found or prefix in PREFIXES:
            continue
        if all(_free(int(f"{prefix}{i}")) for i in (1, 2, 3)):
            found.append(prefix)
        if len(found) == len(PREFIXES):
            return found
    raise AssertionError("no free port range for the quick start's servers")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def quick_start() -> str:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"```sh\n(.*?)```", text, re.S)
    assert found is not None, "docs/cluster.md has no sh block"
    return found.group(1)


@pytest.mark.timeout(180)
async def test_the_quick_start_works_as_written(tmp_path_factory: pytest.TempPathFactory) -> None:
    nats_server_or_skip()
    script = quick_start()
    root = tmp_path_factory.mktemp("gdemo")
    script = script.replace("/tmp/gdemo", str(root))
    for old, new in zip(PREFIXES, _free_prefixes(), strict=True):
        script = script.replace(old, new)
    bin_dir = os.path.dirname(sys.executable)
    env = child_env({"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    env.pop("GOONDAN_STATE_ROOT", None)  # the block names each node's state root itself
    # a file, not a pipe: the servers and nodes the block starts in the background keep its
    # output open after bash has ended
    out = root / "terminal.txt"
    with out.open("wb") as terminal:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", script, cwd=REPO, env=env, start_new_session=True,
            stdout=terminal, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    try:
        async with asyncio.timeout(150):
            await proc.wait()
    finally:
        await _end_group(proc.pid)
    text = out.read_text(errors="replace")
    # not the block's exit code: its last command is a `cluster status` taken while the drained
    # node's partitions move, which exits 1 (unowned partitions), as it says it does
    assert proc.returncode is not None, text
    said = [line.removeprefix("# ") for line in script.splitlines() if line.startswith("# ")]
    for expected in ("Hello! You said: hello from alice", "Hello! You said: still there?"):
        assert expected in said and expected in text, text
    assert re.search(r"^n3 +\S+ +\d+ .* serving$", text, re.M), text
    assert "node n3 is draining" in text, text
    # the drain is taken before `drain` returns: the status right after shows it
    n3 = re.search(r'"name": "n3".*?"partitions": (\d+).*?"draining": (\w+)', text, re.S)
    assert n3 is not None and n3.groups() == ("0", "true"), text
