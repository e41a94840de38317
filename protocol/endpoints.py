"""Where everything lives on disk (ARCHITECTURE.md §7) and the ipc endpoints of the run dir
(ARCHITECTURE.md §3).

Both the orchestrator and the agent processes compute paths through `StateLayout`, so the
layout is written once. Instance keys are arbitrary text (e.g. `telegram:42`), so they are
escaped into one safe path segment; nothing a user types can point a path outside the root.
The path types are NamedTuples rather than dataclasses: `goondan send` finds its daemon with
them, and dataclasses imports inspect (~6 ms of a ~50 ms send).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import NamedTuple

from protocol.error_codes import ErrorCode, ProtocolError

IPC_PATH_LIMIT = 107
"""sun_path is 108 bytes including the terminating NUL."""

ENV_STATE_ROOT = "GOONDAN_STATE_ROOT"
SEGMENT_MAX = 100
"""Bytes of one escaped name: `<agent>.<instanceKey>.log` (two segments) stays under 255."""
_SAFE_SEGMENT = re.compile(r"[A-Za-z0-9_.-]")
_PLAIN_SEGMENT = re.compile(rf"[A-Za-z0-9_.-]{{1,{SEGMENT_MAX}}}")
_DIGEST_CHARS = 16


def default_state_root() -> Path:
    """GOONDAN_STATE_ROOT, else systemd's STATE_DIRECTORY (first entry), else ~/.goondan."""
    env = os.environ.get(ENV_STATE_ROOT)
    if env:
        return Path(env).expanduser()
    service = os.environ.get("STATE_DIRECTORY")
    if service:
        return Path(service.split(":")[0])
    return Path.home() / ".goondan"


def path_segment(text: str) -> str:
    """Escape arbitrary text into one directory name: `%XX` for anything not [A-Za-z0-9_.-].

    The result never contains `/`, never is `.` or `..`, is at most SEGMENT_MAX bytes, and maps
    distinct inputs to distinct names (so two instance keys never share a directory). Escaping
    can triple a name (a 128-byte key of `/` is 384 bytes, over the 255 a file name may have):
    a longer result keeps a readable prefix and ends in `~` and a hash of the whole text. `~` is
    always escaped otherwise, so a shortened name never equals a plain one.
    """
    if _PLAIN_SEGMENT.fullmatch(text) and text not in (".", ".."):
        return text  # nothing to escape (most names): no walk over each character
    out = []
    for ch in text:
        if _SAFE_SEGMENT.match(ch):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    segment = "".join(out)
    if segment in ("", ".", ".."):
        segment = segment.replace(".", "%2E") or "%00"
    if len(segment) > SEGMENT_MAX:
        import hashlib  # here: only an over-long name needs it, and it loads OpenSSL (~2 ms)

        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
        head = segment[: SEGMENT_MAX - _DIGEST_CHARS - 1]
        cut = head.find("%", len(head) - 2)  # never end inside a %XX escape
        segment = f"{head[:cut] if cut != -1 else head}~{digest}"
    return segment


def ipc_endpoint(path: Path, state_root: Path) -> str:
    """`ipc://<path>`, refusing paths over the unix socket limit with the fix in the message."""
    size = len(os.fsencode(path))
    if size > IPC_PATH_LIMIT:
        raise ProtocolError(
            f"socket path {path} is {size} bytes, over the {IPC_PATH_LIMIT}-byte limit of unix "
            f"sockets; choose a shorter state root than {state_root} "
            f"(--state-root DIR or {ENV_STATE_ROOT})",
            code=ErrorCode.E_ENDPOINT_TOO_LONG,
        )
    return f"ipc://{path}"


class RunPaths(NamedTuple):
    """The run directory of one swarm: sockets, pid file, active.json (mode 0700)."""

    state_root: Path
    run_dir: Path

    @property
    def agents_sock(self) -> Path:
        return self.run_dir / "agents.sock"

    @property
    def control_sock(self) -> Path:
        return self.run_dir / "control.sock"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "orchestrator.pid"

    @property
    def active_json(self) -> Path:
        return self.run_dir / "active.json"

    @property
    def control_token(self) -> Path:
        """The capability a control request must carry (0600, never given to agents)."""
        return self.run_dir / "control.token"

    @property
    def agents_endpoint(self) -> str:
        return ipc_endpoint(self.agents_sock, self.state_root)

    @property
    def control_endpoint(self) -> str:
        return ipc_endpoint(self.control_sock, self.state_root)


class InstancePaths(NamedTuple):
    """Files of one agent instance (ARCHITECTURE.md §7)."""

    root: Path

    @property
    def messages_dir(self) -> Path:
        return self.root / "messages"

    @property
    def base_jsonl(self) -> Path:
        return self.messages_dir / "base.jsonl"

    @property
    def events_jsonl(self) -> Path:
        return self.messages_dir / "events.jsonl"

    @property
    def runtime_events_jsonl(self) -> Path:
        return self.messages_dir / "runtime-events.jsonl"

    @property
    def extensions_dir(self) -> Path:
        return self.root / "extensions"

    def extension_state(self, name: str) -> Path:
        return self.extensions_dir / f"{path_segment(name)}.json"

    @property
    def pending_calls_dir(self) -> Path:
        return self.root / "pending-calls"

    @property
    def inbox_dir(self) -> Path:
        """Durable inbox: inter-agent responses waiting for the caller's next step/turn."""
        return self.root / "inbox"

    @property
    def workdir(self) -> Path:
        return self.root / "workdir"


class StateLayout(NamedTuple):
    """`<state_root>` and everything below it. `run_root` and `logs_root` follow systemd's
    RUNTIME_DIRECTORY / LOGS_DIRECTORY when the daemon runs as a service."""

    root: Path
    run_root: Path | None = None
    logs_root: Path | None = None

    @classmethod
    def from_env(cls, root: Path | None = None) -> StateLayout:
        state = (root or default_state_root()).expanduser().absolute()
        run = os.environ.get("RUNTIME_DIRECTORY")
        logs = os.environ.get("LOGS_DIRECTORY")
        return cls(
            root=state,
            run_root=Path(run.split(":")[0]) if run else None,
            logs_root=Path(logs.split(":")[0]) if logs else None,
        )

    def run_paths(self, swarm: str) -> RunPaths:
        base = self.run_root if self.run_root is not None else self.root / "run"
        return RunPaths(state_root=self.root, run_dir=base / path_segment(swarm))

    def swarm_instances_dir(self, swarm: str) -> Path:
        return self.root / "instances" / path_segment(swarm)

    def instance_paths(self, swarm: str, instance_key: str, agent: str) -> InstancePaths:
        return _instance_paths(self, swarm, instance_key, agent)

    def connector_state_dir(self, swarm: str, connection: str) -> Path:
        """What a Connection's connector keeps across restarts (e.g. telegram's offset)."""
        return self.root / "connectors" / path_segment(swarm) / path_segment(connection)

    def journal_file(self, swarm: str) -> Path:
        """The swarm's ingress journal: every accepted event until its turn is done."""
        return self.root / "journal" / path_segment(swarm) / "ingress.sqlite3"

    def answers_dir(self, swarm: str) -> Path:
        """The daemon's record of answers to deferred calls not yet taken by their agent: kept
        outside the instance tree, which agents write (ARCHITECTURE.md §10)."""
        return self.root / "answers" / path_segment(swarm)

    def usage_file(self, swarm: str) -> Path:
        """Today's model usage of the swarm per agent: what budgets are counted against."""
        return self.root / "usage" / path_segment(swarm) / "usage.json"

    def logs_dir(self, swarm: str) -> Path:
        base = self.logs_root if self.logs_root is not None else self.root / "logs"
        return base / path_segment(swarm)

    def orchestrator_log(self, swarm: str) -> Path:
        return self.logs_dir(swarm) / "orchestrator.log"

    def process_log(self, swarm: str, name: str, instance_key: str) -> Path:
        return self.logs_dir(swarm) / f"{path_segment(name)}.{path_segment(instance_key)}.log"

    @property
    def secrets_dir(self) -> Path:
        return self.root / "secrets"


@functools.lru_cache(maxsize=4)
def _instance_paths(
    layout: StateLayout, swarm: str, instance_key: str, agent: str
) -> InstancePaths:
    # an agent process asks for its own instance's paths four times as it starts (its child,
    # runtime and assembly each hold a layout); an InstancePaths is immutable, so one is shared
    root = layout.swarm_instances_dir(swarm) / path_segment(instance_key) / path_segment(agent)
    return InstancePaths(root=root)
