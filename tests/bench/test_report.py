"""The report's goal grammar (`pytest tests/bench/test_report.py`)."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from tests.bench.baselines import Row, stalls
from tests.bench.report import table, verdict

CASES = [
    (Row("rt", 300, 900, "µs", 250, "≤ 1.25x, p99 ≤ 1000 µs"), "pass"),
    (Row("rt", 400, 900, "µs", 250, "≤ 1.25x, p99 ≤ 1000 µs"), "FAIL"),
    (Row("rt", 300, 1100, "µs", 250, "≤ 1.25x, p99 ≤ 1000 µs"), "FAIL"),
    (Row("spawn", 6, 9, "ms", 4, "≤ 10 ms p50"), "pass"),
    (Row("crash", 16, 20, "ms", 4, "≤ 15 ms"), "FAIL"),
    (Row("uss", 5, 6, "MiB", None, "≤ 6 MiB"), "pass"),
    (Row("held", 1000, None, "agents", None, "1,000"), "pass"),
    (Row("held", 999, None, "agents", None, "1,000"), "FAIL"),
    (Row("turns", 1, None, "turns", None, "exactly 1"), "pass"),
    (Row("req", 2.9, 5, "ms", 1, "≤ 3000 µs p50"), "pass"),
    (Row("req", 2.9, 5, "ms", 1, "fast please"), "?"),
    (Row("plain", 2.9, 5, "ms", 1, ""), ""),
]


@pytest.mark.parametrize(("row", "want"), CASES)
def test_verdicts(row: Row, want: str) -> None:
    assert verdict(row) == want


def test_table_has_one_line_per_row() -> None:
    from tests.bench.report import Line

    text = table([Line("b", r, verdict(r)) for r, _ in CASES])
    assert len(text.splitlines()) == 2 + len(CASES)
    assert (
        "| b | rt | 300.0 | - | 900.0 | - | µs | 250.0 | 1.20x | ≤ 1.25x, p99 ≤ 1000 µs | pass |"
        in text
    )


def test_table_counts_stalls_when_the_row_has_them() -> None:
    from tests.bench.report import Line

    row = Row("hop", 1900, 2500, "µs", 1400, "≤ 2000 µs p50", stalls=stalls([1.0] * 299 + [11.0]))
    assert "| b | hop | 1,900.0 | - | 2,500.0 | 1 | µs |" in table([Line("b", row, verdict(row))])


def test_the_report_says_which_python_ran_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.bench import report

    monkeypatch.chdir(tmp_path)  # REPORT is relative: bench-report.md lands here
    monkeypatch.setattr(report.plot, "write", lambda path: "no plot")
    report.write({"b": [[Row("spawn", 6, 9, "ms", 4, "≤ 10 ms p50")]]})
    top = (tmp_path / report.REPORT).read_text().splitlines()[:3]
    version = ".".join(map(str, sys.version_info[:3]))
    assert top[2] == f"{platform.python_implementation()} {version} ({sys.executable})"
    assert top[2] in capsys.readouterr().out


def test_a_goal_is_met_only_when_every_run_meets_it() -> None:
    from tests.bench.report import lines_of

    goal = "≤ 10 ms p50"
    runs = [
        [Row("spawn", 6, 9, "ms", 4, goal), Row("idle", 1, 2, "%", None)],
        [Row("spawn", 12, 14, "ms", 4, goal), Row("idle", 3, 4, "%", None)],
        [Row("spawn", 7, 8, "ms", 4, goal), Row("idle", 2, 3, "%", None)],
    ]
    spawn, idle = lines_of({"b": runs})
    assert (spawn.row.median, spawn.verdict, spawn.met) == (7, "FAIL", 2)  # the middle run
    assert (idle.row.median, idle.verdict) == (2, "")
    text = table([spawn, idle])
    assert "| b | spawn | 7.0 | 6.0 to 12.0 | 8.0 |" in text and "| FAIL 2/3 |" in text
    steady = lines_of({"b": [[Row("spawn", m, m, "ms", 4, goal)] for m in (6, 7, 8)]})[0]
    assert (steady.verdict, steady.met) == ("pass", 3)
    assert "| pass 3/3 |" in table([steady])


def test_two_figures_of_one_name_in_a_run_stay_two() -> None:
    from tests.bench.report import lines_of

    run = [Row("send", 3, 4, "ms", None), Row("  less", 1, 2, "x", None, "≤ 1.05x"),
           Row("edge", 5, 6, "ms", None), Row("  less", 9, 9, "x", None, "≤ 1.05x")]  # fmt: skip
    lines = lines_of({"b": [run, run]})
    assert [(ln.row.name, ln.row.median, len(ln.runs)) for ln in lines] == [
        ("send", 3, 2), ("  less", 1, 2), ("edge", 5, 2), ("  less", 9, 2),
    ]  # fmt: skip


def test_a_figure_in_a_rows_name_does_not_split_its_runs() -> None:
    from tests.bench.report import lines_of

    runs = [[Row(f"one call: peer (+{m} µs)", m, m, "µs", 1.0)] for m in (812, 790)]
    [line] = lines_of({"peers": runs})
    assert len(line.runs) == 2
