"""The clients bench_scale drives a daemon with: a kept-open control DEALER, a bare zygote
(the same-moment baseline of a fork), and psutil readings of CPU time and memory."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

MIB = 1024 * 1024


def echo_bundle(swarm: str, policy: str) -> str:
    """A one-agent swarm whose scripted model answers `pong <input>`, with Swarm `policy`."""
    return f"""
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: script}}
spec: {{provider: scripted, model: {swarm}, options: {{script: [{{reply: "pong {{input}}"}}]}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: echo}}
spec: {{modelConfig: {{modelRef: Model/script}}}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: {swarm}}}
spec:
  entryAgent: Agent/echo
  agents: [Agent/echo]
  policy: {policy}
"""


class Control:
    """One DEALER kept connected to control.sock: a round trip is not a connect each time."""

    def __init__(self, endpoint: str) -> None:
        import zmq
        import zmq.asyncio

        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.endpoint = endpoint
        self.n = 0

    async def call(self, req: Any) -> float:
        """The round trip in µs; one request in flight at a time."""
        from protocol.codec import encode
        from tests.integration.harness import recv_final, with_token

        start = time.perf_counter()
        await self.sock.send(encode(with_token(req, self.endpoint)))
        reply = await recv_final(self.sock)
        elapsed = (time.perf_counter() - start) * 1e6
        if reply.request_id != req.request_id or not reply.ok:
            raise RuntimeError(f"control {req.request_id}: {reply}")
        return elapsed

    async def send(self, key: str, text: str) -> float:
        from protocol.control import SendText

        self.n += 1
        return await self.call(SendText(request_id=f"s{self.n}", text=text, instance_key=key))

    async def ping(self) -> float:
        from protocol.control import Ping

        self.n += 1
        return await self.call(Ping(request_id=f"p{self.n}"))

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


class ZygoteCpu(msgspec.Struct, frozen=True):
    self: float
    children: float
    reaped: int

    def per_fork_ms(self, before: ZygoteCpu) -> float:
        """CPU per child between `before` and this, the zygote's share and the child's."""
        spent = self.self - before.self + self.children - before.children
        return spent / (self.reaped - before.reaped) * 1000


class BareZygote:
    """The bare zygote of ARCHITECTURE.md §8 beside the daemon: a zygote forks a child that says
    ready on a ROUTER."""

    def __init__(self, directory: Path) -> None:
        import zmq
        import zmq.asyncio

        from tests.integration.harness import child_env

        self.ctx = zmq.asyncio.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        endpoint = f"ipc://{directory}/zygote.sock"
        self.router.bind(endpoint)
        argv = [sys.executable, "-m", "tests.bench.baselines", "zygote", endpoint]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env()
        )
        self.n = 0

    async def fork(self) -> float:
        """Fork -> the child's ready, in ms (the first call also waits for the zygote)."""
        assert self.proc.stdin is not None
        self.n += 1
        start = time.perf_counter()
        self.proc.stdin.write(f"z{self.n}\n")
        self.proc.stdin.flush()
        ident, _ = await self.router.recv_multipart()
        elapsed = (time.perf_counter() - start) * 1000
        await self.router.send_multipart([ident, b"bye"])
        return elapsed

    def cpu(self) -> ZygoteCpu:
        """The zygote's and its exited children's CPU so far (it waits for every child)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("cpu\n")
        self.proc.stdin.flush()
        return msgspec.json.decode(self.proc.stdout.readline(), type=ZygoteCpu)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.router.close()
        self.ctx.term()


def cpu_seconds(pids: Iterable[int]) -> float:
    """CPU time of the processes, every thread counted. From /proc/PID/task/*/schedstat
    (nanoseconds on the CPU) where Linux has it: user+system times are counted in clock
    ticks, too coarse for a process that runs a few hundred microseconds a minute."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            total += _schedstat_seconds(pid)
            continue
        except OSError:
            pass
        try:
            cpu = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += cpu.user + cpu.system
    return total


def _schedstat_seconds(pid: int) -> float:
    tasks = Path(f"/proc/{pid}/task")
    ns = 0
    for task in tasks.iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            ns += int((task / "schedstat").read_text().split()[0])
    return ns / 1e9


def memory(pids: list[int]) -> tuple[list[float], list[float]]:
    """(USS, PSS) in MiB of each live agent process."""
    import psutil

    uss, pss = [], []
    for pid in pids:
        info = psutil.Process(pid).memory_full_info()
        uss.append(info.uss / MIB)
        pss.append(info.pss / MIB)
    return uss, pss
