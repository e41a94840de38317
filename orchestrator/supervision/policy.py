"""The crash-loop policy: one pure function from restart history to a decision.

ARCHITECTURE.md §5: crashes 1..5 respawn at once; from the 6th, wait min(1 s * 2^(n-6), 300 s) in
`crashLoopBackOff`; the counter resets after a successful turn (the supervisor does that).
A child that reports `start_error` is broken, not unlucky: respawning it at once would spin,
so it is held down and only retried on demand once a backoff delay has passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from bundles.kinds import RestartPolicy
from protocol import backoff


class ExitKind(StrEnum):
    CRASH = "crash"
    """Died without being asked to (any exit code, any signal)."""
    START_ERROR = "start_error"
    """Sent `start_error` (bundle, tool or extension failed to load) and exited."""


@dataclass(frozen=True, slots=True)
class RestartSettings:
    immediate_restarts: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 300.0

    @classmethod
    def from_policy(cls, policy: RestartPolicy) -> RestartSettings:
        return cls(
            immediate_restarts=policy.immediate_restarts,
            backoff_base=policy.backoff_base_seconds,
            backoff_max=policy.backoff_max_seconds,
        )


@dataclass(frozen=True, slots=True)
class RestartHistory:
    """Consecutive failures, counting the one being decided on."""

    crashes: int = 0
    start_errors: int = 0


@dataclass(frozen=True, slots=True)
class RespawnNow:
    pass


@dataclass(frozen=True, slots=True)
class RespawnAfter:
    """Wait `delay` seconds in crashLoopBackOff, then respawn."""

    delay: float


@dataclass(frozen=True, slots=True)
class HoldDown:
    """Do not respawn on its own; an event may retry the start after `retry_after` seconds."""

    retry_after: float


Decision = RespawnNow | RespawnAfter | HoldDown


def backoff_delay(n: int, settings: RestartSettings) -> float:
    """The n-th delay (n >= 1): base * 2^(n-1), capped at the maximum."""
    return backoff.delay(n - 1, first=settings.backoff_base, cap=settings.backoff_max)


def decide(history: RestartHistory, exit_kind: ExitKind, settings: RestartSettings) -> Decision:
    """What to do after a child's unexpected exit."""
    if exit_kind is ExitKind.START_ERROR:
        return HoldDown(retry_after=backoff_delay(max(1, history.start_errors), settings))
    if history.crashes <= settings.immediate_restarts:
        return RespawnNow()
    return RespawnAfter(
        delay=backoff_delay(history.crashes - settings.immediate_restarts, settings)
    )
