"""The eval runs kept under the state root: `<state_root>/evals/<run id>/` (docs/guides/evals.md).

Each run keeps its `report.json` (the `--json` report plus what ran: file, swarm, time) and,
when it ran in a daemon of its own, that daemon's `instances/` and `logs/` under `state/`, so a
case's conversation, trace and log lines stay readable after the run (`goondan logs
--state-root <run>/state --trace ID`, Studio's Evals view). The newest `keep` runs are kept.

A run id is a UTC time to the millisecond and a random suffix (`20261129T012345.678Z-3fa9c1`):
ids sort by age (two runs within one second too: a second's resolution listed them in the
suffix's random order), and one from a URL is checked against that shape before it names a
directory. Ids of the earlier shape, to the second (`20261129T012345Z-3fa9c1`), stay valid.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from protocol.durable import write_atomic
from protocol.endpoints import StateLayout
from protocol.private import private_dir

KEEP = 20
REPORT = "report.json"
STATE = "state"
KEPT_STATE = ("instances", "logs")
"""What a run's daemon leaves that its cases link to (not its journal, sockets or usage)."""
MAX_REPORT_BYTES = 16 * 1024 * 1024
_ID = re.compile(r"[0-9]{8}T[0-9]{6}(?:\.[0-9]{3})?Z-[0-9a-f]{6}")


def runs_dir(layout: StateLayout) -> Path:
    return layout.root / "evals"


def new_id(now: float | None = None) -> str:
    at = time.time() if now is None else now
    ms = int(at * 1000) % 1000
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(at))}.{ms:03d}Z-{secrets.token_hex(3)}"


def is_id(text: str) -> bool:
    return _ID.fullmatch(text) is not None


def save(
    layout: StateLayout,
    run_id: str,
    report: dict[str, Any],
    state_from: Path | None,
    keep: int = KEEP,
) -> Path:
    """Keep one run: its daemon's instances and logs (moved out of its temporary state root),
    then its report, written last so that a listed run always has its state. Older runs past
    `keep` are removed. Returns the run's directory."""
    where = private_dir(runs_dir(layout) / run_id)
    if state_from is not None:
        for name in KEPT_STATE:
            if (state_from / name).is_dir():
                shutil.move(str(state_from / name), private_dir(where / STATE) / name)
    write_atomic(where / REPORT, json.dumps(report, ensure_ascii=False).encode("utf-8"))
    prune(layout, keep)
    return where


def prune(layout: StateLayout, keep: int) -> list[str]:
    """Remove all but the newest `keep` runs; the ids removed."""
    ids = _ids(layout)
    gone = ids[: max(len(ids) - keep, 0)]
    for run_id in gone:
        shutil.rmtree(runs_dir(layout) / run_id, ignore_errors=True)
    return gone


def _ids(layout: StateLayout) -> list[str]:
    """Every run's id, oldest first; only real directories of the run-id shape count."""
    try:
        names = os.listdir(runs_dir(layout))
    except OSError:
        return []
    return sorted(n for n in names if is_id(n) and _real_dir(runs_dir(layout) / n))


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def read(layout: StateLayout, run_id: str) -> dict[str, Any] | None:
    """A run's report; None for an id of another shape, a missing run or an unreadable report."""
    if not is_id(run_id) or not _real_dir(runs_dir(layout) / run_id):
        return None
    path = runs_dir(layout) / run_id / REPORT
    try:
        if path.is_symlink() or path.stat().st_size > MAX_REPORT_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return None
    return {**data, "id": run_id}


def reports(layout: StateLayout) -> list[dict[str, Any]]:
    """Every kept run's report, newest first."""
    found = (read(layout, run_id) for run_id in reversed(_ids(layout)))
    return [r for r in found if r is not None]


def state_layout(layout: StateLayout, run_id: str) -> StateLayout | None:
    """The state a run's own daemon left (its cases' conversations and traces); None for a
    run that went to a running daemon (`--attach`: they are that daemon's) or an unknown id."""
    if not is_id(run_id) or not _real_dir(runs_dir(layout) / run_id):
        return None
    root = runs_dir(layout) / run_id / STATE
    return StateLayout(root=root) if _real_dir(root) else None
