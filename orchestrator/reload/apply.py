"""Reload the bundle in a running daemon: SIGHUP, the `Reload` control request, `run --watch`.

A reload loads and validates the bundle again. If that fails, every diagnostic is logged
(`reload_rejected`) and returned, and nothing running is touched: the daemon keeps the old
bundle. If it succeeds, the daemon's view of the swarm (`orchestrator.swarm.SwarmView`) is
swapped in one step and only the processes the change planner (`orchestrator.reload.changes`) names
are restarted, gracefully, with `shutdown{config_change}`; their history stays on disk, so
conversations continue.

New children read the new bundle: a forked child takes the fork server's preloaded bundle only
while none of its files changed (`agent_process.preload.Preloaded.matches`), otherwise it loads
the bundle from disk itself; prompts and entries are always read by the child at start.

Requests are serialised (one reload at a time) and coalesced (signals that arrive during a
reload cause one more reload, not one per signal).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from bundles import redact
from bundles.diagnostics import BundleError, Diagnostic
from bundles.files import watched_paths
from bundles.kinds import Kind
from bundles.loader import load_bundle
from bundles.model import Bundle
from orchestrator.reload.changes import ChangePlan, Snapshot, describe, plan_changes, snapshot
from orchestrator.reload.watch import watch_files
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.supervision.table import ProcessEntry
from orchestrator.swarm.view import CurrentSwarm, SwarmView
from protocol.errors import ErrorCode, ErrorInfo
from protocol.ids import ProcessKind
from protocol.jsontypes import JsonObject
from protocol.messages import ShutdownReason

log = structlog.get_logger("goondan.reload")


class Notifier(Protocol):
    """The part of `orchestrator.systemd.Notifier` a reload uses (RELOADING=1 ... READY=1)."""

    def reloading(self, status: str | None = None) -> bool: ...

    def ready(self, status: str | None = None) -> bool: ...


@dataclass(frozen=True, slots=True)
class BundleSource:
    """Where the running bundle came from: reloads read the same inputs."""

    path: Path
    env_files: tuple[Path, ...]
    state_root: Path
    swarm: str

    def load(self) -> Bundle:
        bundle = load_bundle(self.path, env_files=self.env_files, state_root=self.state_root)
        if bundle.find(Kind.SWARM, self.swarm) is None:
            raise BundleError([_no_swarm(self.swarm)])
        return bundle


def _no_swarm(swarm: str) -> Diagnostic:
    return Diagnostic(
        ErrorCode.E_CONFIG_NO_SWARM,
        f"the running swarm {swarm!r} is no longer in the bundle",
        "Swarm",
        "a daemon serves one swarm: put it back, or stop and run the new one",
    )


@dataclass(slots=True)
class ReloadOutcome:
    trigger: str
    ok: bool
    diagnostics: list[str] = field(default_factory=list)
    code: ErrorCode | None = None
    plan: ChangePlan | None = None
    restarted: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    replaced: list[JsonObject] = field(default_factory=list)
    """One row per restarted process (`process` old, `started` new, `killed`), as `restart`."""

    def result(self) -> JsonObject:
        """The `Reload` control reply's result."""
        summary: JsonObject = describe(self.plan) if self.plan is not None else {}
        return {"ok": self.ok, "trigger": self.trigger, "diagnostics": self.diagnostics,
                "restarted": self.restarted, "stopped": self.stopped,
                "replaced": self.replaced, **summary}  # fmt: skip

    def error(self) -> ErrorInfo | None:
        if self.ok:
            return None
        lines = "\n  ".join(self.diagnostics)
        return ErrorInfo(
            code=self.code or ErrorCode.E_CONFIG_SCHEMA_INVALID,
            message=f"reload rejected, nothing was restarted:\n  {lines}",
            suggestion="fix the bundle and reload again; the daemon keeps the old bundle",
        )


class Reloader:
    def __init__(
        self,
        source: BundleSource,
        current: Bundle,
        supervisor: Supervisor,
        swarm: CurrentSwarm,
        *,
        notifier: Notifier | None = None,
        on_swap: Callable[[], None] | None = None,
        after_restart: Callable[[], None] | None = None,
    ) -> None:
        self.source = source
        self.current: Snapshot = snapshot(current)
        self.supervisor = supervisor
        self.swarm = swarm
        """The daemon's view of the swarm: a reload swaps in the new bundle's."""
        self.notifier = notifier
        self.on_swap = on_swap
        """Called after a swap, before any restart (e.g. refresh the fork server's bundle)."""
        self.after_restart = after_restart
        """Called after the restarts (e.g. start the connectors of new Connections)."""
        self._secrets = set(current.secret_values)
        self._requests: asyncio.Queue[str] = asyncio.Queue()
        self._lock = asyncio.Lock()

    def request(self, trigger: str) -> None:
        """Safe from a signal handler: only enqueues."""
        self._requests.put_nowait(trigger)

    async def run(self) -> None:
        while True:
            trigger = await self._requests.get()
            while not self._requests.empty():  # coalesce a burst into one reload
                self._requests.get_nowait()
            try:
                await self.reload(trigger)
            except Exception:  # a bug in one reload must not end reloading (nor the daemon)
                log.exception("reload_failed", trigger=trigger)

    async def reload(self, trigger: str) -> ReloadOutcome:
        async with self._lock:
            return await self._reload(trigger)

    async def answer(self, trigger: str) -> tuple[JsonObject, ErrorInfo | None]:
        """The `Reload` control request (`orchestrator.control.server.ReloadFn`)."""
        outcome = await self.reload(trigger)
        return outcome.result(), outcome.error()

    def _load(self) -> tuple[Snapshot, SwarmView]:
        bundle = self.source.load()
        return snapshot(bundle), SwarmView.of(bundle, bundle.swarm(self.source.swarm))

    async def _reload(self, trigger: str) -> ReloadOutcome:
        log.info("reload_started", trigger=trigger, bundle=str(self.source.path))
        try:
            # off the loop: YAML and validation take tens of ms, the broker must keep turning
            new, view = await asyncio.to_thread(self._load)
        except BundleError as exc:
            return self._rejected(trigger, [str(d) for d in exc.diagnostics], exc.codes[0])
        except Exception as exc:  # bad input must not end the daemon: report it as data
            return self._rejected(trigger, [f"cannot load the bundle: {exc!r}"], None)
        plan = plan_changes(self.current, new, self.source.swarm)
        self._notify("reloading")
        try:
            self.current = new
            self.swarm.swap(view)
            self._mask_secrets(new.bundle)
            if self.on_swap is not None:
                self.on_swap()
            outcome = await self._restart(trigger, plan)
        finally:
            self._notify("ready")
        log.info("reloaded", trigger=trigger, restarted=outcome.restarted,
                 stopped=outcome.stopped, **describe(plan))  # fmt: skip
        return outcome

    def _mask_secrets(self, bundle: Bundle) -> None:
        """Mask old and new secret values in logs: both may still show."""
        if not bundle.secret_values <= self._secrets:
            self._secrets.update(bundle.secret_values)
            redact.install(self._secrets)

    def _rejected(
        self, trigger: str, diagnostics: list[str], code: ErrorCode | None
    ) -> ReloadOutcome:
        log.error("reload_rejected", trigger=trigger, diagnostics=diagnostics,
                  kept="the running bundle; no process was touched")  # fmt: skip
        return ReloadOutcome(trigger=trigger, ok=False, diagnostics=diagnostics, code=code)

    async def _restart(self, trigger: str, plan: ChangePlan) -> ReloadOutcome:
        def affected(e: ProcessEntry) -> bool:
            agent = e.address.kind is ProcessKind.AGENT
            return e.address.name in (plan.agents if agent else plan.connections)

        def removed(e: ProcessEntry) -> bool:
            agent = e.address.kind is ProcessKind.AGENT
            return e.address.name in (plan.removed_agents if agent else plan.removed_connections)

        gone = [e for e in self.supervisor.table if removed(e)]
        restarting = asyncio.ensure_future(
            self.supervisor.restart_where(affected, ShutdownReason.CONFIG_CHANGE)
        )
        await asyncio.gather(*(self.supervisor.stop(e, ShutdownReason.CONFIG_CHANGE) for e in gone))
        for entry in gone:
            if entry.address.kind is ProcessKind.CONNECTOR and not entry.live:
                # connectors are always up: out of the table, or the reconciler restarts it
                self.supervisor.table.remove(entry.address)
        replaced = await restarting
        restarted = [str(row["started"]) for row in replaced]
        if self.after_restart is not None:
            self.after_restart()
        stopped = [str(e.process_id) for e in gone if e.ever_started]
        return ReloadOutcome(trigger=trigger, ok=True, plan=plan, restarted=restarted,
                             stopped=stopped, replaced=replaced)  # fmt: skip

    def _notify(self, what: str) -> None:
        if self.notifier is None:
            return
        status = f"reloading {self.source.path.name}" if what == "reloading" else None
        if what == "reloading":
            self.notifier.reloading(status)
        else:
            self.notifier.ready(status)


def serve(reloader: Reloader, *, watch: bool) -> list[Coroutine[Any, Any, None]]:
    """Reload on SIGHUP and (with `watch`) when the bundle's files change; return the tasks to
    run for the daemon's lifetime. The `Reload` request calls `reloader.answer` directly."""
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reloader.request, "SIGHUP")
    tasks: list[Coroutine[Any, Any, None]] = [reloader.run()]
    if watch:
        tasks.append(watch_files(lambda: watch_list(reloader), reloader.request))
    return tasks


def watch_list(reloader: Reloader) -> list[Path]:
    """The current bundle's files (re-computed after each reload) and the --env-file files."""
    return [*watched_paths(reloader.current.bundle), *reloader.source.env_files]
