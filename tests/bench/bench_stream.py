"""Benchmark: streaming through the real daemon, against the model server's own figures.

A real `goondan run` daemon runs one agent on the `openai` provider, pointed at the local
OpenAI-compatible server of bench_broker's warm hop, which answers `stream: true` with
server-sent events (a role chunk, "po", "ng", the finish chunk, the usage chunk, `[DONE]`) and
anything else with one JSON completion ("pong"), as fast as it can. A control client (a
blocking DEALER on one kept connection, as `goondan send`'s) sends inputs; the figures,
alternated so the machine's drift hits all:

- **first token, bare**: the openai SDK streaming from the server itself (the request the
  adapter makes), until the first text chunk: the baseline of time to first delta;
- **first delta through goondan send**: `SendText(stream=True)` until the first delta reaches
  the client: control socket, journal, router, agent turn, the same SDK request, the delta
  frame back through the router and the control socket;
- **its difference** (goal ≤ +2 ms p50), per pair of samples taken back to back;
- **whole reply, streamed vs not**: the same turn asked with and without `stream`: what
  streaming costs a whole turn (the SDK's event stream, and the delta frames waking the
  daemon and the client). That the turns of clients that do not stream did not get slower is
  bench_broker's warm hop (goal: unchanged).

Run: `python -m tests.bench bench_stream` (or `python -m tests.bench.bench_stream`).
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
from typing import Any

from tests.bench.baselines import Row, p99, print_rows, stalls
from tests.bench.bench_broker import HOP_BUNDLE

INSTANCES = 60
PER_INSTANCE = 5
"""Measured turns per instance after one warm-up each (conversations stay short)."""
WARMUP = 30
ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None


class _Control:
    """A blocking control client, as the CLI's (orchestrator/client.py): one kept DEALER,
    used from one worker thread, which takes the times itself."""

    def __init__(self, endpoint: str, token: str) -> None:
        import zmq

        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.token = token

    def send(self, key: str, i: int, stream: bool) -> tuple[float, float]:
        """(µs to the first delta (0 when not streamed), µs to the final reply)."""
        from protocol.codec import decode_control_reply, encode
        from protocol.control import SendText

        req = SendText(request_id=f"{key}-{i}-{stream}", text=f"ping {i}", instance_key=key,
                       stream=stream, token=self.token)  # fmt: skip
        data = encode(req)
        start = time.perf_counter()
        self.sock.send(data)
        first = 0.0
        while True:
            reply = decode_control_reply(self.sock.recv())
            if reply.delta is not None:
                first = first or time.perf_counter() - start
            elif reply.notice is None:
                break
        whole = time.perf_counter() - start
        assert reply.ok and reply.result["input"] == "pong", reply
        return first * 1e6, whole * 1e6

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


async def _bare_first_token(client: Any, i: int) -> float:
    """The SDK request the agent's adapter makes, until the first text chunk (µs)."""
    import openai

    body = {"model": "local", "messages": [{"role": "user", "content": f"ping {i}"}],
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    start = time.perf_counter()
    first = 0.0
    stream = await client.post("/chat/completions", body=body, cast_to=object, stream=True,
                               stream_cls=openai.AsyncStream[object])  # fmt: skip
    async with stream:
        async for chunk in stream:
            choices = chunk.get("choices") if isinstance(chunk, dict) else None
            if not first and choices and choices[0]["delta"].get("content"):
                first = time.perf_counter() - start
    return first * 1e6


def _start_daemon(bundle: Path) -> subprocess.Popen[bytes]:
    """`goondan run BUNDLE`, once it says `started` (its log is read on, in a thread)."""
    from tests.integration.harness import child_env

    daemon = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", str(bundle), "--log-format", "json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env=child_env(),
    )  # fmt: skip
    started = threading.Event()

    def read() -> None:
        assert daemon.stderr is not None
        for line in daemon.stderr:
            if b'"event": "started"' in line:
                started.set()
        started.set()  # it ended: the check below says so

    threading.Thread(target=read, daemon=True).start()
    started.wait(60)
    if daemon.poll() is not None:
        raise RuntimeError(f"the daemon exited with {daemon.returncode}")
    return daemon


async def _drive(bundle: Path, port: int) -> dict[str, list[float]]:
    import openai

    from orchestrator.rundir import read_active, read_token
    from protocol.endpoints import StateLayout

    daemon = _start_daemon(bundle)
    sdk = openai.AsyncOpenAI(api_key="sk-local", base_url=f"http://127.0.0.1:{port}/v1")
    try:
        info = read_active(StateLayout.from_env().run_paths("hop").active_json)
        assert info is not None
        endpoint = info.endpoints["control"]
        control = _Control(endpoint, read_token(endpoint))
        out: dict[str, list[float]] = {k: [] for k in ("bare", "first", "gap", "streamed",
                                                       "plain")}  # fmt: skip
        for i in range(WARMUP):
            await _bare_first_token(sdk, i)
        for n in range(INSTANCES):
            key = f"i{n}"
            await asyncio.to_thread(control.send, key, -1, False)  # spawns the instance
            for i in range(PER_INSTANCE):
                bare = await _bare_first_token(sdk, i)
                first, streamed = await asyncio.to_thread(control.send, key, i, True)
                _, plain = await asyncio.to_thread(control.send, key, 100 + i, False)
                out["bare"].append(bare)
                out["first"].append(first)
                out["gap"].append(first - bare)
                out["streamed"].append(streamed)
                out["plain"].append(plain)
        control.close()
        return out
    finally:
        await sdk.close()
        daemon.terminate()
        daemon.wait(60)


def run() -> list[Row]:
    import uvloop

    server = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.bench_broker", "llm"], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with tempfile.TemporaryDirectory(prefix="gs", dir=ROOT) as tmp:
            os.environ["GOONDAN_STATE_ROOT"] = str(Path(tmp) / "s")
            bundle = Path(tmp) / "goondan.yaml"
            bundle.write_text(HOP_BUNDLE.replace("PORT", str(port)))
            out = uvloop.run(_drive(bundle, port))  # the agent's own loop, for the bare SDK
    finally:
        server.kill()
        server.wait()
    bare, plain = statistics.median(out["bare"]), statistics.median(out["plain"])
    return [
        Row("model's first token, bare SDK stream (baseline)", bare, p99(out["bare"]), "µs",
            bare, stalls=stalls(out["bare"])),
        Row("first delta through goondan send", statistics.median(out["first"]),
            p99(out["first"]), "µs", bare, stalls=stalls(out["first"])),
        Row("first delta minus the model's first token", statistics.median(out["gap"]),
            p99(out["gap"]), "µs", None, "≤ 2000 µs p50"),
        Row("whole reply through goondan send, not streamed", plain, p99(out["plain"]), "µs",
            plain, stalls=stalls(out["plain"])),
        Row("whole reply through goondan send, streamed", statistics.median(out["streamed"]),
            p99(out["streamed"]), "µs", plain, stalls=stalls(out["streamed"])),
    ]  # fmt: skip


def main() -> list[Row]:
    rows = run()
    print_rows(
        f"streaming through the real daemon: one turn, openai provider against a local server "
        f"({INSTANCES} instances x {PER_INSTANCE} turns of each kind, after one warm-up each)",
        rows,
    )
    return rows


if __name__ == "__main__":
    main()
