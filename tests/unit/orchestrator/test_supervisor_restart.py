"""`Supervisor.restart` tells its restart listeners before and after (the daemon registers
systemd's RELOADING=1 ... READY=1 this way, `systemd.RestartNotices`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.supervision.settings import Settings
from orchestrator.supervision.spawner import ColdSpawner
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.swarm.view import CurrentSwarm, SwarmView
from orchestrator.systemd import RestartNotices
from protocol.endpoints import StateLayout
from protocol.launch import LaunchSettings
from tests.unit.orchestrator.conftest import Routed


class Recorder:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def restart_started(self) -> None:
        self.log.append(f"{self.name} started")

    def restart_finished(self) -> None:
        self.log.append(f"{self.name} finished")


class Notifier:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None]] = []

    def reloading(self, status: str | None = None) -> bool:
        self.sent.append(("RELOADING", status))
        return True

    def ready(self, status: str | None = None) -> bool:
        self.sent.append(("READY", status))
        return True


def supervisor(routed: Routed, tmp_path: Path) -> Supervisor:
    bundle, state = str(tmp_path / "goondan.yaml"), str(tmp_path)
    launch = LaunchSettings(endpoint=routed.endpoint, swarm="s", bundle=bundle, state_root=state)
    view = SwarmView(name="s", entry_agent="a", default_instance_key="s", members=("a",))
    router = routed.router
    return Supervisor(table=router.table, mailboxes=router.mailboxes, deliveries=router,
                      placement=router.placement, spawner=ColdSpawner(), settings=Settings(),
                      launch=launch, layout=StateLayout(root=tmp_path),
                      swarm=CurrentSwarm(view))  # fmt: skip


async def test_listeners_hear_of_each_restart_in_order(routed: Routed, tmp_path: Path) -> None:
    routed.entry.status = ProcessStatus.TERMINATED  # nothing to stop: the restart is immediate
    sup = supervisor(routed, tmp_path)
    log: list[str] = []
    sup.add_restart_listener(Recorder("one", log))
    sup.add_restart_listener(Recorder("two", log))
    async with asyncio.timeout(5):
        assert await sup.restart(None, fresh=False) == []
    assert log == ["one started", "two started", "one finished", "two finished"]


def test_restart_notices_are_reloading_then_ready() -> None:
    notifier = Notifier()
    notices = RestartNotices(notifier, lambda: "swarm s: 1 process")  # type: ignore[arg-type]
    notices.restart_started()
    notices.restart_finished()
    assert notifier.sent == [("RELOADING", "swarm s: 1 process"), ("READY", "swarm s: 1 process")]
