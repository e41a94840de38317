"""Command-line options of an agent child (`python -m agent_process ...` or a fork)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.errors import ProtocolError
from protocol.ids import ProcessId, parse_process_id

FORMATS = ("json", "console")


@dataclass(frozen=True, slots=True)
class ChildOptions:
    process_id: ProcessId
    endpoint: str
    swarm: str
    bundle: Path
    state_root: Path
    env_files: tuple[Path, ...] = ()
    parent_pid: int | None = None
    """Exit at once if our parent is not this pid (it died before PDEATHSIG was set)."""
    heartbeat_interval: float = 2.0
    heartbeat_timeout: float = 20.0
    """Exit when the orchestrator has been silent this long (it is gone or wedged)."""
    log_format: str = "json"


@functools.cache
def parser() -> argparse.ArgumentParser:
    """Built once (in the fork server's preload, so forked children do not pay for it)."""
    p = argparse.ArgumentParser(prog="python -m agent_process", description="goondan agent child")
    p.add_argument("--id", required=True, help="process id <kind>:<name>:<instanceKey>:<gen>")
    p.add_argument("--endpoint", required=True, help="the orchestrator's agents ROUTER")
    p.add_argument("--swarm", required=True)
    p.add_argument("--bundle", required=True, type=Path)
    p.add_argument("--state-root", required=True, type=Path)
    p.add_argument("--env-file", action="append", default=[], type=Path)
    p.add_argument("--ppid", type=int, default=None)
    p.add_argument("--heartbeat-interval", type=float, default=2.0)
    p.add_argument("--heartbeat-timeout", type=float, default=20.0)
    p.add_argument("--log-format", choices=FORMATS, default="json")
    return p


_CONVERT: dict[str, Callable[[str], Any]] = {
    "--id": str,
    "--endpoint": str,
    "--swarm": str,
    "--bundle": Path,
    "--state-root": Path,
    "--ppid": int,
    "--heartbeat-interval": float,
    "--heartbeat-timeout": float,
    "--log-format": str,
}
_REQUIRED = frozenset({"--id", "--endpoint", "--swarm", "--bundle", "--state-root"})


def _fast_parse(argv: Sequence[str]) -> argparse.Namespace | None:
    """The orchestrator's own `--key value` argv in a few µs (argparse takes ~1 ms of a
    ~10 ms spawn); None for anything unusual, which argparse then reports properly."""
    values: dict[str, Any] = {"--env-file": []}
    if len(argv) % 2:
        return None
    for key, raw in zip(argv[::2], argv[1::2], strict=True):
        if key == "--env-file":
            values[key].append(Path(raw))
        elif key in _CONVERT and key not in values:
            try:
                values[key] = _CONVERT[key](raw)
            except ValueError:
                return None
        else:
            return None
    if not values.keys() >= _REQUIRED or values.get("--log-format", "json") not in FORMATS:
        return None
    return argparse.Namespace(
        id=values["--id"], endpoint=values["--endpoint"], swarm=values["--swarm"],
        bundle=values["--bundle"], state_root=values["--state-root"],
        env_file=values["--env-file"], ppid=values.get("--ppid"),
        heartbeat_interval=values.get("--heartbeat-interval", 2.0),
        heartbeat_timeout=values.get("--heartbeat-timeout", 20.0),
        log_format=values.get("--log-format", "json"),
    )  # fmt: skip


def parse_options(argv: Sequence[str]) -> ChildOptions:
    """Parse argv; raise SystemExit(2) with a message on bad options."""
    ns = _fast_parse(argv) or parser().parse_args(list(argv))
    try:
        process_id = parse_process_id(ns.id)
    except ProtocolError as exc:
        parser().error(f"--id: {exc.message}")
    return ChildOptions(
        process_id=process_id,
        endpoint=ns.endpoint,
        swarm=ns.swarm,
        bundle=ns.bundle,
        state_root=ns.state_root,
        env_files=tuple(ns.env_file),
        parent_pid=ns.ppid,
        heartbeat_interval=ns.heartbeat_interval,
        heartbeat_timeout=ns.heartbeat_timeout,
        log_format=ns.log_format,
    )
