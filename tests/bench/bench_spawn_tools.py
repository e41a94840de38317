"""Spawn -> ready through the fork server of an agent with built-in tools (bash and
file-system of @goondan/base, 12 exports) against the same spawn of an agent without tools.

Both are real agent processes of the example bundles (`workspace`'s operator, `hello`'s
greeter), spawned by the real supervisor and spawner; each bundle gets its own fork server,
started before that process has a zmq Context or a loop, as in the daemon. What the tools add
is their modules (imported once by the fork server), their registry entries with compiled
validators (built once by the fork server: `prebuilt_tools`, schema memo) and the registry.
Both harnesses (this one and bench_spawn's forkserver row) measure the same thing the same way;
figures differ between runs by how busy the machine is.

Run: `python -m tests.bench.bench_spawn_tools` (or via `python -m tests.bench`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from tests.bench.baselines import Row, p99, print_rows

REPO = Path(__file__).resolve().parents[2]
AGENTS = {
    "greeter": REPO / "bundles" / "examples" / "hello" / "goondan.yaml",
    "operator": REPO / "bundles" / "examples" / "workspace" / "goondan.yaml",
}
SPAWNS = 25
ROUNDS = 2


def measure(agent: str) -> None:
    """In a fresh process: fork server first, then the loop; prints the samples (ms)."""
    import asyncio
    import logging
    import tempfile

    import structlog
    import uvloop

    from bundles.loader import load_bundle
    from protocol.endpoints import StateLayout
    from tests.bench.bench_spawn import Harness, start_server

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    with tempfile.TemporaryDirectory(prefix="gt", dir="/tmp") as tmp:
        layout = StateLayout(root=Path(tmp))
        bundle = load_bundle(AGENTS[agent], state_root=layout.root)
        server = start_server(bundle, layout)

        async def run() -> list[float]:
            h = Harness("forkserver", server, layout, bundle, agents=(agent,))
            try:
                async with asyncio.timeout(300):
                    await h.spawn("warm-up")
                    return [await h.spawn(f"s{i}") for i in range(SPAWNS)]
            finally:
                await h.close()

        samples = uvloop.run(run())
    print(json.dumps(samples), flush=True)


def _samples(agent: str) -> list[float]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.bench_spawn_tools", agent],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"spawn of {agent} failed:\n{proc.stderr[-3000:]}")
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> list[Row]:
    out: dict[str, list[float]] = {name: [] for name in AGENTS}
    for _ in range(ROUNDS):  # alternate so the machine's drift hits both
        for name in AGENTS:
            out[name] += _samples(name)
    base = statistics.median(out["greeter"])
    rows = [
        Row("spawn->ready, agent without tools", base, p99(out["greeter"]), "ms", base),
        Row(
            "spawn->ready, agent with bash + file-system",
            statistics.median(out["operator"]),
            p99(out["operator"]),
            "ms",
            base,
            "≤ 10 ms p50",
        ),
    ]
    print_rows(f"spawn -> ready through the fork server ({ROUNDS} x {SPAWNS} spawns each)", rows)
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in AGENTS:
        measure(sys.argv[1])
    else:
        main()
