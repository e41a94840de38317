"""Benchmark: how long the `goondan` command takes, against a bare `python -c pass`.

Run: `python -m tests.bench bench_cli`. Three commands, each started as a fresh process the
way a user or a script starts it, taking turns within each round so the machine's drift hits
them alike: the bare interpreter (baseline), `goondan --version`, and a warm `goondan send`
to the entry agent of a running daemon (the hello example; its turn takes ~1 ms, so the
figure is the CLI's own start, connect, request and exit). The commands run with their bytecode
cached, as a user's do (PYTHONDONTWRITEBYTECODE, which CI and some shells set, would have every
run compile each module edited since `make install`).

Issue 33's goal is `send` within 3x the bare interpreter. `python -c "import zmq, msgspec"`
alone is ~4x a bare start (pyzmq: pickle, random, json, its constants; msgspec:
typing_extensions and inspect), so send imports neither: it talks through
orchestrator/control/thin_call.py (ZMTP and MessagePack on the standard library), and the
import-set test (tests/unit/orchestrator/test_cli_imports.py) keeps its path that way. The
rows: the bare start, --version, the send, the two libraries it no longer imports, and the
send's floor, thin_call alone with the daemon found by the bench (docs/performance.md, "The
command line").
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.bench.baselines import Row, p99, print_rows

ROUNDS = 40
REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "bundles" / "examples" / "hello" / "goondan.yaml"
GOONDAN = [sys.executable, "-m", "orchestrator"]


def _script() -> list[str]:
    """The installed `goondan` script when there is one (what users run), else `-m`."""
    script = Path(sys.executable).with_name("goondan")
    return [str(script)] if script.exists() else GOONDAN


def timed(
    argv: list[str], env: dict[str, str], *, limit: float = 60.0, quiet: bool = False
) -> float:
    """Wall time from start to exit (stdout dropped, stderr too when `quiet`). The child's end
    is awaited by a blocking wait: Popen.wait with a timeout polls with sleeps doubling up to
    50 ms, which rounded every figure up to the next poll (a 70 ms send read as 114 ms, a 12 ms
    bare start as 16 ms); a timer kills a child that hangs past `limit` instead."""
    start = time.perf_counter()
    stderr = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    watchdog = threading.Timer(limit, proc.kill)
    watchdog.start()
    try:
        code = proc.wait()
    finally:
        watchdog.cancel()
    elapsed = (time.perf_counter() - start) * 1000
    if code != 0:
        raise subprocess.CalledProcessError(code, argv)
    return elapsed


THIN = """
import sys
from orchestrator.control.thin_call import call
reply = call(sys.argv[1], sys.argv[2], {"type": "send", "requestId": "b", "text": "hi"}, 10)
sys.exit(0 if reply["ok"] else 1)
"""
"""A send with nothing but its exchange (orchestrator/control/thin_call.py: ZMTP and MessagePack
of its own), the daemon found by the bench: `goondan send` is this plus its argument parser,
the look-up of its daemon and its output."""


def _control(root: Path) -> list[str]:
    """The running daemon's control endpoint and token (what the CLI looks up first)."""
    (active,) = root.glob("run/*/active.json")
    endpoint: str = json.loads(active.read_text())["endpoints"]["control"]
    return [endpoint, active.with_name("control.token").read_text().strip()]


def _wait_ready(env: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the CLI itself says when the daemon answers
        done = subprocess.run([*_script(), "send", "warm-up"], env=env, capture_output=True)
        if done.returncode == 0:
            return
    raise RuntimeError("the daemon did not answer within 60 s")


def main() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="gb-") as root:
        env = dict(os.environ, GOONDAN_STATE_ROOT=root)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        daemon = subprocess.Popen(
            [*GOONDAN, "run", str(BUNDLE)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_ready(env)
            argvs = {
                "bare": [sys.executable, "-c", "pass"],
                "floor": [sys.executable, "-c", "import zmq, msgspec"],
                "version": [*_script(), "--version"],
                "send": [*_script(), "send", "hi"],
                "thin": [sys.executable, "-c", THIN, *_control(Path(root))],
            }
            runs: dict[str, list[float]] = {name: [] for name in argvs}
            for _ in range(ROUNDS):
                for name, argv in argvs.items():
                    runs[name].append(timed(argv, env))
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
    base = statistics.median(runs["bare"])
    rows = [
        Row("python -c pass (baseline)", base, p99(runs["bare"]), "ms", base),
        Row("goondan --version", statistics.median(runs["version"]), p99(runs["version"]),
            "ms", base, goal="≤ 3x"),
        Row("goondan send, warm daemon (round trip)", statistics.median(runs["send"]),
            p99(runs["send"]), "ms", base, goal="≤ 80 ms p50, ≤ 3x"),
        Row("python -c 'import zmq, msgspec' (not in send)", statistics.median(runs["floor"]),
            p99(runs["floor"]), "ms", base),
        Row("the same send through thin_call alone (its floor)", statistics.median(runs["thin"]),
            p99(runs["thin"]), "ms", base),
    ]  # fmt: skip
    print_rows(f"CLI start-up ({ROUNDS} runs each, Python {sys.version.split()[0]})", rows)
    return rows


if __name__ == "__main__":
    main()
