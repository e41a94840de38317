"""Daily budgets: model usage per agent and for the whole swarm, counted here, across every
instance and process, and kept across restarts.

Agents report each model call (`model_usage` calls: tokens and cost) and ask before each one
(`model_permit`, orchestrator/calls/permits.py). A turn is counted the first time one of its model
calls asks (by its event id, so a turn resumed after a client-side call or a crash is still
one turn). `refusal` says why a new event or a next step may not run: a limit of
`Agent.spec.policy.budget` or `Swarm.spec.policy.budget` (`turnsPerDay`, `tokensPerDay`,
`costUsdPerDay`) is used up. A step that crosses a limit finishes; the next one is refused.

Days are UTC days: the counts start over at 00:00 UTC. The tallies live in
`<state root>/usage/<swarm>/usage.json` (0600, replaced atomically); writes are coalesced to
one every `SAVE_DELAY` seconds and done in a worker thread (the loop never waits for the
disk), so a daemon killed with SIGKILL may lose the last fraction of a second of counts (a
graceful stop saves everything).

A usage file that cannot be read or decoded never starts the day at zero (that would hand
every agent a fresh budget): it is renamed aside (`usage.json.corrupt-<UTC time>`, kept for
the operator), logged as `usage_file_corrupt` with `E_USAGE_FILE_CORRUPT`, and today's usage
is held as unknown (`Ledger.held`, saved, so a restart keeps holding): every agent with a
budget, its own or the swarm's, is refused until 00:00 UTC, when the counts start over anyway.

Nor does a deleted one (issue 27, F11: delete the file, SIGKILL the daemon, and every budget
was fresh). With the embedded journal, every save also keeps a copy of the ledger in the
journal's `usage` table (`UsageCopy`, in the journal writer's next batch). A missing file is
then today's usage from that copy (logged `usage_file_missing`, `E_USAGE_FILE_CORRUPT`, and
written back); a missing file with no copy while the journal has events (a journal from before
the copy existed) is held like a corrupt one. Without a journal (`ingress.journal: off`, or a
cluster node, whose journal is NATS) a missing file still starts at zero.

To resume earlier, an operator stops the daemon and puts a repaired file in place (`{}` starts
today at zero: that is then their decision), and starts it again.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import msgspec
import structlog

from bundles.kinds import Budget
from protocol.control import UsageInfo
from protocol.durable import write_atomic
from protocol.errors import ErrorCode, ErrorInfo

SAVE_DELAY = 0.25
HELD = "usageUnknown"
"""`exceeded` of every budget while the usage file was unreadable (`goondan status`)."""
RECENT_TURNS = 1000
log = structlog.get_logger("goondan.budgets")


class Tally(msgspec.Struct, kw_only=True, rename="camel"):
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Ledger(msgspec.Struct, kw_only=True, rename="camel"):
    """The file's content: one UTC day of tallies."""

    day: str = ""
    agents: dict[str, Tally] = msgspec.field(default_factory=dict)
    swarm: Tally = msgspec.field(default_factory=Tally)
    turns: list[str] = msgspec.field(default_factory=list)
    """Event ids of the latest turns counted (a resumed turn is not counted again)."""
    held: str = ""
    """Why today's usage is unknown (the file was unreadable): every budget counts as used up
    until the day ends."""


class UsageCopy(Protocol):
    """Where a copy of the ledger survives the file's deletion (the embedded journal)."""

    @property
    def usage_copy(self) -> bytes | None:
        """The ledger as last kept, read when the journal was opened."""
        ...

    @property
    def has_history(self) -> bool:
        """Whether the journal held events before this daemon."""
        ...

    def keep_usage(self, ledger: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class Call:
    """One model call's usage, as an agent reports it."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0


def utc_day(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).date().isoformat()


def _exceeded(
    tally: Tally, budget: Budget | None, new_turn: bool
) -> tuple[str, float, float] | None:
    """(the limit, used, allowed) of the first limit that is used up; the turns limit only
    counts for a turn that has not started yet."""
    if budget is None:
        return None
    if new_turn and budget.turns_per_day is not None and tally.turns >= budget.turns_per_day:
        return "turnsPerDay", tally.turns, budget.turns_per_day
    checks: list[tuple[str, float, float | None]] = [
        ("tokensPerDay", tally.tokens, budget.tokens_per_day),
        ("costUsdPerDay", tally.cost_usd, budget.cost_usd_per_day),
    ]
    for name, used, allowed in checks:
        if allowed is not None and used >= allowed:
            return name, used, allowed
    return None


@dataclass(slots=True)
class Budgets:
    path: Path
    swarm: str
    agent_budgets: Mapping[str, Budget | None] = field(default_factory=dict)
    swarm_budget: Budget | None = None
    clock: Callable[[], float] = time.time
    copy: UsageCopy | None = None
    ledger: Ledger = field(default_factory=Ledger)
    _recent: OrderedDict[str, None] = field(default_factory=OrderedDict)
    _save: asyncio.TimerHandle | None = None
    _writing: asyncio.Future[None] | None = None
    _changed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _taken: int = 0
    _stored: int = 0

    def load(self) -> None:
        """Today's tallies from the file (a file of another day, or none, starts at zero; one
        that cannot be read holds today's budgets, see the module docstring)."""
        restored = False
        try:
            ledger = msgspec.json.decode(self.path.read_bytes(), type=Ledger)
        except FileNotFoundError:
            ledger = self._missing()
            restored = ledger.day != ""
        except (OSError, msgspec.DecodeError) as exc:
            ledger = self._hold(exc)
        self.ledger = ledger
        self._recent = OrderedDict.fromkeys(ledger.turns)
        self._today()
        if self.ledger.held or restored:
            self.save()  # on disk before any agent runs: a restart keeps the hold, or the tally

    def _hold(self, exc: Exception) -> Ledger:
        """The unreadable file goes aside (never deleted) and today's usage is unknown."""
        stamp = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        try:
            os.rename(self.path, aside)
            kept = str(aside)
        except OSError as move:
            kept = f"not moved ({move.strerror})"
        return self._unknown(f"{self.path} could not be read ({_why(exc)}); kept as {kept}",
                             "usage_file_corrupt", kept=kept, error=_why(exc))  # fmt: skip

    def _unknown(self, held: str, event: str, **fields: str) -> Ledger:
        log.error(event, code=ErrorCode.E_USAGE_FILE_CORRUPT, path=str(self.path), **fields,
                  policy="every budget counts as used up until 00:00 UTC")  # fmt: skip
        return Ledger(day=utc_day(self.clock()), held=held)

    def _missing(self) -> Ledger:
        """No file: the journal's copy of it, a hold when the journal has events and no copy,
        zero only when there is no journal to tell (see the module docstring)."""
        copy = self.copy
        if copy is None:
            return Ledger()
        kept = copy.usage_copy
        if kept is None:
            if not copy.has_history:
                return Ledger()  # a new swarm: nothing was ever counted
            return self._unknown(f"{self.path} is missing and the journal has no copy of it",
                                 "usage_file_missing", restored="no")  # fmt: skip
        try:
            ledger = msgspec.json.decode(kept, type=Ledger)
        except msgspec.DecodeError as exc:
            return self._unknown(f"{self.path} is missing and the journal's copy of it could "
                                 f"not be read ({exc})", "usage_file_missing",
                                 restored="no")  # fmt: skip
        log.error("usage_file_missing", code=ErrorCode.E_USAGE_FILE_CORRUPT, path=str(self.path),
                  restored="from the journal's copy", day=ledger.day)  # fmt: skip
        return ledger

    def set_budgets(self, agents: Mapping[str, Budget | None], swarm: Budget | None) -> None:
        """The limits of the bundle (at start, and after a reload)."""
        self.agent_budgets, self.swarm_budget = dict(agents), swarm

    def _today(self) -> Ledger:
        day = utc_day(self.clock())
        if self.ledger.day != day:
            self.ledger = Ledger(day=day)
            self._recent.clear()
        return self.ledger

    def _agent(self, agent: str) -> Tally:
        return self._today().agents.setdefault(agent, Tally())

    # -- asking and counting ------------------------------------------------------------

    def refusal(self, agent: str, event_id: str | None = None) -> ErrorInfo | None:
        """Why `agent` may not go on (None: it may). Without `event_id`: may a new event be
        accepted for it. With one (a model call of that event's turn): a turn not seen
        before also needs a turn left, and is counted when it may run."""
        ledger = self._today()
        if ledger.held:
            return self._held_refusal(agent, ledger)
        new_turn = event_id is None or event_id not in self._recent
        for scope, tally, budget in (
            (f"agent {agent!r}", self._agent(agent), self.agent_budgets.get(agent)),
            (f"swarm {self.swarm!r}", ledger.swarm, self.swarm_budget),
        ):
            over = _exceeded(tally, budget, new_turn)
            if over is not None:
                return _refused(scope, agent, ledger.day, *over)
        if new_turn and event_id is not None:
            self._count_turn(agent, event_id)
        return None

    def _held_refusal(self, agent: str, ledger: Ledger) -> ErrorInfo | None:
        if self.agent_budgets.get(agent) is None and self.swarm_budget is None:
            return None  # no budget to keep: nothing to hold (and no turn to count)
        return ErrorInfo(
            code=ErrorCode.E_AGENT_BUDGET_EXCEEDED,
            message=f"today's usage of swarm {self.swarm!r} is unknown: {ledger.held}; "
            f"{agent} calls no model until 00:00 UTC",
            suggestion="stop the daemon, put a repaired usage.json in place (one that reads {} "
            "starts today at zero), and start it again",
        )

    def count(self, agent: str, event_id: str) -> None:
        """A model call of `event_id`'s turn was made: the turn counts, once. An agent without
        a budget or rate limit asks no permit, so `refusal` never sees its turns."""
        if event_id not in self._recent:
            self._count_turn(agent, event_id)

    def _count_turn(self, agent: str, event_id: str) -> None:
        self._recent[event_id] = None
        while len(self._recent) > RECENT_TURNS:
            self._recent.popitem(last=False)
        self._agent(agent).turns += 1
        self._today().swarm.turns += 1
        self._dirty()

    def add(self, agent: str, call: Call) -> None:
        for tally in (self._agent(agent), self._today().swarm):
            tally.input_tokens += max(0, call.input_tokens)
            tally.output_tokens += max(0, call.output_tokens)
            tally.cached_input_tokens += max(0, call.cached_input_tokens)
            tally.cost_usd += max(0.0, call.cost_usd)
        self._dirty()

    # -- reporting ----------------------------------------------------------------------

    def rows(self) -> list[UsageInfo]:
        """Every agent with usage or a budget, then the swarm."""
        ledger = self._today()
        names = sorted(set(ledger.agents) | {a for a, b in self.agent_budgets.items() if b})
        rows = [_row("agent", n, ledger.day, self._agent(n), self.agent_budgets.get(n))
                for n in names]  # fmt: skip
        rows.append(_row("swarm", self.swarm, ledger.day, ledger.swarm, self.swarm_budget))
        if ledger.held:  # unknown usage: every budget counts as used up
            rows = [msgspec.structs.replace(r, exceeded=HELD) if self._budgeted(r) else r
                    for r in rows]  # fmt: skip
        return rows

    def _budgeted(self, row: UsageInfo) -> bool:
        if self.swarm_budget is not None:
            return True
        return row.scope == "agent" and self.agent_budgets.get(row.name) is not None

    # -- persistence --------------------------------------------------------------------

    def _dirty(self) -> None:
        self._changed = True
        if self._save is None and self._writing is None:
            loop = asyncio.get_running_loop()
            self._save = loop.call_later(SAVE_DELAY, self._flush)

    def _snapshot(self) -> tuple[int, bytes]:
        """The ledger to write, also handed to the journal's copy (on the loop's thread)."""
        self.ledger.turns = list(self._recent)
        self._changed = False
        self._taken += 1
        data = msgspec.json.encode(self.ledger)
        if self.copy is not None:
            self.copy.keep_usage(data)
        return self._taken, data

    def _flush(self) -> None:
        """Write in a worker thread: the fsync must not stop the loop (every frame waits)."""
        self._save = None
        self._writing = asyncio.ensure_future(asyncio.to_thread(self._write, *self._snapshot()))
        self._writing.add_done_callback(self._written)

    def _written(self, _: asyncio.Future[None]) -> None:
        self._writing = None
        if self._changed:
            self._dirty()

    def _write(self, taken: int, data: bytes) -> None:
        """Write snapshot number `taken` unless a newer one is on disk already (a worker's
        write that ran late must not undo the last write at shutdown)."""
        try:
            with self._lock:  # the worker's write and a shutdown's share one temp file
                if taken <= self._stored:
                    return
                write_atomic(self.path, data)
                self._stored = taken
        except OSError as exc:
            log.error("usage_file_not_saved", path=str(self.path), error=str(exc))

    def save(self) -> None:
        """Write now, on this thread (at shutdown, and in tests)."""
        if self._save is not None:
            self._save.cancel()
            self._save = None
        self._write(*self._snapshot())


def _why(exc: Exception) -> str:
    return exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)


def _refused(
    scope: str, agent: str, day: str, limit: str, used: float, allowed: float
) -> ErrorInfo:
    where = "Agent" if scope.startswith("agent") else "Swarm"
    return ErrorInfo(
        code=ErrorCode.E_AGENT_BUDGET_EXCEEDED,
        message=f"{scope} used its {limit} budget for {day} (UTC): {used:g} of {allowed:g}; "
        f"{agent} calls no model until 00:00 UTC",
        suggestion=f"raise {where}.spec.policy.budget.{limit}, or wait for the next UTC day",
    )


def _row(scope: str, name: str, day: str, tally: Tally, budget: Budget | None) -> UsageInfo:
    over = _exceeded(tally, budget, new_turn=True)
    return UsageInfo(
        scope=scope,
        name=name,
        day=day,
        turns=tally.turns,
        input_tokens=tally.input_tokens,
        output_tokens=tally.output_tokens,
        cached_input_tokens=tally.cached_input_tokens,
        cost_usd=round(tally.cost_usd, 6),
        turns_per_day=budget.turns_per_day if budget else None,
        tokens_per_day=budget.tokens_per_day if budget else None,
        cost_usd_per_day=budget.cost_usd_per_day if budget else None,
        exceeded=over[0] if over else None,
    )
