"""The benchmark report: every figure with its baseline, ratio, goal and a pass/fail verdict.

`python -m tests.bench` hands the rows of every bench_* module here; the table goes to stdout
and to bench-report.md (gitignored), under the Python that ran it (figures differ between
versions: the fork server's preparation is measured per version). Goals are the strings the
benchmarks already print, read by a small grammar (clauses joined by ", "):

- `≤ 10 ms p50`, `≤ 15 ms`, `≤ 6 MiB`: the median (or the named percentile) at most this;
- `p99 ≤ 1000 µs`: the p99 at most this;
- `≤ 1.25x`: the ratio to the baseline of the same run at most this;
- `1,000`: at least this many (a count);
- `exactly 1`: the median is this value.

Each benchmark runs `BENCH_RUNS` times (default 3; `__main__.py`): a figure's row shows the
median of its runs' medians (and that run's p99, baseline and ratio), the spread of the
medians (lowest to highest), and its goal is met only when every run meets it (`pass 3/3`; `FAIL
2/3` when one run missed it): one lucky run on a noisy machine proves nothing.

The `> 10x median` column counts the samples over ten times the median (rows that count them):
rare stalls that a p99 over a few hundred samples can hide. A goal the grammar cannot read is
reported as `?`, never as a pass. The plot (plot.py: latency
percentiles, spawn time vs live agents) is written next to the report when matplotlib is
importable; else it is skipped with a line saying how to install it.
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.bench import plot
from tests.bench.baselines import STALL_FACTOR, Row

REPORT = Path("bench-report.md")
PLOT = Path("bench-plot.png")
_UNITS = {"µs": 1.0, "us": 1.0, "ms": 1000.0, "s": 1e6}
_BOUND = re.compile(
    r"^(?:(?P<pre>p50|p99)\s*)?≤\s*(?P<num>[\d.,]+)\s*(?P<unit>x|µs|us|ms|s|MiB)?\s*(?P<post>p50|p99)?$"
)


@dataclass(frozen=True, slots=True)
class Line:
    bench: str
    row: Row
    verdict: str
    """pass | FAIL | ? (goal not understood) | "" (no goal), over every run."""
    runs: tuple[Row, ...] = ()
    """The figure's row in each run (empty: one run, `row` itself)."""
    met: int | None = None
    """How many runs met the goal (None: no goal)."""


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _convert(value: float, unit: str, to: str) -> float | None:
    if unit == to:
        return value
    if unit in _UNITS and to in _UNITS:
        return value * _UNITS[unit] / _UNITS[to]
    return None


def _clause(row: Row, clause: str) -> bool | None:
    """True/False when the clause is understood, None when it is not."""
    clause = clause.strip()
    if m := re.fullmatch(r"exactly\s+([\d.,]+)", clause):
        return row.median == _number(m[1])
    if re.fullmatch(r"[\d,]+", clause):
        return row.median >= _number(clause)
    m = _BOUND.fullmatch(clause)
    if m is None:
        return None
    limit, unit = _number(m["num"]), m["unit"] or row.unit
    if unit == "x":
        return row.ratio is not None and row.ratio <= limit
    which = m["pre"] or m["post"] or "p50"
    value = row.p99 if which == "p99" else row.median
    if value is None:
        return None
    converted = _convert(value, row.unit, unit)
    return None if converted is None else converted <= limit


def verdict(row: Row) -> str:
    if not row.goal:
        return ""
    results = [_clause(row, c) for c in row.goal.split(",") if c.strip()]
    # "1,000" is one clause with a thousands separator, not two
    if re.fullmatch(r"[\d,]+", row.goal.strip()):
        results = [_clause(row, row.goal)]
    if any(r is None for r in results):
        return "?"
    return "pass" if all(results) else "FAIL"


def combine(bench: str, runs: Sequence[Row]) -> Line:
    """One figure over its runs: the run with the median median stands for it; its goal is met
    only when every run meets it."""
    ordered = sorted(runs, key=lambda r: r.median)
    middle = ordered[(len(ordered) - 1) // 2]
    verdicts = [verdict(r) for r in runs]
    if not middle.goal:
        return Line(bench, middle, "", tuple(runs), None)
    met = sum(v == "pass" for v in verdicts)
    overall = "?" if "?" in verdicts else "pass" if met == len(runs) else "FAIL"
    return Line(bench, middle, overall, tuple(runs), met)


_FIGURE_IN_NAME = re.compile(r"\s*\([+-]?[\d.,]+\s*(?:µs|us|ms|s|x|%)\)$")
"""A figure a name carries, as bench_peers' "... (+812 µs)": not part of what the row is."""


def _keyed(rows: list[Row]) -> dict[tuple[str, int], Row]:
    """A run's rows by (name less any figure in it, how many rows of that name came before):
    one benchmark may print two figures under one name (e.g. an indented "the same less ..."
    under each of two)."""
    seen: dict[str, int] = {}
    out = {}
    for row in rows:
        name = _FIGURE_IN_NAME.sub("", row.name)
        n = seen.get(name, 0)
        seen[name] = n + 1
        out[(name, n)] = row
    return out


def lines_of(results: dict[str, list[list[Row]]]) -> list[Line]:
    """Every figure of every benchmark, its runs matched by name (in the first run's order)."""
    out = []
    for bench, runs in results.items():
        keyed = [_keyed(rows) for rows in runs]
        keys = list(dict.fromkeys(k for run in keyed for k in run))
        for key in keys:
            out.append(combine(bench, [run[key] for run in keyed if key in run]))
    return out


def _spread(line: Line) -> str:
    if len(line.runs) < 2:
        return "-"
    medians = [r.median for r in line.runs]
    return f"{_fmt(min(medians))} to {_fmt(max(medians))}"


def _result(line: Line) -> str:
    if not line.verdict:
        return "-"
    return (
        line.verdict
        if line.met is None or len(line.runs) < 2
        else f"{line.verdict} {line.met}/{len(line.runs)}"
    )


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if 0 < abs(value) < 1:
        return f"{value:.3f}"  # small figures (idle CPU in %core) would read as 0.0
    return f"{value:,.1f}" if abs(value) < 10_000 else f"{value:,.0f}"


def table(lines: Sequence[Line]) -> str:
    out = [
        f"| benchmark | figure | median | spread of runs | p99 | > {STALL_FACTOR}x median | unit "
        "| baseline | ratio | goal | result |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for ln in lines:
        r = ln.row
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        stalls = "-" if r.stalls is None else str(r.stalls)
        out.append(
            f"| {ln.bench} | {r.name} | {_fmt(r.median)} | {_spread(ln)} | {_fmt(r.p99)} | "
            f"{stalls} | {r.unit} | {_fmt(r.baseline)} | {ratio} | {r.goal or '-'} | "
            f"{_result(ln)} |"
        )
    return "\n".join(out)


def interpreter() -> str:
    """E.g. `CPython 3.11.7 (/usr/bin/python3.11)`."""
    return f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})"


def write(results: dict[str, list[list[Row]]], failed: Sequence[str] = ()) -> int:
    """Print and write the report of every benchmark's runs (each run a list of rows); return
    how many goals failed in any run (or could not be read)."""
    lines = lines_of(results)
    goals = [ln for ln in lines if ln.verdict]
    bad = [ln for ln in goals if ln.verdict != "pass"]
    runs = max((len(r) for r in results.values()), default=1)
    head = f"{len(goals) - len(bad)}/{len(goals)} goals met"
    head += f" in every one of {runs} runs" if runs > 1 else ""
    if failed:
        head += f"; benchmarks that failed to run: {', '.join(failed)}"
    text = f"# goondan benchmark report\n\n{interpreter()}\n\n{head}\n\n{table(lines)}\n"
    print("\n" + text, flush=True)
    REPORT.write_text(text)
    print(f"report written to {REPORT}; {plot.write(PLOT)}", flush=True)
    return len(bad)
