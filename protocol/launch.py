"""How a supervised child is started: one typed launch, encoded by the spawner, decoded by it.

A child gets a single argument, a `ChildLaunch` as JSON: `python -m agent_process LAUNCH` for
a cold start, the same string in the fork server's spawn request for a fork. The daemon builds
the `LaunchSettings` once per run (they are the same for every child), and the fork server's
warm-up starts its stand-in children from those same settings.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from protocol.errors import ProtocolError
from protocol.ids import ProcessId, parse_process_id

LogFormat = Literal["json", "console"]


class LaunchSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What every child of one daemon run is started with. Paths are strings, as the daemon
    holds them: the fork server's preloaded bundle is matched by these very strings."""

    endpoint: str
    """The orchestrator's agents ROUTER."""
    swarm: str
    bundle: str
    state_root: str
    env_files: tuple[str, ...] = ()
    heartbeat_interval: float = 2.0
    heartbeat_timeout: float = 20.0
    """The child exits when the orchestrator has been silent this long (gone or wedged)."""
    log_format: LogFormat = "json"
    max_frame_bytes: int = 16 << 20
    """The daemon refuses bigger frames; the child checks its own before it sends."""
    history_frames: bool = False
    """Cluster mode: send each conversation event to the daemon as a `history` frame."""
    cgroup: str = ""
    """A cgroup v2 directory the daemon prepared (its own, delegated to it) where each agent
    makes its own cgroup with its limits; empty: agents stay where they are."""


def agent_cgroup(parent: str, pid: int) -> str:
    """The cgroup an agent makes for itself under `LaunchSettings.cgroup`."""
    return f"{parent}/agent-{pid}"


class ChildLaunch(msgspec.Struct, frozen=True, kw_only=True):
    """One child: who it is (its routing identity) and the run's settings."""

    process: ProcessId
    settings: LaunchSettings
    parent_pid: int | None = None
    """Cold starts only: exit at once if our parent is not this pid (it died before the
    parent-death signal was armed). The fork server checks that for the children it forks."""
    nonce: str = ""
    """This spawn's secret, the end of the child's routing identity (`protocol.ids.routing_id`):
    a process that does not know it cannot connect as this child. The launch travels only
    through the fork server's socketpair or the cold child's stdin, never argv."""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ChildLaunch)


def encode_launch(launch: ChildLaunch) -> str:
    return _encoder.encode(launch).decode()


def decode_launch(text: str) -> ChildLaunch:
    """The launch, with its process id checked as a routing id; ProtocolError otherwise."""
    try:
        launch = _decoder.decode(text)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError subclass
        raise ProtocolError(f"malformed launch: {exc}") from None
    parse_process_id(str(launch.process))  # names and instance key as on the wire
    return launch


MODEL_RECORDING_ENV = "GOONDAN_MODEL_RECORDING"
"""`record:DIR` or `replay:DIR`: every Model of the agents (and judges) started under it records
its responses to DIR or replays them from it (agent_process/models/recording.py); `goondan eval
--record/--replay` sets it for the daemon it starts."""
