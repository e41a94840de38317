"""Command-line options of an agent child (`python -m agent_process ...` or a fork)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from protocol.errors import ProtocolError
from protocol.ids import ProcessId, parse_process_id


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
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 10.0
    """Exit when the orchestrator has been silent this long (it is gone or wedged)."""
    log_format: str = "json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agent_process", description="goondan agent child")
    p.add_argument("--id", required=True, help="process id <kind>:<name>:<instanceKey>:<gen>")
    p.add_argument("--endpoint", required=True, help="the orchestrator's agents ROUTER")
    p.add_argument("--swarm", required=True)
    p.add_argument("--bundle", required=True, type=Path)
    p.add_argument("--state-root", required=True, type=Path)
    p.add_argument("--env-file", action="append", default=[], type=Path)
    p.add_argument("--ppid", type=int, default=None)
    p.add_argument("--heartbeat-interval", type=float, default=1.0)
    p.add_argument("--heartbeat-timeout", type=float, default=10.0)
    p.add_argument("--log-format", choices=("json", "console"), default="json")
    return p


def parse_options(argv: Sequence[str]) -> ChildOptions:
    """Parse argv; raise SystemExit(2) with a message on bad options."""
    parser = _parser()
    ns = parser.parse_args(list(argv))
    try:
        process_id = parse_process_id(ns.id)
    except ProtocolError as exc:
        parser.error(f"--id: {exc.message}")
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
