"""A pointer from `<state_root>/run/<swarm>.json` to a run dir that lives elsewhere.

Under systemd (`RuntimeDirectory=`) the daemon's sockets live in `$RUNTIME_DIRECTORY`, which a
CLI started from a login shell does not see. The daemon then leaves this small JSON file in the
usual place, and `orchestrator.control.locate` follows it to the real `active.json`. It is
read and written with the standard library's json: `goondan send` follows it without msgspec.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from protocol.durable import write_atomic
from protocol.endpoints import StateLayout, path_segment


def pointer_path(layout: StateLayout, swarm: str) -> Path:
    return layout.root / "run" / f"{path_segment(swarm)}.json"


def needed(layout: StateLayout, swarm: str) -> bool:
    """True when the run dir is not where a CLI without RUNTIME_DIRECTORY would look."""
    return layout.run_paths(swarm).run_dir.parent != layout.root / "run"


def write(layout: StateLayout, swarm: str) -> Path | None:
    if not needed(layout, swarm):
        return None
    path = pointer_path(layout, swarm)
    data = {"runDir": str(layout.run_paths(swarm).run_dir), "pid": os.getpid()}
    write_atomic(path, json.dumps(data).encode())
    return path


def remove(layout: StateLayout, swarm: str) -> None:
    if needed(layout, swarm):
        with contextlib.suppress(FileNotFoundError):
            pointer_path(layout, swarm).unlink()


def active_files(run_root: Path) -> list[Path]:
    """Every `active.json` reachable from `<state_root>/run`: own dirs, then pointers."""
    if not run_root.is_dir():
        return []
    found = sorted(run_root.glob("*/active.json"))
    for file in sorted(run_root.glob("*.json")):
        target = read(file)
        if target is not None and target not in found:
            found.append(target)
    return found


def read(file: Path) -> Path | None:
    try:
        pointer = json.loads(file.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    run_dir = pointer.get("runDir") if isinstance(pointer, dict) else None
    return Path(run_dir) / "active.json" if isinstance(run_dir, str) and run_dir else None
