"""A cluster node's page of its own log lines for `goondan logs` on another node: filtered,
bounded (the newest kept, the rest counted), and for a follower only what was written since."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.cluster import node_logs
from orchestrator.cluster.node_logs import NodeLogs
from orchestrator.observe.loglines import LogsAsk, decode_page, encode
from protocol.endpoints import StateLayout

T0 = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC).timestamp()


def write(path: Path, events: list[str], start: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        for i, event in enumerate(events, start):
            at = datetime.fromtimestamp(T0 + i, UTC).isoformat().replace("+00:00", "Z")
            process = "agent:coder:k1:1" if event.startswith("k1") else "agent:coder:k2:1"
            fh.write(json.dumps({"timestamp": at, "level": "info", "event": event,
                                 "process": process}) + "\n")  # fmt: skip


async def test_a_page_is_filtered_bounded_and_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = StateLayout(tmp_path)
    log = layout.orchestrator_log("s")
    write(log, [f"k1-{i}" for i in range(6)] + ["k2-0"])
    logs = NodeLogs(layout, "s", "n2")
    monkeypatch.setattr(node_logs, "PAGE_LINES", 4)

    page = await logs.page(LogsAsk(instance="k1"))
    assert [line.data["event"] for line in page.lines] == ["k1-2", "k1-3", "k1-4", "k1-5"]
    assert page.dropped == 2  # the oldest matching lines, counted
    assert {line.node for line in page.lines} == {"n2"}
    assert page.lines[0].record().instance == "k1"

    first = await logs.page(LogsAsk(follower="f"))
    assert len(first.lines) == 4 and first.dropped == 3
    write(log, ["k1-new"], start=10)
    later = await logs.page(LogsAsk(follower="f"))
    assert [line.data["event"] for line in later.lines] == ["k1-new"]
    assert (await logs.page(LogsAsk(follower="f"))).lines == []

    monkeypatch.setattr(node_logs, "PAGE_BYTES", 200)  # about one line's JSON
    small = await logs.page(LogsAsk())
    assert len(small.lines) <= 1 and small.dropped >= 3


async def test_followers_are_bounded_and_garbage_gets_an_empty_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = StateLayout(tmp_path)
    write(layout.orchestrator_log("s"), ["k1-0"])
    logs = NodeLogs(layout, "s", "n1")
    monkeypatch.setattr(node_logs, "MAX_FOLLOWERS", 3)
    for i in range(10):  # a client that never comes back does not grow the node
        await logs.page(LogsAsk(follower=f"f{i}"))
    assert len(logs._followers) == 3
    for garbage in (b"", b"\xff", b'{"since": "yesterday"}', b"[]"):
        assert decode_page(await logs.answer(garbage)).lines == []
    page = decode_page(await logs.answer(encode(LogsAsk())))
    assert [line.data["event"] for line in page.lines] == ["k1-0"]
