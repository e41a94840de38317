"""Benchmark: durable accepts per second through the control socket, journal on vs off.

Two real daemons on the hello example (the state root on the real disk, where an fsync costs
what it costs), one with `policy.ingress.journal: sqlite` (the default) and one with `off`.
A client pipelines `goondan send --no-wait` requests over one DEALER (each is answered with
its event id once accepted: with the journal, once it is on disk) and counts accepts per
second. Rounds alternate between the daemons so the machine's drift hits both. Group commit
is what keeps the journal's rate near the other: concurrent appends share one fsync.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.bench.baselines import Row, print_rows

ROUNDS = 3
ACCEPTS = 500
REPO = Path(__file__).resolve().parents[2]
HELLO = (REPO / "bundles" / "examples" / "hello" / "goondan.yaml").read_text()


def _bundle(directory: Path, journal: str) -> Path:
    """The hello example with `policy.ingress.journal` set."""
    directory.mkdir(parents=True)
    text = HELLO.replace("  policy:\n", f"  policy:\n    ingress: {{journal: {journal}}}\n", 1)
    assert text != HELLO, "the hello example's Swarm has no policy block any more"
    path = directory / "goondan.yaml"
    path.write_text(text)
    return path


async def _accepts(swarm: str, n: int, key: str) -> float:
    """Accepts per second of `n` pipelined no-wait sends to instance `key` of the daemon of
    `swarm`; then waits until their turns are done (one more send, waited for), so the next
    round's figures are not taken while this daemon still works through the backlog."""
    import zmq
    import zmq.asyncio

    from orchestrator.control.rundir import read_active
    from protocol.codec import decode_control_reply, encode
    from protocol.control import SendText
    from protocol.endpoints import StateLayout
    from tests.integration.harness import recv_final, with_token

    info = read_active(StateLayout.from_env().run_paths(swarm).active_json)
    assert info is not None
    endpoint = info.endpoints["control"]
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sends = [
        SendText(request_id=str(i), text=f"hi {i}", wait=False, instance_key=key) for i in range(n)
    ]
    requests = [encode(with_token(send, endpoint)) for send in sends]
    start = time.perf_counter()
    for data in requests:
        await sock.send(data)
    for _ in range(n):
        reply = decode_control_reply(await sock.recv())
        assert reply.ok, reply.error
    elapsed = time.perf_counter() - start
    # one more, waited for: its turn runs after the backlog's (one FIFO per instance)
    last = SendText(request_id="last", text="last", instance_key=key, timeout_ms=600_000)
    await sock.send(encode(with_token(last, endpoint)))
    done = await recv_final(sock)
    assert done.ok, done.error
    sock.close()
    ctx.term()
    return n / elapsed


def _daemon(
    bundle: Path, env: dict[str, str], ready: bytes = b'"started"'
) -> subprocess.Popen[bytes]:
    """The daemon, once a line of its log has `ready` (by default: its sockets are bound)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", str(bundle), "--log-format", "json"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        if ready in line:
            # keep reading its log: a full pipe would stop the daemon at its next line
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc
    raise RuntimeError("the daemon did not start")


def main() -> list[Row]:
    rates: dict[str, list[float]] = {"sqlite": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="gj", dir=Path.home()) as tmp:
        daemons = []
        try:
            for mode in rates:
                root = Path(tmp) / mode
                env = dict(os.environ, GOONDAN_STATE_ROOT=str(root))
                os.environ["GOONDAN_STATE_ROOT"] = str(root)
                daemons.append((mode, root, _daemon(_bundle(root / "bundle", mode), env)))
            for round_ in range(ROUNDS):
                for mode, root, _proc in daemons:
                    os.environ["GOONDAN_STATE_ROOT"] = str(root)
                    rate = asyncio.run(_accepts("hello", ACCEPTS, f"round{round_}"))
                    rates[mode].append(rate)
        finally:
            for _, _, proc in daemons:
                proc.terminate()
                proc.wait(timeout=60)
    off = statistics.median(rates["off"])
    rows = [
        Row("accepts/s, journal off (memory only)", off, None, "/s", off),
        Row("accepts/s, journal on (SQLite, fsync'd, group commit)",
            statistics.median(rates["sqlite"]), None, "/s", off, goal="≥ 0.5x off"),
    ]  # fmt: skip
    print_rows(f"durable accepts through the control socket ({ROUNDS} x {ACCEPTS})", rows)
    return rows


if __name__ == "__main__":
    main()
