"""Clock jumps on a node: libfaketime (Debian's `faketime` package) preloaded into a node and
every process it starts, its offset read from a file the nemesis rewrites (`jump`), so the
node's wall clock (CLOCK_REALTIME: `time.time()`) jumps minutes ahead or back at once, as an
NTP step or a VM restored from a snapshot would make it. CLOCK_MONOTONIC is left alone
(`FAKETIME_DONT_FAKE_MONOTONIC`): no real clock jump moves it, and leases count on it alone
(orchestrator/cluster/leases.py), which is what this fault proves.

libfaketime 0.9.10 (Debian 12) with `FAKETIME_DONT_FAKE_MONOTONIC` fails Python 3.13's
`time.sleep` (its `clock_nanosleep` on the monotonic clock answers EINVAL); faking the
monotonic clock too instead hangs timed lock waits. A node sleeps only through asyncio, which
works, so it runs the first way; a `time.sleep` in a node under this fault is the harness's
failure, not goondan's."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

INSTALL = "apt-get install faketime   (or `make system-deps` as root)"
LIBRARIES = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1")


def library() -> str | None:
    found = [path for pattern in LIBRARIES for path in glob.glob(pattern)]
    return found[0] if found else None


def unavailable() -> str | None:
    """Why a node's clock cannot jump here (None: it can); under CI=true a missing library
    fails the run: a green CI must not hide a missing install step."""
    if library() is not None:
        return None
    message = f"no libfaketime: {INSTALL}"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    return message


def offset_file(root: Path, node: str) -> Path:
    return root / f"{node}.faketime"


def env(root: Path, node: str) -> dict[str, str]:
    """The variables that put `node` (and its agents, which inherit them) on a clock the
    nemesis can move; none where libfaketime is missing."""
    lib = library()
    if lib is None:
        return {}
    path = offset_file(root, node)
    if not path.exists():
        path.write_text("+0\n")
    return {
        "LD_PRELOAD": lib, "FAKETIME_TIMESTAMP_FILE": str(path), "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }  # fmt: skip


def jump(root: Path, node: str, seconds: int) -> None:
    """The node's wall clock runs `seconds` off the real one from now on (0: back on time).
    Written whole in one rename: a process reading the file never sees it half written."""
    path = offset_file(root, node)
    staged = path.with_suffix(".next")
    staged.write_text(f"{seconds:+d}\n")
    staged.replace(path)
