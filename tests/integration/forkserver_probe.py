"""Drive a real fork server from a fresh process and print what memory did, as JSON.

Each probe starts the fork server the way the daemon does, before this process has a zmq
Context, a thread or a loop (forking the test process, with the threads and loops of earlier
tests, is not what the daemon does).

    python -m tests.integration.forkserver_probe reloads N BUNDLE_DIR STATE_ROOT

N times: edit the bundle, ask for the reload hook the daemon sends after a reload, and read
the server's RSS from /proc once the hook has run. Prints `{"rss_mib": [after the start,
after reload 1, ...]}`.

    python -m tests.integration.forkserver_probe idle-uss N BUNDLE AGENT STATE_ROOT

spawns N idle agents (after a first one, not counted) through the daemon's supervisor, router
and spawner: each one ready, none served an event. Prints `{"uss_mib": [...]}`, their private
memory.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.supervision import forkserver

MIB = 1024 * 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / MIB
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _after_queued_requests(server: forkserver.ForkServerProcess, log_path: str) -> None:
    """The server serves its requests in order: once a spawn sent after the hook is answered,
    the hook has run. The child only prints its usage (into `log_path`) and exits."""
    req = forkserver.SpawnRequest(req_id=1, argv=["--help"])
    output = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        forkserver.request_spawn(server, req, output)
    finally:
        os.close(output)
    while True:
        data, fds, _flags, _addr = socket.recv_fds(server.sock, forkserver.MAX_DATAGRAM, 4)
        for fd in fds:
            os.close(fd)
        if not data:
            raise RuntimeError("the fork server hung up")
        if isinstance(forkserver.reply_decoder.decode(data), forkserver.Spawned):
            return


def reloads(count: int, bundle_dir: Path, state_root: Path) -> list[float]:
    from bundles.loader import load_bundle
    from protocol.endpoints import StateLayout
    from tests.bench.bench_spawn import start_server

    bundle = load_bundle(bundle_dir, state_root=state_root)
    server = start_server(bundle, StateLayout(root=state_root))
    main = bundle.path if bundle.path.is_file() else bundle_dir / "goondan.yaml"
    try:
        with tempfile.TemporaryDirectory(prefix="gp") as tmp:
            log_path = str(Path(tmp) / "child.log")
            _after_queued_requests(server, log_path)
            out = [rss_mib(server.pid)]
            for i in range(count):
                main.write_text(main.read_text() + f"\n# edit {i}\n")  # a reload's new bundle
                forkserver.call_hook(server, forkserver.ENTRY, "refresh")
                _after_queued_requests(server, log_path)
                out.append(rss_mib(server.pid))
    finally:
        server.sock.close()  # EOF: the server exits
        os.waitpid(server.pid, 0)
    return out


def idle_uss(count: int, bundle_path: Path, agent: str, state_root: Path) -> list[float]:
    import asyncio
    import logging

    import structlog
    import uvloop

    from bundles.loader import load_bundle
    from protocol.endpoints import StateLayout
    from tests.bench.bench_spawn import Harness, start_server, uss_mib

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    layout = StateLayout(root=state_root)
    bundle = load_bundle(bundle_path, state_root=state_root)
    server = start_server(bundle, layout)

    async def spawn() -> list[float]:
        harness = Harness("forkserver", server, layout, bundle, agents=(agent,))
        # an agent's ready can come before the fork server's reply that gives the supervisor
        # its pid (each crosses a socket of its own): the USS is read once every pid is known.
        # The supervisor sets a pid in the step that its spawner's `spawn` returns in.
        spawned: list[int] = []
        all_spawned = asyncio.Event()
        spawner_spawn = harness.spawner.spawn

        async def spawn_counted(spec: Any) -> Any:
            handle = await spawner_spawn(spec)
            spawned.append(handle.pid)
            if len(spawned) == count + 1:
                all_spawned.set()
            return handle

        harness.spawner.spawn = spawn_counted  # type: ignore[method-assign]
        try:
            async with asyncio.timeout(120):
                await harness.spawn("first")  # as the bench: the server's first fork is not counted
                for i in range(count):
                    await harness.spawn(f"idle-{i}")
                live = [e for e in harness.table.live() if e.address.instance_key != "first"]
                await all_spawned.wait()
                return uss_mib([e.pid for e in live if e.pid])
        finally:
            await harness.close()

    return uvloop.run(spawn())


if __name__ == "__main__":
    if sys.argv[1] == "reloads":
        mib = reloads(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        print(json.dumps({"rss_mib": mib}), flush=True)
    elif sys.argv[1] == "idle-uss":
        args = sys.argv[2:]
        mib = idle_uss(int(args[0]), Path(args[1]), args[2], Path(args[3]))
        print(json.dumps({"uss_mib": mib}), flush=True)
    else:
        raise SystemExit(f"unknown probe {sys.argv[1]!r}")
