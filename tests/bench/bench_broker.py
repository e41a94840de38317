"""Brokered round trip agent -> orchestrator -> agent -> back, ours vs the bare broker.

Our side is the real `orchestrator.router.Router` (decode, process-table and generation
check, open-request book, mailbox, ROUTER_MANDATORY sends) on uvloop in its own process,
with the client and worker registered as live agent processes. The bare side is the
3-process broker of RESULTS.md (asyncio-drain, typed decode). Client and worker are the
same blocking pyzmq programs for both. Rounds alternate so the machine's drift hits both.

Run: `python -m tests.bench.bench_broker` (or via `python -m tests.bench`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.bench.baselines import Row, p99, print_rows

ROUNDS = 3
SYNC_RTTS = 4000
WINDOW = 100
WINDOWED_RTTS = 20000


def _router_role(endpoint: str) -> None:
    import logging

    import structlog
    import uvloop
    import zmq.asyncio

    from orchestrator.router import Router
    from orchestrator.states import ProcessStatus
    from orchestrator.table import ProcessTable
    from protocol.errors import ErrorInfo
    from protocol.ids import Address, agent_address

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))

    class Steady:
        """Both processes are up and stay up: the hot path only."""

        def check_target(self, target: Address, *, request: bool = False) -> ErrorInfo | None:
            return None

        def ensure(self, target: Address) -> None:
            return None

        def __getattr__(self, name: str) -> object:
            return lambda *args, **kw: None  # on_status, on_ready, ...: not on this path

    async def run() -> None:
        table = ProcessTable()
        for name in ("client", "worker"):
            entry = table.entry(agent_address(name, "b"))
            entry.generation = 1
            entry.status = ProcessStatus.IDLE
        router = Router(zmq.asyncio.Context(), endpoint, table)
        router.lifecycle = Steady()  # type: ignore[assignment]
        await router.run()

    uvloop.run(run())


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )


def _one_round(broker_args: list[str], endpoint: str) -> dict[str, object]:
    broker = _spawn(*broker_args, endpoint)
    worker = _spawn("-m", "tests.bench.baselines", "worker", endpoint)
    try:
        client = _spawn(
            "-m", "tests.bench.baselines", "client", endpoint,
            str(SYNC_RTTS), str(WINDOW), str(WINDOWED_RTTS),
        )  # fmt: skip
        out, _ = client.communicate(timeout=300)
        result: dict[str, object] = json.loads(out)
        return result
    finally:
        for proc in (broker, worker):
            proc.kill()
            proc.wait()


def run() -> list[Row]:
    variants = {
        "bare broker (asyncio-drain, decodes)": ["-m", "tests.bench.baselines", "broker"],
        "goondan router": ["-m", "tests.bench.bench_broker", "router"],
    }
    rtt: dict[str, list[float]] = {name: [] for name in variants}
    rate: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="gb") as tmp:
        endpoint = f"ipc://{Path(tmp) / 'b.sock'}"
        for _ in range(ROUNDS):
            for name, args in variants.items():
                result = _one_round(args, endpoint)
                rtt[name] += result["rtt_us"]  # type: ignore[arg-type]
                rate[name].append(float(result["per_s"]))  # type: ignore[arg-type]
    bare, ours = variants
    base_rtt = statistics.median(rtt[bare])
    base_rate = statistics.median(rate[bare])
    return [
        Row(f"round trip, {bare}", base_rtt, p99(rtt[bare]), "µs", base_rtt),
        Row(
            "round trip, goondan router",
            statistics.median(rtt[ours]),
            p99(rtt[ours]),
            "µs",
            base_rtt,
            "≤ 1.25x, p99 ≤ 1000 µs",
        ),
        Row(f"round trips/s, {bare}", base_rate, None, "rt/s", base_rate),
        Row(
            "round trips/s, goondan router", statistics.median(rate[ours]), None, "rt/s", base_rate
        ),
    ]


def main() -> list[Row]:
    rows = run()
    print_rows(
        f"brokered round trip agent -> orchestrator -> agent ({ROUNDS} rounds x {SYNC_RTTS} "
        f"sync + {WINDOWED_RTTS} with {WINDOW} in flight)",
        rows,
    )
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "router":
        _router_role(sys.argv[2])
    else:
        main()
