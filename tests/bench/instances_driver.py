"""The drive behind bench_instances and test_instances: many distinct instances, one event
each, through one real daemon, with a few hundred live at a time.

The daemon is a real `goondan run` (fork server) whose log lines are read and dropped as they
come (a million instances write millions of lines: none is kept in memory here, only counts
of the warnings and errors). Events go through the control socket as `goondan send` sends
them, pipelined over one DEALER (IN_FLIGHT at a time, replies matched by request id).
"""

from __future__ import annotations

import array
import asyncio
import collections
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.scale_clients import echo_bundle

LIVE = 300
"""maxLiveInstances of the bench swarm: "a few hundred live at a time"."""
IN_FLIGHT = 32
HISTORY_TURNS = 200
"""Turns of history of each hibernated instance whose first event is timed (400 messages)."""
RSS_SAMPLES = 40
SWARM = "actors"
AGENT = "echo"
PATIENCE = 600
"""Seconds the daemon may take to start, and to stop once told to. CI starts the drive at the
lowest CPU priority beside stage 1, whose tests keep both cores busy: a landed run's daemon had
not said it started after 60 s (the bound this was), though it starts in ~1 s on a quiet
machine. A hang is still caught, and the test's own bound guards the whole drive."""


class DaemonProcess:
    """`goondan run` with its log read and dropped; `problems` counts warnings and errors by
    event name, `tail` keeps the last lines for a failure's message."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.problems: collections.Counter[str] = collections.Counter()
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self.started = asyncio.get_running_loop().create_future()
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, bundle: Path, env: dict[str, str]) -> DaemonProcess:
        argv = ["-m", "orchestrator", "run", str(bundle), "--log-format", "json",
                "--no-entry-check"]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        daemon = cls(proc)
        try:
            async with asyncio.timeout(PATIENCE):
                await daemon.started
        except BaseException:
            await daemon.close()
            raise
        return daemon

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            text = raw.decode(errors="replace")
            self.tail.append(text)
            if b'"level": "info"' in raw and self.started.done():
                continue  # the common case, not even parsed
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if line.get("level") in ("warning", "error", "critical"):
                self.problems[f"{line['level']}:{line.get('event')}"] += 1
            if line.get("event") == "started" and not self.started.done():
                self.started.set_result(None)
        if not self.started.done():
            self.started.set_exception(RuntimeError("".join(self.tail)))

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                async with asyncio.timeout(PATIENCE):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


class Pipelined:
    """One DEALER to control.sock with many sends in flight, replies matched by request id."""

    def __init__(self, endpoint: str) -> None:
        import zmq
        import zmq.asyncio

        from orchestrator.control.locate import read_token

        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.token = read_token(endpoint)
        self.waiting: dict[str, asyncio.Future[Any]] = {}
        self.n = 0
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        from protocol.codec import decode_control_reply

        while True:
            reply = decode_control_reply(await self.sock.recv())
            if reply.notice is not None:
                continue
            future = self.waiting.pop(reply.request_id, None)
            if future is not None and not future.done():
                future.set_result(reply)

    async def send(self, key: str, text: str) -> float:
        """Send `text` to instance `key`, wait for its reply; the round trip in ms."""
        from protocol.codec import encode
        from protocol.control import SendText

        self.n += 1
        request_id = f"r{self.n}"
        req = SendText(request_id=request_id, text=text, instance_key=key, token=self.token,
                       timeout_ms=300_000)  # fmt: skip
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        start = time.perf_counter()
        await self.sock.send(encode(req))
        reply = await future
        elapsed = (time.perf_counter() - start) * 1000
        if not reply.ok or reply.result.get("input") != f"pong {text}":
            raise RuntimeError(f"{key}: {reply.error or reply.result}")
        return elapsed

    async def status_rows(self) -> list[Any]:
        from protocol.codec import encode
        from protocol.control import StatusQuery

        self.n += 1
        request_id = f"s{self.n}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        await self.sock.send(encode(StatusQuery(request_id=request_id, token=self.token)))
        reply = await future
        rows: list[Any] = reply.result["processes"]
        return rows

    def close(self) -> None:
        self._reader.cancel()
        self.sock.close()
        self.ctx.term()


@dataclass(slots=True)
class Disk:
    instances: int
    """Driven instances (keys u0, u1, ...): one event each, now hibernated."""
    allocated: int
    """Bytes of blocks allocated for them (st_blocks, their directories included, and their
    share of the swarm's directory, whose entries grow with them)."""
    apparent: int
    inodes: int
    sample: list[str]
    """The files one driven instance left, relative to its directory."""


def _tree(path: str) -> tuple[int, int, int]:
    """(allocated, apparent, inodes) of everything under `path`, `path` included."""
    st = os.stat(path)
    allocated, apparent, inodes = st.st_blocks * 512, st.st_size, 1
    stack = [path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                allocated, apparent = allocated + st.st_blocks * 512, apparent + st.st_size
                inodes += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return allocated, apparent, inodes


def disk_usage(root: Path) -> Disk:
    """What the driven instances take under instances/<swarm>/ (the seeded ones apart)."""
    own = os.stat(root)
    allocated, apparent, inodes, driven, others = own.st_blocks * 512, own.st_size, 0, 0, 0
    with os.scandir(root) as keys:
        for key in keys:
            if not key.name.startswith("u"):
                others += 1
                continue
            driven += 1
            a, b, c = _tree(key.path)
            allocated, apparent, inodes = allocated + a, apparent + b, inodes + c
    share = driven / max(1, driven + others)  # the swarm directory's blocks, shared out
    allocated -= int(own.st_blocks * 512 * (1 - share))
    some = root / "u0" / AGENT
    sample = sorted(str(p.relative_to(some)) for p in some.rglob("*")) if some.is_dir() else []
    return Disk(driven, allocated, apparent, inodes, sample)


@dataclass(slots=True)
class Drive:
    instances: int
    seconds: float = 0.0
    new_ms: array.array[float] = field(default_factory=lambda: array.array("d"))
    """send -> reply of each instance's first (and only) event."""
    cold_ms: list[float] = field(default_factory=list)
    """send -> reply of the first event of a hibernated instance with HISTORY_TURNS turns."""
    warm_ms: list[float] = field(default_factory=list)
    """send -> reply to a live instance (the baseline of the two above)."""
    rss: list[tuple[int, float, float]] = field(default_factory=list)
    """(instances driven, daemon RSS MiB, fork server RSS MiB)."""
    most_live: int = 0
    most_rows: int = 0
    """The most processes `goondan status` listed (live + the deactivated ones kept)."""
    cpu_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """CPU per driven instance in ms: (daemon, fork server, agent processes), user + system,
    over the drive."""
    sys_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """The kernel's (system) part of `cpu_ms`."""
    faults: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Minor page faults per driven instance, same order: a child's copy-on-write copies."""
    disk: Disk | None = None
    log_bytes: int = 0
    journal_bytes: int = 0
    problems: dict[str, int] = field(default_factory=dict)


def _stat(pid: int) -> list[int]:
    """/proc/<pid>/stat's fields by their number in proc(5) (10 minflt, 14 utime, ...); the
    first four (none, pid, command, state) are 0."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        rest = f.read().rsplit(b")", 1)[1].split()
    return [0, 0, 0, 0, *map(int, rest[1:])]


class Driver:
    def __init__(self, daemon: DaemonProcess, client: Pipelined, root: Path, n: int) -> None:
        self.daemon, self.client, self.root = daemon, client, root
        self.run = Drive(n)

    def _cpu(self) -> list[list[float]]:
        """[user s, system s, minor faults] so far of the daemon, the fork server and the
        agents it reaped (/proc/<pid>/stat: utime, stime, minflt and their children's)."""
        import psutil

        tick = os.sysconf("SC_CLK_TCK")
        own = _stat(self.daemon.pid)
        out = [[own[14] / tick, own[15] / tick, float(own[10])], [0.0] * 3, [0.0] * 3]
        for child in psutil.Process(self.daemon.pid).children(recursive=False):
            f = _stat(child.pid)
            out[1] = [
                a + b for a, b in zip(out[1], (f[14] / tick, f[15] / tick, f[10]), strict=True)
            ]
            out[2] = [
                a + b for a, b in zip(out[2], (f[16] / tick, f[17] / tick, f[11]), strict=True)
            ]
        return out

    def _rss(self) -> tuple[float, float]:
        import psutil

        daemon = psutil.Process(self.daemon.pid)
        server = daemon.children(recursive=False)
        mib = 1024 * 1024
        return daemon.memory_info().rss / mib, sum(p.memory_info().rss for p in server) / mib

    async def _live(self) -> int:
        return sum(1 for r in await self.client.status_rows() if r["pid"] is not None)

    async def _sample(self, driven: int) -> None:
        rows = await self.client.status_rows()
        live = sum(1 for r in rows if r["pid"] is not None)
        self.run.most_live = max(self.run.most_live, live)
        self.run.most_rows = max(self.run.most_rows, len(rows))
        self.run.rss.append((driven, *self._rss()))

    async def history(self, cold: int) -> list[str]:
        """One instance with HISTORY_TURNS turns, copied to `cold` keys the daemon never saw
        (a hibernated instance is its files); the keys."""
        for turn in range(HISTORY_TURNS):
            await self.client.send("seed", f"turn {turn}")
        instances = self.root / "instances" / SWARM
        keys = [f"h{i}" for i in range(cold)]
        for key in keys:
            await asyncio.to_thread(shutil.copytree, instances / "seed", instances / key)
        return keys

    async def many(self, on_progress: Callable[[int], None] | None = None) -> None:
        """One event to each of `instances` new keys, IN_FLIGHT at a time."""
        n = self.run.instances
        every = max(1, n // RSS_SAMPLES)
        keys: Iterator[int] = iter(range(n))
        done = 0

        async def worker() -> None:
            nonlocal done
            for i in keys:
                self.run.new_ms.append(await self.client.send(f"u{i}", "hi"))
                done += 1
                if done % every == 0:
                    await self._sample(done)
                    if on_progress is not None:
                        on_progress(done)

        live_before = await self._live()
        start, cpu = time.perf_counter(), self._cpu()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        self.run.seconds = time.perf_counter() - start
        # an agent's CPU is its parent's once it is reaped: divided by the agents that ended,
        # not by every instance driven (up to maxLiveInstances are still live at the end)
        reaped = max(1, n + live_before - await self._live())
        (du, ds, df), (fu, fs, ff), (au, as_, af) = (
            [(b - a) / count for a, b in zip(before, after, strict=True)]
            for before, after, count in zip(cpu, self._cpu(), (n, n, reaped), strict=True)
        )
        self.run.cpu_ms = (1000 * (du + ds), 1000 * (fu + fs), 1000 * (au + as_))
        self.run.sys_ms = (1000 * ds, 1000 * fs, 1000 * as_)
        self.run.faults = (df, ff, af)

    async def first_events(self, cold: list[str]) -> None:
        """The timed first event of each hibernated instance, one at a time, each followed by
        a round trip to a live instance (the one just woken)."""
        for key in cold:
            self.run.cold_ms.append(await self.client.send(key, "back"))
            self.run.warm_ms.append(await self.client.send(key, "again"))

    def finish(self) -> Drive:
        self.run.disk = disk_usage(self.root / "instances" / SWARM)
        logs = self.root / "logs" / SWARM
        self.run.log_bytes = sum(p.stat().st_size for p in logs.iterdir()) if logs.is_dir() else 0
        journal = self.root / "journal" / SWARM
        self.run.journal_bytes = sum(p.stat().st_size for p in journal.iterdir())
        self.run.problems = dict(self.daemon.problems)
        return self.run


async def drive(
    directory: Path, n: int, cold: int, on_progress: Callable[[int], None] | None = None
) -> Drive:
    """The whole run in `directory` (bundle, state root): history, N instances, first events.

    The daemon runs unmeasured under `make test`: with coverage's tracer every agent process
    would write and the run would combine one data file per instance, which is not what a
    million instances cost (the paths it drives are measured by the integration tests)."""
    from tests.integration.harness import unmeasured_env

    bundle = directory / "goondan.yaml"
    bundle.write_text(echo_bundle(SWARM, f"{{maxLiveInstances: {LIVE}}}"))
    root = directory / "s"
    env = unmeasured_env({"GOONDAN_STATE_ROOT": str(root)})
    daemon = await DaemonProcess.start(bundle, env)
    client = None
    try:
        client = Pipelined(f"ipc://{root}/run/{SWARM}/control.sock")
        driver = Driver(daemon, client, root, n)
        hibernated = await driver.history(cold)
        await driver._sample(0)
        await driver.many(on_progress)
        await driver.first_events(hibernated)
        await driver._sample(n)
        return driver.finish()
    finally:
        if client is not None:
            client.close()
        await daemon.close()
