"""Agent.spec.limits in the agent process: rlimits set (and not raised back), breaches coded,
the agent's own cgroup made and joined. Each case that changes this process's limits runs in
a forked child, which reports back through a pipe."""

from __future__ import annotations

import errno
import json
import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_process import limits
from bundles.limits import Limits
from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode
from protocol.launch import agent_cgroup

NOBODY = 65534


def _tasks_of(uid: int) -> int:
    """Processes and threads whose real uid is `uid` (what RLIMIT_NPROC counts)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue  # gone meanwhile
    return count


def in_child(body: Callable[[], Any]) -> Any:
    """Run `body` in a forked child; its JSON result (or the error it raised) comes back."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        try:
            out = {"ok": body()}
        except BaseException as exc:
            out = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write_fd, json.dumps(out).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    result = json.loads(data)
    assert "error" not in result, result["error"]
    return result["ok"]


def test_rlimits_are_set_soft_and_hard() -> None:
    def body() -> Any:
        limits.apply(Limits(memory=512 << 20, cpu_seconds=60, open_files=64, processes=4096))
        got = {
            name: resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))
            for name in ("DATA", "CPU", "NOFILE", "NPROC")
        }
        try:  # a tool cannot raise them back
            resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
        except ValueError:
            got["raised"] = False
        else:
            got["raised"] = os.geteuid() != 0 or None  # root may (CAP_SYS_RESOURCE)
        return got

    got = in_child(body)
    assert got["DATA"] == [512 << 20, 512 << 20]
    assert got["CPU"] == [60, 60 + limits.CPU_GRACE_SECONDS]
    assert got["NOFILE"] == [64, 64]
    assert got["NPROC"] == [4096, 4096]
    assert got["raised"] in (False, None)


def _vm_data_bytes() -> int:
    """This process's private writable memory as RLIMIT_DATA counts it (VmData)."""
    status = Path("/proc/self/status").read_text()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmData:"))
    return int(kib) * 1024


def test_a_memory_breach_is_a_coded_error_and_the_process_goes_on() -> None:
    def body() -> Any:
        # 256 MiB above what this process already holds: a test worker that ran many tests
        # before this one can hold more than 256 MiB itself (a 3.11 CI run's did), and then
        # every allocation failed, the small one after the breach too
        held = _vm_data_bytes()
        limits.apply(Limits(memory=held + (256 << 20)))
        try:
            bytearray(1 << 30)
        except MemoryError as exc:
            coded = limits.as_limit_error(exc, Limits(memory=held + (256 << 20)))
        else:
            return "allocated"
        assert isinstance(coded, ToolFailed)
        return [coded.code, len(bytearray(1 << 20))]  # small allocations still work

    assert in_child(body) == [ErrorCode.E_AGENT_LIMIT, 1 << 20]


def test_forking_past_the_process_limit_is_coded() -> None:
    """RLIMIT_NPROC counts the processes of a user and does not bind root: as root the child
    becomes `nobody` first."""

    def body() -> Any:
        if os.geteuid() == 0:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        allowed = _tasks_of(os.getuid()) + 2
        limits.apply(Limits(processes=allowed))
        hold_r, hold_w = os.pipe()
        started = []
        try:
            for _ in range(allowed + 2):
                pid = os.fork()
                if pid == 0:
                    os.close(hold_w)
                    os.read(hold_r, 1)  # held until the parent closes its end
                    os._exit(0)
                started.append(pid)
        except BlockingIOError as exc:
            coded = limits.as_limit_error(exc, Limits(processes=allowed))
        else:
            coded = None
        finally:
            os.close(hold_w)
            for pid in started:
                os.waitpid(pid, 0)
        assert isinstance(coded, ToolFailed), coded
        return [coded.code, len(started)]

    code, started = in_child(body)
    assert code == ErrorCode.E_AGENT_LIMIT and started >= 1


def test_other_errors_stay_as_they_are() -> None:
    error = ValueError("no")
    assert limits.as_limit_error(error, Limits(processes=5)) is error
    refused = BlockingIOError(errno.EAGAIN, "try again")
    assert limits.as_limit_error(refused, Limits()) is refused  # no process limit: not coded
    coded = limits.as_limit_error(refused, Limits(processes=5))
    assert isinstance(coded, ToolFailed) and coded.code == ErrorCode.E_AGENT_LIMIT


def test_cgroup_files_of_each_limit() -> None:
    assert limits.cgroup_files(Limits()) == {}
    assert limits.cgroup_files(Limits(memory=1 << 30, processes=50, cpus=0.5)) == {
        "memory.max": str(1 << 30),
        "pids.max": "50",
        "cpu.max": "50000 100000",
    }


def test_joining_a_cgroup_writes_limits_where_the_controller_is(tmp_path: Path) -> None:
    """A directory that stands in for a cgroup: its files are what the kernel would offer."""
    path = Path(agent_cgroup(str(tmp_path), 4242))
    path.mkdir()
    for name in ("cgroup.procs", "memory.max", "cpu.max"):  # no pids controller here
        (path / name).write_text("")
    assert limits.join_cgroup(path, Limits(memory=1 << 30, processes=9, cpus=2)) == path
    assert (path / "memory.max").read_text() == str(1 << 30)
    assert (path / "cpu.max").read_text() == "200000 100000"
    assert not (path / "pids.max").exists()
    assert (path / "cgroup.procs").read_text() == str(os.getpid())


def test_a_cgroup_that_cannot_be_made_leaves_the_rlimits(tmp_path: Path) -> None:
    def body() -> Any:
        return str(limits.apply(Limits(open_files=100), str(tmp_path / "missing" / "deeper")))

    assert in_child(body) == "None"
