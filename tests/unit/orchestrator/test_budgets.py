"""Daily budgets on a fake clock: turns counted once per event, limits, UTC days, the file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from structlog.testing import capture_logs

from bundles.kinds import Budget
from orchestrator.calls.budgets import Budgets, Call
from orchestrator.ingress.journal.sqlite import SqliteJournal
from protocol.errors import ErrorCode
from protocol.events import Source, SourceKind, new_event

DAY = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def make(path: Path, clock: list[float], **agent: Budget) -> Budgets:
    budgets = Budgets(path, "s", clock=lambda: clock[0])
    budgets.load()
    budgets.set_budgets(agent, Budget(tokens_per_day=1000))
    return budgets


async def test_turns_are_counted_once_per_event(tmp_path: Path) -> None:
    clock = [DAY + 10]
    budgets = make(tmp_path / "u.json", clock, a=Budget(turns_per_day=2))
    assert budgets.refusal("a", "e1") is None
    assert budgets.refusal("a", "e1") is None  # the same turn's next step
    assert budgets.refusal("a", "e2") is None
    assert budgets.refusal("a", "e2") is None  # a turn resumed after a client-side call
    refused = budgets.refusal("a", "e3")
    assert refused is not None and refused.code == ErrorCode.E_AGENT_BUDGET_EXCEEDED
    assert budgets.refusal("a") is not None  # a new event is refused at once
    row = next(r for r in budgets.rows() if r.name == "a")
    assert (row.turns, row.exceeded) == (2, "turnsPerDay")


async def test_the_swarm_budget_counts_every_agent_and_days_start_over(tmp_path: Path) -> None:
    clock = [DAY + 10]
    budgets = make(tmp_path / "u.json", clock)
    budgets.add("a", Call(input_tokens=600, output_tokens=100))
    assert budgets.refusal("b", "e1") is None
    budgets.add("b", Call(input_tokens=300, output_tokens=10, cost_usd=0.5))
    refused = budgets.refusal("b", "e1")
    assert refused is not None and "swarm 's'" in refused.message
    budgets.save()
    clock[0] = DAY + 86_400 + 1  # the next UTC day
    again = make(tmp_path / "u.json", clock)
    assert again.refusal("b", "e9") is None
    assert again.rows()[-1].input_tokens == 0


async def test_tallies_survive_a_restart(tmp_path: Path) -> None:
    clock = [DAY + 10]
    budgets = make(tmp_path / "u.json", clock)
    budgets.refusal("a", "e1")
    budgets.add("a", Call(input_tokens=5, output_tokens=3, cached_input_tokens=2, cost_usd=0.25))
    budgets.save()
    assert (tmp_path / "u.json").stat().st_mode & 0o777 == 0o600
    reloaded = make(tmp_path / "u.json", clock)
    row = next(r for r in reloaded.rows() if r.name == "a")
    assert (row.turns, row.input_tokens, row.cached_input_tokens, row.cost_usd) == (1, 5, 2, 0.25)
    assert (
        reloaded.refusal("a", "e1") is None
        and next(r for r in reloaded.rows() if r.name == "a").turns == 1
    )  # e1 was counted before the restart


async def test_a_late_background_write_never_undoes_the_last_one(tmp_path: Path) -> None:
    clock = [DAY + 10]
    budgets = make(tmp_path / "u.json", clock)
    budgets.add("a", Call(input_tokens=1))
    early = budgets._snapshot()  # a worker's snapshot, written late
    budgets.add("a", Call(input_tokens=1))
    budgets.save()  # shutdown: the newest counts
    budgets._write(*early)
    reloaded = make(tmp_path / "u.json", clock)
    assert next(r for r in reloaded.rows() if r.name == "a").input_tokens == 2


def kept_aside(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith("u.json.corrupt-")]


async def test_a_corrupt_usage_file_is_kept_aside_and_holds_todays_budgets(
    tmp_path: Path,
) -> None:
    clock = [DAY + 10]
    path = tmp_path / "u.json"
    path.write_bytes(b'{"day": "2026-01-01", "agents": {"a": {"turns": 3')  # torn
    budgets = Budgets(path, "s", clock=lambda: clock[0])
    budgets.load()
    budgets.set_budgets({"a": Budget(turns_per_day=5), "free": None}, None)
    kept = kept_aside(tmp_path)
    assert [p.read_bytes() for p in kept] == [b'{"day": "2026-01-01", "agents": {"a": {"turns": 3']
    refused = budgets.refusal("a", "e1")
    assert refused is not None and refused.code == ErrorCode.E_AGENT_BUDGET_EXCEEDED
    assert "unknown" in refused.message and kept[0].name in refused.message
    assert budgets.refusal("free", "e2") is None  # no budget: nothing to hold
    assert {r.name: r.exceeded for r in budgets.rows()} == {"a": "usageUnknown", "s": None}
    restarted = make(path, clock)  # the hold was saved: a restart does not forget it
    assert restarted.refusal("a", "e3") is not None
    clock[0] = DAY + 86_400 + 1  # the next UTC day starts at zero, as every day does
    assert restarted.refusal("a", "e4") is None


async def test_an_unreadable_usage_file_holds_too(tmp_path: Path) -> None:
    clock = [DAY + 10]
    (tmp_path / "u.json").mkdir()  # read_bytes: IsADirectoryError, an OSError
    budgets = make(tmp_path / "u.json", clock)  # the swarm has a budget: everyone is held
    refused = budgets.refusal("anyone")
    assert refused is not None and refused.code == ErrorCode.E_AGENT_BUDGET_EXCEEDED
    assert [p.is_dir() for p in kept_aside(tmp_path)] == [True]


async def journal_budgets(tmp_path: Path, clock: list[float]) -> tuple[Budgets, SqliteJournal]:
    journal = await SqliteJournal.open(tmp_path / "journal" / "ingress.sqlite3")
    budgets = Budgets(tmp_path / "u.json", "s", clock=lambda: clock[0], copy=journal)
    budgets.load()
    budgets.set_budgets({"a": Budget(turns_per_day=1)}, None)
    return budgets, journal


async def test_a_deleted_usage_file_comes_back_from_the_journals_copy(tmp_path: Path) -> None:
    """Issue 27, F11: deleting usage.json (and SIGKILLing the daemon) reset every budget."""
    clock = [DAY + 10]
    async with asyncio.timeout(10):
        budgets, journal = await journal_budgets(tmp_path, clock)
        assert budgets.refusal("a", "e1") is None
        budgets.add("a", Call(input_tokens=5))
        budgets.save()
        await journal.close()  # after the copy's batch
        (tmp_path / "u.json").unlink()
        with capture_logs() as logs:
            again, journal = await journal_budgets(tmp_path, clock)
        refused = again.refusal("a", "e2")
        assert refused is not None and refused.code == ErrorCode.E_AGENT_BUDGET_EXCEEDED
        assert (again.rows()[0].turns, again.rows()[0].input_tokens) == (1, 5)
        assert (tmp_path / "u.json").exists()  # written back
        await journal.close()
    [line] = [x for x in logs if x["event"] == "usage_file_missing"]
    assert line["code"] == ErrorCode.E_USAGE_FILE_CORRUPT


async def test_a_missing_file_with_journal_history_and_no_copy_is_held(tmp_path: Path) -> None:
    """A journal from before the copy existed: its events say a day was counted somewhere."""
    clock = [DAY + 10]
    async with asyncio.timeout(10):
        journal = await SqliteJournal.open(tmp_path / "journal" / "ingress.sqlite3")
        source = Source(kind=SourceKind.CLI, name="test")
        await journal.append(new_event(type="user.message", input="x", instance_key="k",
                                       source=source), "agent:a:k")  # fmt: skip
        await journal.close()
        with capture_logs() as logs:
            budgets, journal = await journal_budgets(tmp_path, clock)
        refused = budgets.refusal("a", "e1")
        assert refused is not None and "is missing" in refused.message
        assert budgets.rows()[0].exceeded == "usageUnknown"
        await journal.close()
    assert [x["code"] for x in logs if x["event"] == "usage_file_missing"] == [
        ErrorCode.E_USAGE_FILE_CORRUPT
    ]


async def test_a_new_swarm_with_a_new_journal_starts_at_zero(tmp_path: Path) -> None:
    async with asyncio.timeout(10):
        budgets, journal = await journal_budgets(tmp_path, [DAY + 10])
        assert budgets.refusal("a", "e1") is None
        await journal.close()
