"""Benchmark: what `goondan eval` adds to a case over a bare `goondan send` of the same input.

Run: `python -m tests.bench bench_eval`. One bundle (an agent on the offline scripted model: a
turn takes ~1 ms, so the figures are goondan's own work, free and deterministic) and one
running daemon of it. Every case and every send goes to a fresh instance, so each starts its
own agent process, as an eval case does.

(a) Issue 31's goal: eval's overhead per case over a bare send, ≤ 1.2x. Taking turns within
    each round so the machine's drift hits them alike: `goondan send --instance NEW hi` (the
    baseline, a fresh process each) and `goondan eval --attach` of a one-case file with the
    same input (a fresh process: the file read and checked, the bundle loaded for prices, the
    case run, its cost and trail read, the run kept for Studio). Every fifth round, a 20-case
    file at concurrency 1 too: its wall time less a one-case run's, per case (what one more
    case costs: the goal's figure; the one-case run is eval's start, which a suite pays once).
(b) 100 cases at concurrency 8, as CI runs a suite: `goondan eval` with a daemon of its own
    (its start and stop included) and `--attach`ed to the running one, against 100 bare sends
    run 8 at a time; wall time and cases/s.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.bench.baselines import Row, p99, print_rows
from tests.bench.bench_cli import GOONDAN, _script, _wait_ready, timed

ROUNDS = 15
MANY = 20
SUITE = 100
CONCURRENCY = 8

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: scripted}
spec:
  provider: scripted
  model: bench-eval
  options:
    script:
      - reply: "Hello! You said: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: greeter}
spec:
  modelConfig: {modelRef: Model/scripted}
  prompt: {system: "Greet the user."}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: benchevals}
spec:
  entryAgent: Agent/greeter
  agents: [{ref: Agent/greeter}]
"""


def _cases(n: int) -> str:
    lines = [f'  - {{name: "case {i}", input: hi, expect: {{contains: "You said: hi"}}}}'
             for i in range(n)]  # fmt: skip
    return "cases:\n" + "\n".join(lines) + "\n"


def _timed(argv: list[str], env: dict[str, str]) -> float:
    """bench_cli's measure, stderr dropped too (each eval says there where its run is kept); a
    case that failed (exit 1) raises: a broken benchmark, not a figure."""
    return timed(argv, env, limit=300, quiet=True)


class Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bundle = root / "bundle"
        self.bundle.mkdir()
        (self.bundle / "goondan.yaml").write_text(BUNDLE)
        self.files = {n: root / f"evals-{n}.yaml" for n in (1, MANY, SUITE)}
        for n, path in self.files.items():
            path.write_text(_cases(n))
        self.env = dict(os.environ, GOONDAN_STATE_ROOT=str(root / "state"))
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.keys = itertools.count()  # next() is atomic: sends run in threads

    def send(self) -> float:
        key = f"bench-{next(self.keys)}"
        return _timed([*_script(), "send", "--instance", key, "hi"], self.env)

    def eval(self, n: int, *extra: str) -> float:
        argv = [*_script(), "eval", str(self.files[n]), "--bundle", str(self.bundle), *extra]
        return _timed(argv, self.env)

    def sends(self, n: int, at_once: int) -> float:
        start = time.perf_counter()
        with ThreadPoolExecutor(at_once) as pool:
            list(pool.map(lambda _: self.send(), range(n)))
        return (time.perf_counter() - start) * 1000

    def own_daemon(self) -> float:
        """The suite in a daemon of eval's own, under a state root of its own."""
        with tempfile.TemporaryDirectory(prefix="gbe-") as state:
            return self.eval(SUITE, "--concurrency", str(CONCURRENCY), "--state-root", state)


def _per_case(bench: Bench) -> tuple[list[float], list[float], list[float]]:
    """Sends and one-case evals taking turns, a MANY-case eval every fifth round among them:
    the machine's drift hits all three alike."""
    sends: list[float] = []
    ones: list[float] = []
    manies: list[float] = []
    for n in range(ROUNDS):
        sends.append(bench.send())
        ones.append(bench.eval(1, "--attach", "--concurrency", "1"))
        if n % 5 == 0:
            manies.append(bench.eval(MANY, "--attach", "--concurrency", "1"))
    one = statistics.median(ones)
    return sends, ones, [(many - one) / (MANY - 1) for many in manies]


def _suite(bench: Bench) -> tuple[float, float, float]:
    bare = bench.sends(SUITE, CONCURRENCY)
    attached = bench.eval(SUITE, "--attach", "--concurrency", str(CONCURRENCY))
    return bare, attached, bench.own_daemon()


def _rows(
    per_case: tuple[list[float], list[float], list[float]], suite: tuple[float, float, float]
) -> list[Row]:
    sends, ones, many = per_case
    base = statistics.median(sends)
    bare, attached, own = suite

    def rate(ms: float) -> float:
        return SUITE / (ms / 1000)

    return [
        Row("goondan send, a new instance (baseline)", base, p99(sends), "ms", base),
        Row(f"eval, per case ({MANY}-case file, concurrency 1)", statistics.median(many),
            max(many), "ms", base, goal="≤ 1.2x"),
        Row("eval --attach, a one-case file (its start)", statistics.median(ones), p99(ones),
            "ms", base),
        Row(f"{SUITE} sends, {CONCURRENCY} at a time (baseline)", bare, None, "ms", bare),
        Row(f"eval --attach, {SUITE} cases, concurrency {CONCURRENCY}", attached, None, "ms",
            bare),
        Row(f"eval, {SUITE} cases, concurrency {CONCURRENCY}, own daemon", own, None, "ms",
            bare),
        Row("  the same in cases/s (÷ the sends' /s)", rate(attached), None, "/s", rate(bare)),
        Row("  the same in cases/s, own daemon", rate(own), None, "/s", rate(bare)),
    ]  # fmt: skip


def main() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="gbe-") as tmp:
        bench = Bench(Path(tmp))
        daemon = subprocess.Popen(
            [*GOONDAN, "run", str(bench.bundle)], env=bench.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_ready(bench.env)
            per_case = _per_case(bench)
            suite = _suite(bench)
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
    rows = _rows(per_case, suite)
    print_rows(f"eval against bare sends ({ROUNDS} rounds, {os.cpu_count()} cores, "
               f"Python {sys.version.split()[0]})", rows)  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
