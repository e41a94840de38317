"""The daemon's edges: hostile frames, one daemon per swarm, invalid bundles, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import zmq
import zmq.asyncio

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import PYTHON, REPO, SWARM, child_env, run_cli


def _identity(i: int) -> bytes:
    return bytes([1 + i % 250]) + os.urandom(7)


async def test_10000_garbage_frames_leave_the_daemon_serving(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        assert (await daemon.send("echo before", "alpha")).ok
        endpoint = f"ipc://{StateLayout.from_env().run_paths('probe').agents_sock}"
        ctx = zmq.asyncio.Context()
        socks = []
        try:
            for i in range(20):
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                # well-formed ids of processes that do not exist (each id once: ROUTER
                # ignores a second peer with an identity already in use)
                ident = f"agent:ghost:probe:{i}".encode() if i % 5 == 0 else _identity(i)
                sock.setsockopt(zmq.IDENTITY, ident)
                sock.connect(endpoint)
                socks.append(sock)
            for n in range(10_000):
                sock = socks[n % 20]
                if n % 7 == 0 and n % 5 != 0:
                    await sock.send_multipart([b"x", os.urandom(n % 50), b""])
                else:
                    await sock.send(os.urandom(1 + n % 300))
            # 2,000 frames came from a well-formed but unknown id: stale; the rest malformed
            await daemon.wait_for("frame_stale", dropped=2000)
            await daemon.wait_for("frame_malformed", dropped=8000)
        finally:
            for sock in socks:
                sock.close()
            ctx.term()
        reply = await daemon.send("echo after", "alpha")
        assert reply.ok and reply.result["input"] == "echo after"
        assert (await daemon.process("alpha")).generation == 1
        assert len(daemon.find("frame_malformed")) < 30  # counted, not one log line each


async def test_a_second_daemon_of_the_same_swarm_refuses_naming_the_pid(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        code, _, err = await run_cli("run", str(SWARM), "--no-entry-check")
        assert code == 1
        assert "already running" in err and f"pid {daemon.pid}" in err
        assert f"goondan send --swarm {daemon.swarm}" in err  # what to do instead
        assert (await daemon.send("echo still here", "alpha")).ok


async def test_send_into_a_closed_pipe_ends_quietly(start_daemon: StartDaemon) -> None:
    """`goondan send ... | head -1` printed a BrokenPipeError traceback."""
    async with asyncio.timeout(60):
        await start_daemon()
        big = "echo " + "x" * 100_000  # more than a pipe holds (64 KiB): the write fails
        proc = await asyncio.create_subprocess_shell(
            f"{PYTHON} -m orchestrator send --agent alpha '{big}' | head -c 10",
            env=child_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 0 and len(out) == 10
        assert b"Traceback" not in err and b"BrokenPipe" not in err


async def test_an_invalid_bundle_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    async with asyncio.timeout(30):
        bad = REPO / "tests" / "fixtures" / "bundles" / "ref_not_found"
        code, out, err = await run_cli("run", str(bad), "--input", "hi")
        assert code == 2
        assert "E_CONFIG_REF_NOT_FOUND" in err and "nothing was started" in err
        assert out == ""
        assert not (StateLayout.from_env().root / "run").exists()


async def test_cli_commands_without_a_daemon_exit_1_with_a_clear_message() -> None:
    async with asyncio.timeout(30):
        for args in (("status",), ("send", "hi"), ("stop",), ("restart",)):
            code, _, err = await run_cli(*args)
            assert code == 1
            assert "E_DAEMON_NOT_RUNNING" in err and "goondan run" in err


async def test_run_with_input_prints_the_reply_and_exits_0() -> None:
    async with asyncio.timeout(60):
        hello = REPO / "bundles" / "examples" / "hello" / "goondan.yaml"
        code, out, err = await run_cli("run", str(hello), "--input", "Hello, goondan!")
        assert (code, out) == (0, "Hello! You said: Hello, goondan!\n"), err
        root = StateLayout.from_env().root
        assert not (root / "run" / "hello" / "active.json").exists()


async def test_send_status_restart_and_stop_through_the_cli(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        code, out, _ = await run_cli("send", "--agent", "beta", "echo", "hi")
        assert (code, out) == (0, "echo hi\n")
        code, out, _ = await run_cli("send", "--json", "hello")
        *deltas, final = map(json.loads, out.splitlines())  # streamed: the deltas, the event
        assert code == 0 and final["metadata"]["inReplyTo"]
        assert [d["text"] for d in deltas] == ["hello"]
        code, out, _ = await run_cli("send", "--json", "--no-stream", "hello")
        shown = json.loads(out)
        assert code == 0 and shown["reply"] == shown["input"] == "hello"
        assert next(iter(shown)) == "reply" and shown["type"] == "agent.response"

        code, out, _ = await run_cli("status", "--json")
        status = json.loads(out)
        assert code == 0 and status["orchestrator"]["pid"] == daemon.pid
        row = next(p for p in status["processes"] if p["name"] == "alpha")
        assert set(row) >= {"id", "kind", "name", "instanceKey", "pid", "status", "restarts",
                            "generation", "lastExit"}  # fmt: skip
        assert (row["kind"], row["instanceKey"], row["status"]) == ("agent", "probe", "idle")

        code, _, err = await run_cli("send", "crash")
        assert code == 1 and "E_AGENT_CRASHED" in err

        paths = StateLayout.from_env().instance_paths("probe", "probe", "beta")
        assert paths.base_jsonl.exists()
        code, out, _ = await run_cli("restart", "--agent", "beta")
        assert code == 0 and "agent:beta:probe:2" in out
        assert paths.base_jsonl.exists()  # history kept
        alpha = await daemon.process("alpha")
        assert alpha.generation == 3, alpha  # only beta was restarted (alpha ran crash twice)
        paths.workdir.mkdir()  # made at an instance's first tool call; beta calls none
        (paths.workdir / "notes.txt").write_text("keep me")
        code, out, _ = await run_cli("restart", "--agent", "beta", "--fresh")
        assert code == 0 and not paths.base_jsonl.exists()
        assert "history was cleared" in out
        # --fresh clears history and extension state, never the workspace
        assert (paths.workdir / "notes.txt").read_text() == "keep me"

        code, out, _ = await run_cli("instance", "list")
        assert code == 0 and "alpha" in out
        code, _, err = await run_cli("instance", "delete", "probe", "--agent", "beta")
        assert code == 2 and "--yes" in err and paths.workdir.exists()  # not a terminal
        code, out, _ = await run_cli("instance", "delete", "probe", "--agent", "beta", "--yes")
        assert code == 0 and "stopped agent:beta:probe" in out and "deleted " in out
        assert not paths.root.exists()
        code, _, err = await run_cli("instance", "delete", "nobody", "--yes")
        assert code == 1 and "E_INSTANCE_NOT_FOUND" in err

        code, out, _ = await run_cli("stop")
        assert code == 0 and "stopped" in out
        assert await daemon.wait() == 0


async def test_instances_are_listed_and_deleted_from_the_files_without_a_daemon(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        assert (await daemon.send("echo hi", "alpha")).ok
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
        code, out, err = await run_cli("instance", "list", "--swarm", "probe")
        assert code == 0, err
        assert "probe\talpha\tstopped" in out
        code, out, _ = await run_cli("calls", "list", "--swarm", "probe")
        assert code == 0 and out.strip() == "no pending calls"
        code, out, _ = await run_cli("instance", "delete", "probe", "--yes", "--swarm", "probe")
        assert code == 0 and "deleted " in out
        assert not StateLayout.from_env().instance_paths("probe", "probe", "alpha").root.exists()
        code, out, _ = await run_cli("instance", "list", "--swarm", "probe")
        assert code == 0 and out.strip() == "no instances"
        code, _, err = await run_cli("instance", "delete", "probe", "--yes", "--swarm", "probe")
        assert code == 1 and "E_INSTANCE_NOT_FOUND" in err


async def test_calls_list_with_several_swarms_and_no_daemon_says_no_daemon(tmp_path: Path) -> None:
    """With no daemon at all, the missing daemon is the error, not which swarm to choose."""
    for swarm in ("one", "two"):
        (StateLayout(tmp_path).swarm_instances_dir(swarm)).mkdir(parents=True)
    async with asyncio.timeout(30):
        code, _, err = await run_cli("calls", "list", "--state-root", str(tmp_path))
    assert code == 1 and "E_DAEMON_NOT_RUNNING" in err
    assert "several daemons" not in err and "E_CONTROL_BAD_REQUEST" not in err


async def test_run_dir_is_private_and_active_json_names_the_daemon(
    start_daemon: StartDaemon,
) -> None:
    import stat

    async with asyncio.timeout(30):
        daemon = await start_daemon()
        paths = StateLayout.from_env().run_paths("probe")
        assert stat.S_IMODE(paths.run_dir.stat().st_mode) == 0o700
        for sock in (paths.agents_sock, paths.control_sock):
            assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        active = json.loads(paths.active_json.read_text())
        assert active["pid"] == daemon.pid and active["swarm"] == "probe"
        assert set(active["endpoints"]) == {"agents", "control"}
        assert paths.pid_file.read_text().strip() == str(daemon.pid)
        daemon.signal(15)
        assert await daemon.wait() == 0
        assert not paths.active_json.exists() and not paths.pid_file.exists()


async def test_status_lists_every_running_swarm(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(60):
        await start_daemon()
        await start_daemon(REPO / "tests" / "fixtures" / "deferred", swarm="deferred")
        code, out, err = await run_cli("status")
        assert code == 0, err
        assert "swarm probe" in out and "swarm deferred" in out
        code, out, _ = await run_cli("status", "--json")
        assert sorted(s["orchestrator"]["swarm"] for s in json.loads(out)["swarms"]) == [
            "deferred", "probe"]  # fmt: skip
        code, out, _ = await run_cli("status", "--swarm", "deferred", "--json")
        assert json.loads(out)["orchestrator"]["swarm"] == "deferred"
        code, _, err = await run_cli("send", "hi")
        assert code == 1 and "several daemons" in err and "--swarm" in err
