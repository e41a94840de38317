"""`python -m tests.bench` (`make bench`): run every `tests/bench/bench_*.py` and print a summary.

Each benchmark prints its own table (figures as ratios to raw baselines measured in the same
run, median and p99); the summary repeats the rows that have a goal. Each runs BENCH_RUNS
times (default 3; 1 for the on-demand ones unless set), and the report gives each figure's
spread over its runs and meets a goal only when every run meets it (report.py).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time
from pathlib import Path

from tests.bench import report
from tests.bench.baselines import Row, print_rows

ON_DEMAND = frozenset({"bench_instances"})
"""Run only when named (`make bench-instances`): a million instances take hours."""


def _modules() -> list[str]:
    here = Path(__file__).parent
    names = [m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_")]
    only = sys.argv[1:]
    if only:
        return [n for n in sorted(names) if n in only]
    return [n for n in sorted(names) if n not in ON_DEMAND]


def _runs(name: str) -> int:
    default = "1" if name in ON_DEMAND else "3"
    return max(1, int(os.environ.get("BENCH_RUNS", default)))


def main() -> int:
    summary: list[Row] = []
    results: dict[str, list[list[Row]]] = {}
    failed = []
    for name in _modules():
        runs = _runs(name)
        for run in range(1, runs + 1):
            start = time.perf_counter()
            print(f"\n=== {name} (run {run} of {runs}) ===", flush=True)
            try:
                rows = importlib.import_module(f"tests.bench.{name}").main()
            except Exception as exc:  # one broken benchmark must not hide the others' figures
                print(f"{name} failed: {exc!r}", flush=True)
                failed.append(name)
                break
            if isinstance(rows, list):
                summary += [r for r in rows if isinstance(r, Row) and r.goal]
                mine = [r for r in rows if isinstance(r, Row)]
                results.setdefault(name.removeprefix("bench_"), []).append(mine)
            print(f"({name}: {time.perf_counter() - start:.0f} s)", flush=True)
    if summary:
        print_rows("summary: figures with a goal", summary)
    report.write(results, failed)  # the Markdown table: stdout and bench-report.md
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
