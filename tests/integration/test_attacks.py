"""Attacks from the security review, each performed against a real daemon the way it was found.

Each test fails without its fix; the unit tests beside the code cover the mechanisms."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import httpx
import pytest
import zmq
import zmq.asyncio

from orchestrator.control.rundir import read_active
from protocol.codec import encode
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode
from protocol.ids import MAX_INSTANCE_KEY_BYTES, ORCHESTRATOR, ProcessKind
from protocol.messages import Hello, HelloPayload
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, run_cli
from tests.integration.test_example_workspace import free_port
from tests.integration.test_supervision import output


@pytest.mark.parametrize(
    "key",
    ["/" * MAX_INSTANCE_KEY_BYTES, "é" * (MAX_INSTANCE_KEY_BYTES // 2)],
    ids=["slashes", "accents"],
)
async def test_any_key_the_api_accepts_gets_a_working_agent(
    start_daemon: StartDaemon, key: str
) -> None:
    """A legal key whose escaped name was over 255 bytes crash-looped its agent."""
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        reply = await daemon.send("pid", "alpha", key=key)
        assert reply.ok, reply.error
        again = await daemon.send("pid", "alpha", key=key)
        assert again.ok, again.error
        assert output(again.result) == output(reply.result)  # the same process serves the key
        alpha = next(p for p in (await daemon.status()).processes if p.instance_key == key)
        assert (alpha.restarts, alpha.generation) == (0, 1)


def _open_to_others(root: Path) -> list[str]:
    found = []
    for directory, _dirs, files in os.walk(root):
        for path in [Path(directory), *(Path(directory) / f for f in files)]:
            if stat.S_IMODE(os.lstat(path).st_mode) & 0o077:
                found.append(f"{oct(stat.S_IMODE(os.lstat(path).st_mode))} {path}")
    return found


async def test_state_is_private_whatever_the_umask(
    start_daemon: StartDaemon,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With umask 000, instance directories were 0777 and base.jsonl, spawn.json and pending
    calls 0666: any local user could read conversations. `doctor` says so about loose state."""
    # created by the daemon itself; short: a unix socket path is 107 bytes at most
    root = tmp_path_factory.mktemp("u") / "fresh"
    monkeypatch.setenv("GOONDAN_STATE_ROOT", str(root))
    async with asyncio.timeout(60):
        daemon = await start_daemon(umask=0)
        assert (await daemon.send("pid", "alpha")).ok
        assert (await daemon.send("pid", "beta", key="other")).ok
        assert _open_to_others(root) == []
        _, out, _ = await run_cli("doctor", "--json")
        checks = {c["name"]: c for c in json.loads(out)["checks"]}
        assert checks["state privacy"]["status"] == "ok", checks["state privacy"]
        base = next(root.glob("instances/*/*/alpha/messages/base.jsonl"))
        base.chmod(0o644)
        (root / "secrets").mkdir(mode=0o700)
        secret = root / "secrets" / "token.json"
        secret.write_text("{}")
        secret.chmod(0o644)
        code, out, _ = await run_cli("doctor", "--json")
        assert code == 0, out  # warnings do not fail doctor
        checks = {c["name"]: c for c in json.loads(out)["checks"]}
        assert checks["state privacy"]["status"] == "warn"
        assert str(base) in checks["state privacy"]["detail"]
        assert checks["secrets"]["status"] == "warn" and str(secret) in checks["secrets"]["detail"]


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def test_a_huge_control_frame_is_refused_without_being_read(
    start_daemon: StartDaemon,
) -> None:
    """One 600 MB frame to control.sock raised the daemon's RSS from 47 MB to 1.2 GB."""
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        for _ in range(3):  # ordinary CLI calls are never reported as dropped
            code, _, err = await run_cli("status", "--swarm", daemon.swarm)
            assert code == 0, err
        before = _peak_rss_kib(daemon.pid)
        mark = daemon.mark()
        info = read_active(StateLayout.from_env().run_paths(daemon.swarm).active_json)
        assert info is not None
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(info.endpoints["control"])
        await sock.send(b"\x00" * (256 << 20))
        dropped = await daemon.wait_for("peer_dropped", since=mark, socket="control")
        sock.close()
        ctx.term()
        assert dropped["max_frame_bytes"] < (256 << 20)
        assert _peak_rss_kib(daemon.pid) - before < 32 << 10  # KiB: nothing near 256 MiB
        assert (await daemon.status()).orchestrator.pid == daemon.pid  # still serving
        assert len(daemon.find("peer_dropped")) == 1  # the status calls were not reported


CAPPED = REPO / "tests" / "fixtures" / "capacity"
LIVE = ("spawning", "idle", "processing", "draining")


async def test_new_instance_keys_from_outside_cannot_exhaust_the_machine(
    start_daemon: StartDaemon,
) -> None:
    """Each webhook request with a new instanceKey started a new agent process: 30 requests,
    30 processes. Now live agents stay within maxLiveInstances (idle ones make room, state
    kept) and the Connection starts at most newInstancesPerMinute new instances."""
    port = free_port()
    async with asyncio.timeout(120):
        daemon = await start_daemon(CAPPED, swarm="capped", env={"HOOK_PORT": str(port)})
        await daemon.wait_for("transition", process="connector:hook:webhook:1", target="idle")
        url = f"http://127.0.0.1:{port}/events"
        answers = []
        async with httpx.AsyncClient(timeout=30) as client:
            for i in range(10):
                body = {"text": f"hello {i}", "instanceKey": f"user{i}"}
                answers.append(await client.post(url, json=body))
                processes = (await daemon.status()).processes
                live = [p for p in processes if p.kind == "agent" and p.status in LIVE]
                assert len(live) <= 2, live
            again = await client.post(url, json={"text": "again", "instanceKey": "user0"})
        served = [a for a in answers if a.status_code == 200]
        limited = [a for a in answers if a.status_code == 429]
        assert [a.json()["reply"] for a in served] == [f"hello {i}" for i in range(4)]
        assert len(limited) == 6
        assert {a.json()["error"]["code"] for a in limited} == {"E_AGENT_CAPACITY"}
        assert daemon.find("instance_evicted")  # idle instances made room
        assert again.status_code == 200 and again.json()["reply"] == "again"  # state kept
        history = StateLayout.from_env().instance_paths("capped", "user0", "front").base_jsonl
        assert [json.loads(x)["content"] for x in history.read_text().splitlines()][-2:] == [
            "again",
            "again",
        ]


async def test_a_process_cannot_take_the_place_of_an_agent(start_daemon: StartDaemon) -> None:
    """A DEALER that connected first with the next generation's routing id received the
    user's event and locked the real child out. Identities now end with a secret of the spawn
    (passed privately), so the impostor is dropped and the real child serves."""
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        info = read_active(StateLayout.from_env().run_paths(daemon.swarm).active_json)
        assert info is not None
        ctx = zmq.asyncio.Context()
        impostor = ctx.socket(zmq.DEALER)
        impostor.setsockopt(zmq.LINGER, 0)
        impostor.setsockopt(zmq.IDENTITY, b"agent:beta:probe:1")
        impostor.connect(info.endpoints["agents"])
        hello = Hello(from_="agent:beta:probe:1", to=ORCHESTRATOR, payload=HelloPayload(
            pid=os.getpid(), kind=ProcessKind.AGENT, name="beta", instance_key="probe",
            generation=1))  # fmt: skip
        await impostor.send(encode(hello))
        reply = await daemon.send("pid", "beta")
        assert reply.ok, reply.error
        assert output(reply.result) != os.getpid()  # a real child served it
        assert await impostor.poll(0) == 0  # and the impostor got nothing
        assert daemon.find("frame_impostor") or daemon.find("frame_stale")
        impostor.close()
        ctx.term()


async def test_frames_over_the_agents_limit_are_refused_and_said(
    start_daemon: StartDaemon,
) -> None:
    """No frame size limit on agents.sock: one huge frame grew the daemon by its size. A
    foreign peer's huge frame is refused unread (logged); an agent's own oversize reply becomes
    a coded error instead of a connection the daemon would close."""
    async with asyncio.timeout(60):
        daemon = await start_daemon(REPO / "tests" / "fixtures" / "frames", swarm="framed")
        small = await daemon.send("short")
        assert small.ok and small.result["input"] == "short"
        big = await daemon.send("x" * 100_000)  # the echo is over 64 KiB
        assert not big.ok and big.error is not None
        assert big.error.code == ErrorCode.E_FRAME_TOO_LARGE
        info = read_active(StateLayout.from_env().run_paths("framed").active_json)
        assert info is not None
        before = _peak_rss_kib(daemon.pid)
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(info.endpoints["agents"])
        await sock.send(b"\x00" * (128 << 20))
        await daemon.wait_for("peer_dropped", socket="agents")
        sock.close()
        ctx.term()
        assert _peak_rss_kib(daemon.pid) - before < 32 << 10
        assert (await daemon.send("still here")).ok
