"""`goondan logs`: discovery, merge order, filters, --since parsing, --json, following."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import main
from orchestrator.commands.logs import Follower
from orchestrator.observe import logview
from protocol.endpoints import StateLayout

T0 = datetime(2026, 1, 31, 12, 0, 0, tzinfo=UTC).timestamp()
TRACE_A = "a" * 32
TRACE_B = "b" * 32


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def _write(path: Path, lines: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    with path.open("a") as fh:
        fh.write(text)


@pytest.fixture
def layout() -> StateLayout:
    """A swarm `s` with an orchestrator log, one process log and one runtime-events file."""
    lay = StateLayout.from_env()
    _write(lay.orchestrator_log("s"), [
        {"timestamp": _iso(T0 + 0), "level": "info", "event": "started", "pid": 1},
        {"timestamp": _iso(T0 + 3), "level": "info", "event": "transition",
         "process": "agent:coder:tg:42:1", "target": "processing"},
    ])  # fmt: skip
    _write(lay.process_log("s", "coder", "tg:42"), [
        {"timestamp": _iso(T0 + 1), "level": "info", "event": "hello", "agent": "coder",
         "instanceKey": "tg:42"},
        "Traceback (most recent call last): raw text",
        {"timestamp": _iso(T0 + 5), "level": "error", "event": "tool_failed", "agent": "coder",
         "instanceKey": "tg:42", "traceId": TRACE_A},
    ])  # fmt: skip
    events = lay.instance_paths("s", "tg:42", "coder").runtime_events_jsonl
    _write(events, [
        {"type": "turn.started", "at": T0 + 4, "agent": "coder", "instanceKey": "tg:42",
         "traceId": TRACE_A},
        {"type": "turn.completed", "at": T0 + 6, "agent": "coder", "instanceKey": "tg:42",
         "traceId": TRACE_A, "status": "completed"},
    ])  # fmt: skip
    _write(lay.process_log("s", "other", "k"), [
        {"timestamp": _iso(T0 + 2), "level": "info", "event": "hello", "agent": "other",
         "instanceKey": "k", "traceId": TRACE_B},
    ])  # fmt: skip
    return lay


def _records(layout: StateLayout, keep: logview.Filter | None = None) -> list[logview.Record]:
    tail = logview.LogTail(layout, None)
    return [r for r in tail.read_new() if (keep or logview.Filter())(r)]


def _events(records: list[logview.Record]) -> list[str]:
    return [str(r.data.get("event") or r.data.get("type")) for r in records]


def test_discovers_every_file_and_who_wrote_it(layout: StateLayout) -> None:
    sources = {(s.kind, s.agent, s.instance) for s in logview.discover(layout)}
    assert sources == {
        ("orchestrator", None, None),
        ("process", "coder", "tg:42"),
        ("process", "other", "k"),
        ("events", "coder", "tg:42"),
    }


def test_merged_by_time_raw_text_stays_after_its_line(layout: StateLayout) -> None:
    assert _events(_records(layout)) == [
        "started", "hello", "_text", "hello", "transition", "turn.started", "tool_failed",
        "turn.completed",
    ]  # fmt: skip
    times = [r.at for r in _records(layout)]
    assert times == sorted(times)


def test_filter_by_agent_includes_orchestrator_lines_about_it(layout: StateLayout) -> None:
    got = _records(layout, logview.Filter(agent="coder"))
    assert _events(got) == [
        "hello", "_text", "transition", "turn.started", "tool_failed", "turn.completed",
    ]  # fmt: skip
    assert {r.instance for r in got} == {"tg:42"}


def test_filter_by_instance_and_trace(layout: StateLayout) -> None:
    assert _events(_records(layout, logview.Filter(instance="k"))) == ["hello"]
    by_trace = _records(layout, logview.Filter(trace=TRACE_A))
    assert _events(by_trace) == ["turn.started", "tool_failed", "turn.completed"]


def test_filter_since(layout: StateLayout) -> None:
    assert _events(_records(layout, logview.Filter(since=T0 + 4.5))) == [
        "tool_failed", "turn.completed",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10m", T0 - 600),
        ("1h30m", T0 - 5400),
        ("2d", T0 - 2 * 86400),
        ("0.5s", T0 - 0.5),
        ("2026-01-31T11:00:00Z", T0 - 3600),
        ("2026-01-31T11:00:00", T0 - 3600),
        ("2026-01-31T13:00:00+02:00", T0 - 3600),
    ],
)
def test_parse_since(text: str, expected: float) -> None:
    assert logview.parse_since(text, T0) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["yesterday", "10x", "m10", ""])
def test_parse_since_rejects_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        logview.parse_since(text, T0)


def test_cli_readable_output(layout: StateLayout, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--agent", "coder", "--trace", TRACE_A]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    assert out[0].startswith("2026-01-31T12:00:04.000Z coder/tg:42 event turn.started")
    assert "error tool_failed trace=aaaaaaaa" in out[1]
    assert "status=completed" in out[2]


def test_cli_json_output(layout: StateLayout, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--json", "--instance", "tg:42"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["source"] for x in lines] == [
        "process", "process", "orchestrator", "events", "process", "events",
    ]  # fmt: skip
    raw = lines[1]
    assert raw["event"] == "_text" and raw["agent"] == "coder" and raw["instanceKey"] == "tg:42"


def test_cli_bad_since_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--since", "soon"]) == 2
    assert "--since 'soon'" in capsys.readouterr().err


def test_follow_prints_only_new_whole_lines_and_new_files(
    layout: StateLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    follower = Follower(layout, "s", logview.Filter(agent="coder"), logview.render)
    follower.refresh()
    assert follower.print_new() == 6
    capsys.readouterr()
    log = layout.process_log("s", "coder", "tg:42")
    with log.open("a") as fh:
        fh.write(json.dumps({"timestamp": _iso(T0 + 7), "event": "later", "agent": "coder"}))
    assert follower.print_new() == 0  # no newline yet: the line may still be growing
    with log.open("a") as fh:
        fh.write("\n")
    _write(layout.process_log("s", "coder", "other-key"), [
        {"timestamp": _iso(T0 + 8), "event": "new_instance", "agent": "coder"},
    ])  # fmt: skip
    follower.refresh()
    assert follower.print_new() == 2
    out = capsys.readouterr().out
    assert "info later" in out and "new_instance" in out


def test_truncated_file_is_read_again_from_the_start(layout: StateLayout) -> None:
    source = next(s for s in logview.discover(layout, "s") if s.kind == "orchestrator")
    reader = logview.Reader(source)
    assert len(reader.read_new()) == 2
    reader.source.path.write_text(json.dumps({"timestamp": _iso(T0), "event": "fresh"}) + "\n")
    assert [r.data["event"] for r in reader.read_new()] == ["fresh"]


def test_cli_finds_a_trace_by_the_short_id_it_prints(
    layout: StateLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["logs", "--trace", TRACE_A[:8]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and all("trace=aaaaaaaa" in line for line in out)


def test_cli_unknown_swarm_or_agent_is_an_error_naming_what_exists(
    layout: StateLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["logs", "--swarm", "nope"]) == 1
    err = capsys.readouterr().err
    assert "'nope'" in err and "swarms: s" in err
    assert main(["logs", "--agent", "codr"]) == 1
    err = capsys.readouterr().err
    assert "'codr'" in err and "coder" in err and "other" in err


def test_cli_merged_lines_of_several_swarms_name_their_swarm(
    layout: StateLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(layout.process_log("t", "bot", "my key"), [
        {"timestamp": _iso(T0 + 7), "level": "info", "event": "turn", "agent": "bot",
         "instanceKey": "my key", "durationMs": 12.3456789},
    ])  # fmt: skip
    assert main(["logs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith('2026-01-31T12:00:07.000Z t:bot/"my key" info turn')
    assert "durationMs=12.3" in out[-1] and "12.34" not in out[-1]
    assert any(line.startswith("2026-01-31T12:00:01.000Z s:coder/tg:42") for line in out)
    assert main(["logs", "--swarm", "s"]) == 0  # one swarm: no prefix
    assert capsys.readouterr().out.splitlines()[0].split()[1] == "orchestrator"
