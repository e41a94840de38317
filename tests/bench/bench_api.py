"""Benchmark: a `/v1/chat/completions` round trip through the `api` connector vs a
`goondan send` over the control socket, on the same daemon and the same warm agent.

One real daemon on tests/fixtures/api (scripted model, no delay). Each sample is one input to
agent `front` and its reply, waited for, one at a time:
- baseline: a `SendText` control request (what `goondan send` sends) over a connected DEALER,
  without the CLI's interpreter start;
- figure (the goal's): a non-streaming chat completion over a keep-alive HTTP/1.1 connection,
  written and read by a client as lean as the baseline's (the request's bytes out, the answer
  read by its Content-Length), through uvicorn, the bearer check, the connector host's emit and
  the same daemon path: what the edge costs, not what an HTTP library costs;
- also: the same through httpx and through the official `openai` SDK, each with its own
  client-side work (httpx alone adds ~0.6 ms a request here, more than the edge itself).
Samples alternate between the paths (each on its own instance), so the machine's drift hits
all of them. The edge adds an HTTP hop and a process hop (client -> connector -> daemon
instead of client -> daemon).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.bench.baselines import Row, p99, print_rows, stalls
from tests.bench.bench_journal import _daemon

SAMPLES = 300
WARMUP = 20
REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "tests" / "fixtures" / "api" / "goondan.yaml"
TOKEN = "bench-token-0123456789"
READY = b'"process":"connector:api:api:1","source":"spawning","target":"idle"'
"""The daemon's log line that says its api connector serves."""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _measure(port: int) -> dict[str, list[float]]:
    import httpx
    import openai
    import zmq
    import zmq.asyncio

    from orchestrator.control.rundir import read_active
    from protocol.codec import encode
    from protocol.control import SendText
    from protocol.endpoints import StateLayout
    from tests.integration.harness import recv_final, with_token

    info = read_active(StateLayout.from_env().run_paths("edge").active_json)
    assert info is not None
    endpoint = info.endpoints["control"]
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    url = f"http://127.0.0.1:{port}/v1"
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    sdk = openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0)

    async def control(i: int) -> None:
        send = SendText(request_id=str(i), text=f"hi {i}", agent="front", instance_key="ctl")
        await sock.send(encode(with_token(send, endpoint)))
        assert (await recv_final(sock)).ok

    async def edge(i: int) -> None:
        body = {
            "model": "front",
            "user": "http",
            "messages": [{"role": "user", "content": f"hi {i}"}],
        }
        response = await http.post(f"{url}/chat/completions", json=body)
        assert response.status_code == 200, response.text

    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def raw(i: int) -> None:
        body = json.dumps(
            {"model": "front", "user": "raw", "messages": [{"role": "user", "content": f"hi {i}"}]}
        ).encode()
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (TOKEN.encode(), len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        size = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answer = json.loads(await reader.readexactly(size))
        assert answer["choices"][0]["message"]["content"], answer

    async def official(i: int) -> None:
        said = [{"role": "user", "content": f"hi {i}"}]
        await sdk.chat.completions.create(model="front", user="sdk", messages=said)

    paths = {"control": control, "raw": raw, "edge": edge, "sdk": official}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for i in range(WARMUP + SAMPLES):
        for name, one in paths.items():
            start = time.perf_counter()
            await one(i)
            if i >= WARMUP:
                times[name].append((time.perf_counter() - start) * 1e6)
    writer.close()
    await http.aclose()
    await sdk.close()
    sock.close()
    ctx.term()
    return times


def main() -> list[Row]:
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="ga", dir=Path.home()) as tmp:
        env = dict(os.environ, GOONDAN_STATE_ROOT=tmp, API_PORT=str(port), API_TOKEN=TOKEN)
        os.environ["GOONDAN_STATE_ROOT"] = tmp
        proc = _daemon(BUNDLE, env, READY)
        try:
            times = asyncio.run(_measure(port))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    base = statistics.median(times["control"])

    def row(name: str, key: str, goal: str = "") -> Row:
        values = times[key]
        return Row(name, statistics.median(values), p99(values), "µs", base, goal, stalls(values))

    rows = [
        row("goondan send over the control socket (baseline)", "control"),
        row("/v1/chat/completions, raw keep-alive HTTP/1.1", "raw", goal="≤ 1.2x"),
        row("/v1/chat/completions, httpx", "edge"),
        row("/v1/chat/completions, openai SDK", "sdk"),
    ]
    print_rows(f"api connector round trip, one warm agent ({SAMPLES} samples each)", rows)
    return rows


if __name__ == "__main__":
    main()
