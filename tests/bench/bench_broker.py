"""Brokered round trip agent -> orchestrator -> agent -> back, ours vs the bare broker.

Our side is the real `orchestrator.routing.router.Router` (decode, process-table and generation
check, open-request book, mailbox, ROUTER_MANDATORY sends) on uvloop in its own process,
with the client and worker registered as live agent processes. The bare side is the
3-process broker of ARCHITECTURE.md §8 (asyncio-drain, typed decode). Client and worker are the
same blocking pyzmq programs for both. Rounds alternate so the machine's drift hits both.

Run: `python -m tests.bench.bench_broker` (or via `python -m tests.bench`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from tests.bench import plot
from tests.bench.baselines import Row, p99, print_rows, stalls

ROUNDS = 3
SYNC_RTTS = 4000
WINDOW = 100
WINDOWED_RTTS = 20000


def _router_role(endpoint: str) -> None:
    import logging

    import structlog
    import uvloop
    import zmq.asyncio

    from orchestrator.supervision.states import ProcessStatus
    from orchestrator.supervision.table import ProcessTable
    from protocol.errors import ErrorInfo
    from protocol.ids import Address, agent_address
    from tests.unit.orchestrator.fakes import build_router

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
        router = build_router(zmq.asyncio.Context(), endpoint, table, Steady())  # type: ignore[arg-type]
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
    plot.record_latency(bare, rtt[bare])
    plot.record_latency(ours, rtt[ours])
    base_rtt = statistics.median(rtt[bare])
    base_rate = statistics.median(rate[bare])
    return [
        Row(
            f"round trip, {bare}",
            base_rtt,
            p99(rtt[bare]),
            "µs",
            base_rtt,
            stalls=stalls(rtt[bare]),
        ),
        Row(
            "round trip, goondan router",
            statistics.median(rtt[ours]),
            p99(rtt[ours]),
            "µs",
            base_rtt,
            "≤ 1.25x, p99 ≤ 1000 µs",
            stalls(rtt[ours]),
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
    hop = warm_hop()
    print_rows(
        f"warm hop: orchestrator -> agent turn with one model call to a local "
        f"OpenAI-compatible server -> reply ({HOP_TURNS} turns, state root on {HOP_ROOT})",
        hop,
    )
    return rows + hop


# -- warm hop: one turn with one model call --------------------------------------------------

HOP_TURNS = 300
HOP_WARMUP = 30
HOP_PER_INSTANCE = 5
HOP_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "local",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "pong"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()  # fmt: skip
HOP_BUNDLE = """
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: local}
spec: {provider: openai, model: local, endpoint: "http://127.0.0.1:PORT/v1",
       apiKey: {value: sk-local}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: hop}
spec: {modelConfig: {modelRef: Model/local}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: hop}
spec: {entryAgent: Agent/hop, agents: [Agent/hop]}
"""


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "local",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
USAGE_CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "local",
               "choices": [], "usage": USAGE}  # fmt: skip
SSE_EVENTS = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "po"}),
    _chunk({"content": "ng"}),
    _chunk({}, "stop"),
    b"data: " + json.dumps(USAGE_CHUNK).encode() + b"\n\n",
    b"data: [DONE]\n\n",
]
"""The same answer streamed (`stream: true`): a role chunk, "po", "ng", the finish chunk, the
usage chunk and `[DONE]`, each event flushed on its own as a real stream's are."""


def _tool_to_call(request: dict[str, Any]) -> str | None:
    """The tool a request that offers tools gets called: the one named `*now` (else the first),
    None when the last message is a tool's result (then the answer is "pong")."""
    tools = [t["function"]["name"] for t in request.get("tools") or []]
    if not tools or request["messages"][-1].get("role") == "tool":
        return None
    name: str = next((t for t in tools if t.endswith("now")), tools[0])
    return name


def tool_events(body: bytes) -> list[bytes]:
    """`tool_answer` streamed (a host that always streams, bench_peers' Python host): the call
    in a role chunk with its name and id, then its arguments, the finish chunk, usage, [DONE]."""
    name = _tool_to_call(json.loads(body))
    if name is None:
        return SSE_EVENTS
    start = {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": name, "arguments": ""}}  # fmt: skip
    return [
        _chunk({"role": "assistant", "content": None, "tool_calls": [start]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        _chunk({}, "tool_calls"),
        *SSE_EVENTS[-2:],
    ]


def tool_answer(body: bytes) -> bytes:
    """A request that offers tools: call the one named `*now` (else the first; no arguments)
    unless the last message is a tool's result, then say "pong"."""
    name = _tool_to_call(json.loads(body))
    if name is None:
        return COMPLETION
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return json.dumps({
        "id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "local",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }).encode()  # fmt: skip


async def _llm_server() -> None:
    """Answers every POST with the same chat completion (keep-alive), as fast as it can;
    streamed as server-sent events when the request asks for it; a tool call first when the
    request offers tools (`tool_answer`)."""
    import asyncio

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            streamed = b'"stream": true' in body or b'"stream":true' in body
            if b'"tools"' in body and not streamed:  # bench_peers' tool round trip
                answer = tool_answer(body)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(answer), answer))  # fmt: skip
            elif streamed:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
                for event in tool_events(body) if b'"tools"' in body else SSE_EVENTS:
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(COMPLETION), COMPLETION)
                )
            await writer.drain()

    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(guarded, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def _llm_role() -> None:
    import uvloop

    uvloop.run(_llm_server())


async def _hop_measure(harness: Any, port: int) -> dict[str, list[float]]:
    import asyncio
    import time

    import openai

    from protocol.events import ReplyTo, Source, SourceKind, new_event
    from protocol.ids import agent_address

    cli = Source(kind=SourceKind.CLI, name="bench")

    async def turn(key: str, i: int, journaled: bool = False) -> float:
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        event = new_event(
            type="user.message", input=f"ping {i}", instance_key=key, source=cli,
            reply_to=ReplyTo(target="control", correlation_id=f"{key}-{i}-{journaled}"),
        )  # fmt: skip
        start = time.perf_counter()
        if journaled:  # what `goondan send` does: on disk (fsync) before it is submitted
            await harness.acceptor.accept(event, agent_address("hop", key), waiter=waiter)
        else:
            harness.router.submit(event, agent_address("hop", key), waiter)
        reply = await waiter
        assert reply.error is None and reply.input == "pong", reply
        return (time.perf_counter() - start) * 1e6

    client = openai.AsyncOpenAI(api_key="sk-local", base_url=f"http://127.0.0.1:{port}/v1")

    async def bare(i: int) -> float:
        start = time.perf_counter()
        await client.chat.completions.create(
            model="local", messages=[{"role": "user", "content": f"ping {i}"}]
        )
        return (time.perf_counter() - start) * 1e6

    out: dict[str, list[float]] = {"bare": [], "hop": [], "journaled": []}
    for i in range(HOP_WARMUP):
        await bare(i)
    # a conversation's history grows with every turn (and so does each model request), so
    # the turns are spread over warm instances: one warm-up turn each, then a few measured
    for n in range(HOP_TURNS // HOP_PER_INSTANCE):
        key = f"i{n}"
        await harness.spawn(key)
        await turn(key, -1)
        for i in range(HOP_PER_INSTANCE):  # alternate so drift hits all three
            out["hop"].append(await turn(key, i))
            out["journaled"].append(await turn(key, 100 + i, journaled=True))
            out["bare"].append(await bare(i))
    await client.close()
    return out


def _hop_role() -> None:
    print(json.dumps(run_in_harness(HOP_BUNDLE, ("hop",), _hop_measure)), flush=True)


def run_in_harness(
    bundle_text: str,
    agents: tuple[str, ...],
    measure: Callable[[Any, int], Awaitable[dict[str, list[float]]]],
    files: Mapping[str, str] | None = None,
) -> dict[str, list[float]]:
    """The local model server and a warm-hop harness in this process (the real router,
    supervisor, fork server and journal, bench_spawn.Harness) on `bundle_text` (PORT: the
    server's port; `files` beside it): what `measure(harness, port)` samples."""
    import logging

    import structlog
    import uvloop

    from bundles.loader import load_bundle
    from orchestrator.ingress.journal.sqlite import SqliteJournal
    from protocol.endpoints import StateLayout
    from tests.bench.bench_spawn import Harness, start_server

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    llm = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.bench_broker", "llm"], stdout=subprocess.PIPE
    )
    try:
        assert llm.stdout is not None
        port = int(llm.stdout.readline())
        with (
            tempfile.TemporaryDirectory(prefix="gh", dir=HOP_ROOT) as tmp,
            tempfile.TemporaryDirectory(prefix="gj", dir=Path.home()) as disk,
        ):
            bundle_file = Path(tmp) / "goondan.yaml"
            bundle_file.write_text(bundle_text.replace("PORT", str(port)))
            for name, text in (files or {}).items():
                (Path(tmp) / name).write_text(text)
            layout = StateLayout(root=Path(tmp) / "state")
            bundle = load_bundle(bundle_file, state_root=layout.root)
            server = start_server(bundle, layout)

            async def run_all() -> dict[str, list[float]]:
                # the journal on the real disk (the state root is on /dev/shm, where fsync
                # costs nothing): its fsyncs are the cost being measured
                journal = await SqliteJournal.open(Path(disk) / "ingress.sqlite3")
                harness = Harness("forkserver", server, layout, bundle, agents=agents,
                                  journal=journal)  # fmt: skip
                try:
                    return await measure(harness, port)
                finally:
                    await harness.close()
                    await harness.acceptor.close()

            return uvloop.run(run_all())
    finally:
        llm.kill()
        llm.wait()


def role_samples(module: str, role: str, timeout: float = 600) -> dict[str, list[float]]:
    """Run `python -m tests.bench.<module> <role>` (a process of its own, so its samples are
    not taken in this one's heap); the samples its last line prints as JSON."""
    proc = subprocess.run(
        [sys.executable, "-m", f"tests.bench.{module}", role],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {role} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, list[float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def warm_hop() -> list[Row]:
    result = role_samples("bench_broker", "hop")
    bare = statistics.median(result["bare"])
    return [
        Row(
            "model call alone (openai SDK -> local server)",
            bare,
            p99(result["bare"]),
            "µs",
            bare,
            stalls=stalls(result["bare"]),
        ),
        Row(
            "warm hop orchestrator -> agent turn -> reply",
            statistics.median(result["hop"]),
            p99(result["hop"]),
            "µs",
            bare,
            "≤ 2000 µs p50",
            stalls(result["hop"]),
        ),
        Row(
            "warm hop, accepted through the journal (fsync) -> reply",
            statistics.median(result["journaled"]),
            p99(result["journaled"]),
            "µs",
            statistics.median(result["hop"]),
            "≤ 1.15x the hop without",
            stalls(result["journaled"]),
        ),
    ]


if __name__ == "__main__":
    roles = {"llm": _llm_role, "hop": _hop_role}
    if len(sys.argv) > 2 and sys.argv[1] == "router":
        _router_role(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] in roles:
        roles[sys.argv[1]]()
    else:
        main()
