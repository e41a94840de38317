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
- **first delta through `/v1/chat/completions`**: the same openai SDK code as the baseline,
  pointed at the `api` connector of the same daemon (agent `hop`, the same instance), until
  the first content chunk: uvicorn, the bearer check, the connector's emit, the daemon path,
  and the delta back through the connector as an SSE chunk; and its difference to the
  baseline taken back to back (goal ≤ +2 ms p50);
- **whole reply, streamed vs not**: the same turn asked with and without `stream`, through
  `goondan send` and through `/v1/chat/completions`: what streaming costs a whole turn (the
  SDK's event stream, and the delta frames waking the daemon, the connector and the client);
  and the same less what streaming costs the model call alone (the bare SDK's streamed call
  minus its unstreamed one, pair by pair): what goondan adds by streaming (goal ≤ 1.05x).
  That the turns of clients that do not stream did not get slower is bench_broker's warm
  hop.

Run: `python -m tests.bench bench_stream` (or `python -m tests.bench.bench_stream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench.baselines import Row, p99, print_rows, stalls
from tests.bench.bench_api import _free_port as free_port
from tests.bench.bench_broker import HOP_BUNDLE

INSTANCES = int(os.environ.get("BENCH_STREAM_INSTANCES", "60"))
PER_INSTANCE = 5
"""Measured turns per instance after one warm-up each (conversations stay short)."""
WARMUP = 30
ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None


class _Control:
    """A blocking control client, as the CLI's (orchestrator/control/client.py): one kept DEALER,
    used from one worker thread, which takes the times itself."""

    def __init__(self, endpoint: str, token: str) -> None:
        import zmq

        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.token = token

    def send(self, key: str, i: int, stream: bool, agent: str | None = None) -> tuple[float, float]:
        """(µs to the first delta (0 when not streamed), µs to the final reply)."""
        from protocol.codec import decode_control_reply, encode
        from protocol.control import SendText

        req = SendText(request_id=f"{key}-{i}-{stream}", text=f"ping {i}", instance_key=key,
                       stream=stream, token=self.token, agent=agent)  # fmt: skip
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


async def _first_token(
    client: Any, i: int, model: str = "local", user: str | None = None
) -> tuple[float, float]:
    """A streamed chat completion with the SDK request the agent's adapter makes: (µs to the
    first text chunk, µs to the end of the stream)."""
    import openai

    body = {"model": model, "messages": [{"role": "user", "content": f"ping {i}"}],
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    if user is not None:
        body["user"] = user  # the edge's instance
    start = time.perf_counter()
    first = 0.0
    stream = await client.post("/chat/completions", body=body, cast_to=object, stream=True,
                               stream_cls=openai.AsyncStream[object])  # fmt: skip
    async with stream:
        async for chunk in stream:
            choices = chunk.get("choices") if isinstance(chunk, dict) else None
            if not first and choices and choices[0]["delta"].get("content"):
                first = time.perf_counter() - start
    return first * 1e6, (time.perf_counter() - start) * 1e6


async def _plain(client: Any, model: str, user: str | None, i: int) -> float:
    """A chat completion, not streamed, read as `_first_token` reads its stream (no typed
    parsing on either side) (µs)."""
    body: dict[str, Any] = {"model": model,
                            "messages": [{"role": "user", "content": f"ping {i}"}]}  # fmt: skip
    if user is not None:
        body["user"] = user
    start = time.perf_counter()
    done = await client.post("/chat/completions", body=body, cast_to=object)
    assert done["choices"][0]["message"]["content"] == "pong", done
    return (time.perf_counter() - start) * 1e6


EDGE_TOKEN = "bench-token-0123456789"
EDGE_CONNECTION = f"""
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: api}}
spec:
  connectorRef: {{kind: Connector, name: api, package: "@goondan/base"}}
  config: {{port: "EDGE_PORT", tokens: ["{EDGE_TOKEN}"], requestsPerMinute: "0",
           requestsPerMinutePerClient: "0"}}

"""
"""The `api` connector in front of the warm hop's agent."""
EDGE_READY = b'"process":"connector:api:api:1","source":"spawning","target":"idle"'
"""As the JSON log writes it (compact): spaced, it never matched and each run waited 60 s."""


def _start_daemon(bundle: Path, ready: bytes = EDGE_READY) -> subprocess.Popen[bytes]:
    """`goondan run BUNDLE`, once its log says `ready` (default: its api connector serves; the
    log is read on, in a thread)."""
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
            if ready in line:
                started.set()
        started.set()  # it ended: the check below says so

    threading.Thread(target=read, daemon=True).start()
    started.wait(60)
    if daemon.poll() is not None:
        raise RuntimeError(f"the daemon exited with {daemon.returncode}")
    return daemon


async def _drive(bundle: Path, port: int, edge_port: int) -> dict[str, list[float]]:
    import openai

    from orchestrator.control.locate import read_token
    from orchestrator.control.rundir import read_active
    from protocol.endpoints import StateLayout

    daemon = _start_daemon(bundle)
    sdk = openai.AsyncOpenAI(api_key="sk-local", base_url=f"http://127.0.0.1:{port}/v1")
    edge = openai.AsyncOpenAI(api_key=EDGE_TOKEN, base_url=f"http://127.0.0.1:{edge_port}/v1",
                              max_retries=0)  # fmt: skip
    try:
        info = read_active(StateLayout.from_env().run_paths("hop").active_json)
        assert info is not None
        endpoint = info.endpoints["control"]
        control = _Control(endpoint, read_token(endpoint))
        out: dict[str, list[float]] = {k: [] for k in SERIES}
        for i in range(WARMUP):
            await _first_token(sdk, i)
            await _first_token(edge, i, "hop", "warm")
        for n in range(INSTANCES):
            key = f"i{n}"
            await asyncio.to_thread(control.send, key, -1, False)  # spawns the instance
            # the edge's instance of the key is another one (api:<Connection>:<token>:<key>,
            # _edge.py): spawned here too, or each instance's first edge sample was a spawn
            await _plain(edge, "hop", key, -1)
            for i in range(PER_INSTANCE):  # alternated, so the machine's drift hits all
                bare, bare_streamed = await _first_token(sdk, i)
                bare_plain = await _plain(sdk, "local", None, i)
                first, streamed = await asyncio.to_thread(control.send, key, i, True)
                edge_first, edge_streamed = await _first_token(edge, 200 + i, "hop", key)
                _, plain = await asyncio.to_thread(control.send, key, 100 + i, False)
                edge_plain = await _plain(edge, "hop", key, 300 + i)
                for name, value in (
                    ("bare", bare), ("first", first), ("gap", first - bare),
                    ("streamed", streamed), ("plain", plain), ("edge_first", edge_first),
                    ("edge_gap", edge_first - bare), ("edge_streamed", edge_streamed),
                    ("edge_plain", edge_plain), ("bare_streamed", bare_streamed),
                    ("bare_plain", bare_plain),
                    # the turn streamed, less what streaming costs the model call itself
                    ("net", streamed - bare_streamed + bare_plain),
                    ("edge_net", edge_streamed - bare_streamed + bare_plain),
                ):  # fmt: skip
                    out[name].append(value)
        control.close()
        return out
    finally:
        await sdk.close()
        await edge.close()
        daemon.terminate()
        daemon.wait(60)


SERIES = ("bare", "first", "gap", "streamed", "plain", "edge_first", "edge_gap",
          "edge_streamed", "edge_plain", "bare_streamed", "bare_plain", "net",
          "edge_net")  # fmt: skip


@contextlib.contextmanager
def model_server(prefix: str) -> Iterator[tuple[int, Path]]:
    """bench_broker's local model server (its port), and a directory for a daemon's bundle
    and state (GOONDAN_STATE_ROOT)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.bench_broker", "llm"], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with tempfile.TemporaryDirectory(prefix=prefix, dir=ROOT) as tmp:
            os.environ["GOONDAN_STATE_ROOT"] = str(Path(tmp) / "s")
            yield port, Path(tmp)
    finally:
        server.kill()
        server.wait()


def run() -> list[Row]:
    import uvloop

    with model_server("gs") as (port, tmp):
        bundle = tmp / "goondan.yaml"
        edge_port = free_port()
        bundle.write_text(HOP_BUNDLE.replace("PORT", str(port))
                          + EDGE_CONNECTION.replace("EDGE_PORT", str(edge_port)))  # fmt: skip
        # the agent's own loop, for the bare SDK
        out = uvloop.run(_drive(bundle, port, edge_port))
    return _rows(out)


def _rows(out: dict[str, list[float]]) -> list[Row]:
    def row(name: str, series: str, base: float | None, goal: str = "") -> Row:
        values = out[series]
        counted = stalls(values) if base is not None else None
        return Row(name, statistics.median(values), p99(values), "µs", base, goal, counted)

    bare, plain = statistics.median(out["bare"]), statistics.median(out["plain"])
    edge_plain = statistics.median(out["edge_plain"])
    return [
        row("model's first token, bare SDK stream (baseline)", "bare", bare),
        row("first delta through goondan send", "first", bare),
        row("first delta minus the model's first token", "gap", None, "≤ 2000 µs p50"),
        row("first delta through /v1/chat/completions (openai SDK)", "edge_first", bare),
        row("edge first delta minus the model's first token", "edge_gap", None,
            "≤ 2000 µs p50"),
        row("model call alone, not streamed", "bare_plain", statistics.median(out["bare_plain"])),
        row("model call alone, streamed", "bare_streamed", statistics.median(out["bare_plain"])),
        row("whole reply through goondan send, not streamed", "plain", plain),
        row("whole reply through goondan send, streamed", "streamed", plain),
        row("  the same less the model call's own streaming cost", "net", plain, "≤ 1.05x"),
        row("whole reply through /v1/chat/completions, not streamed", "edge_plain",
            edge_plain),
        row("whole reply through /v1/chat/completions, streamed", "edge_streamed",
            edge_plain),
        row("  the same less the model call's own streaming cost", "edge_net", edge_plain,
            "≤ 1.05x"),
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
