"""The daemon's settings: the Swarm's policy plus process-level knobs (environment)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from bundles.kinds import DEFAULT_IDLE_TIMEOUT_SECONDS, SwarmPolicy
from orchestrator.supervision.capacity import default_limit
from orchestrator.supervision.policy import RestartSettings

ENV_SPAWN_MODE = "GOONDAN_SPAWN_MODE"
ENV_HEARTBEAT_INTERVAL = "GOONDAN_HEARTBEAT_INTERVAL"
ENV_HEARTBEAT_TIMEOUT = "GOONDAN_HEARTBEAT_TIMEOUT"
ENV_IDLE_PROBE_INTERVAL = "GOONDAN_IDLE_PROBE_INTERVAL"


class SpawnMode(StrEnum):
    FORKSERVER = "forkserver"
    COLD = "cold"


@dataclass(frozen=True, slots=True)
class Settings:
    grace_period: float = 30.0
    restart: RestartSettings = field(default_factory=RestartSettings)
    reconcile_interval: float = 5.0
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_SECONDS
    """Deactivate an idle agent instance after this long (None: never)."""
    request_timeout_ms: int = 60_000
    max_steps_per_turn: int = 32
    heartbeat_interval: float = 2.0
    heartbeat_timeout: float = 20.0
    """Each side gives up on the other after this long without a frame it expects."""
    idle_probe_interval: float = 60.0
    """How long a silent (idle) child may go unasked whether it is alive
    (orchestrator/supervision/liveness.py)."""
    spawn_mode: SpawnMode = SpawnMode.FORKSERVER
    max_frame_bytes: int = 16 << 20
    """`policy.maxFrameBytes`: the agents socket refuses bigger frames."""
    journal: bool = True
    """`policy.ingress.journal`: accepted events are journaled (orchestrator/ingress/accept.py)."""
    max_live_instances: int = 1000
    """Live agent processes at most (orchestrator/supervision/capacity.py)."""
    spawn_roots: tuple[Path, ...] = ()
    """`policy.spawn.allowedRoots`: workdirs `agents__spawn` may give beyond the caller's."""

    @classmethod
    def from_policy(cls, policy: SwarmPolicy, env: Mapping[str, str] = os.environ) -> Settings:
        interval = float(env.get(ENV_HEARTBEAT_INTERVAL, "2.0"))
        return cls(
            grace_period=policy.shutdown.grace_period_seconds,
            restart=RestartSettings.from_policy(policy.restart),
            reconcile_interval=policy.lifecycle.reconcile_interval_seconds,
            idle_timeout=policy.lifecycle.idle_timeout_seconds,
            request_timeout_ms=policy.lifecycle.request_timeout_ms,
            max_steps_per_turn=policy.max_steps_per_turn,
            heartbeat_interval=interval,
            heartbeat_timeout=float(env.get(ENV_HEARTBEAT_TIMEOUT, str(max(10.0, 10 * interval)))),
            idle_probe_interval=float(env.get(ENV_IDLE_PROBE_INTERVAL, "60")),
            spawn_mode=SpawnMode(env.get(ENV_SPAWN_MODE, SpawnMode.FORKSERVER)),
            spawn_roots=tuple(Path(r).expanduser() for r in policy.spawn.allowed_roots),
            max_live_instances=policy.max_live_instances or default_limit(),
            journal=policy.ingress.journal not in ("off", False),
            max_frame_bytes=policy.max_frame_bytes,
        )
