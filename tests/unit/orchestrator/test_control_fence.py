"""`control_fence.Fence` refuses a caller by what the kernel says of it (pid, uid, cgroup), then
by its token; `orphans.sweep` reaps the children nobody waits for, and only those."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.control import fence as control_fence
from orchestrator.control.fence import Fence, cgroup_of, within
from orchestrator.routing.peers import descends_from
from orchestrator.supervision import orphans
from protocol.errors import ErrorCode

TOKEN = "t" * 64


@pytest.fixture
def stranger() -> Iterator[int]:
    """A process that is not an ancestor of this test: a daemon this test does not run under."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_the_operator_with_the_token_is_served(stranger: int) -> None:
    fence = Fence(TOKEN, stranger, os.geteuid())
    assert fence.refusal(TOKEN, os.getpid(), os.geteuid()) is None


def test_root_is_served_as_it_can_read_the_token_anyway(stranger: int) -> None:
    assert Fence(TOKEN, stranger, 1000).refusal(TOKEN, os.getpid(), 0) is None


@pytest.mark.parametrize(
    ("known_pid", "uid", "why"),
    [(False, None, "unknown"), (True, None, "unknown"), (True, 4242, "uid 4242")],
)
def test_an_unknown_caller_or_another_user_is_refused(
    stranger: int, known_pid: bool, uid: int | None, why: str
) -> None:
    # the pid is taken here, not in the parameters: xdist workers must collect the same ids
    pid = os.getpid() if known_pid else None
    fence = Fence(TOKEN, stranger, 1000 if os.geteuid() == 4242 else os.geteuid())
    refused = fence.refusal(TOKEN, pid, uid)
    assert refused is not None and refused.code == ErrorCode.E_CONTROL_FORBIDDEN
    assert why in refused.message


def test_a_process_under_the_daemon_is_refused_token_or_not(stranger: int) -> None:
    fence = Fence(TOKEN, os.getpid(), os.geteuid())  # this test plays the daemon
    refused = fence.refusal(TOKEN, stranger, os.geteuid())
    assert refused is not None and refused.code == ErrorCode.E_CONTROL_FORBIDDEN
    assert f"pid {stranger} runs under this daemon" in refused.message
    assert fence.refusal(TOKEN, os.getpid(), os.geteuid()) is not None  # the daemon itself


def test_a_process_in_the_agents_cgroup_is_refused(stranger: int) -> None:
    here = cgroup_of(os.getpid())
    if here is None:
        pytest.skip("no cgroup v2 here")
    fence = Fence(TOKEN, stranger, os.geteuid(), agents_cgroup=here)
    refused = fence.refusal(TOKEN, os.getpid(), os.geteuid())
    assert refused is not None and "agents' cgroup" in refused.message
    elsewhere = Fence(TOKEN, stranger, os.geteuid(), agents_cgroup=here.rstrip("/") + "-other")
    assert elsewhere.refusal(TOKEN, os.getpid(), os.geteuid()) is None


def test_within_is_by_path_component() -> None:
    assert within("/a/b", "/a") and within("/a", "/a/") and within("/a/b/c", "/a/b")
    assert not within("/ab", "/a") and not within("/", "/a")


def test_a_wrong_token_is_refused_without_saying_it(stranger: int) -> None:
    refused = Fence(TOKEN, stranger, os.geteuid()).refusal("0" * 64, os.getpid(), os.geteuid())
    assert refused is not None and refused.code == ErrorCode.E_CONTROL_FORBIDDEN
    assert TOKEN not in refused.message + (refused.suggestion or "")


def _zombie() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # exits at once; the kernel marks it a zombie then
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rpartition(")")[2].split()[0] == "Z":
                return pid
        time.sleep(0.001)
    raise AssertionError(f"pid {pid} never exited")


def test_the_sweep_reaps_what_nobody_waits_for_and_leaves_the_rest() -> None:
    stray, watched = _zombie(), _zombie()
    orphans.own(watched)
    try:
        assert orphans.sweep() >= 1  # (another test may have left a zombie behind too)
        with pytest.raises(ChildProcessError):
            os.waitpid(stray, os.WNOHANG)
        assert os.waitpid(watched, 0) == (watched, 7 << 8)  # its status was not stolen
    finally:
        orphans.disown(watched)


def test_a_caller_that_is_gone_is_refused(stranger: int) -> None:
    """It sent its request and exited (and was reaped) before the daemon looked: its place in
    the tree is unknown, so it is refused (it passed for a stranger)."""
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    refused = Fence(TOKEN, stranger, os.geteuid()).refusal(TOKEN, gone.pid, os.geteuid())
    assert refused is not None and refused.code == ErrorCode.E_CONTROL_FORBIDDEN
    assert f"pid {gone.pid} is gone" in refused.message


DEEP = """
import os, sys
for depth in range(int(sys.argv[1])):
    if os.fork():  # each parent waits: the chain stays up until stdin closes
        sys.stdin.read()
        os._exit(0)
os.write(1, f"{os.getpid()}\\n".encode())
sys.stdin.read()
"""


def test_a_chain_deeper_than_the_walk_is_unknown() -> None:
    """A caller under the daemon behind more parents than the walk reads (4096 in the daemon)
    must not pass for a stranger: unknown, so the fence refuses it."""
    # -S: no site, so no coverage in the chain (it measured each fork: ~20 s under make test)
    chain = subprocess.Popen([sys.executable, "-S", "-c", DEEP, "12"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert chain.stdout is not None
        deepest = int(chain.stdout.readline())
        assert descends_from(deepest, os.getpid(), limit=10) is None
        assert descends_from(deepest, os.getpid(), limit=20) is True
    finally:
        assert chain.stdin is not None
        chain.stdin.close()
        chain.wait(timeout=30)
        assert chain.stdout is not None
        chain.stdout.close()


@pytest.mark.parametrize(
    ("daemon_in", "agents"),
    [("/svc/orchestrator", "/svc"), ("/orchestrator", None), ("/svc/other", None), (None, None)],
)
def test_the_agents_cgroup_is_the_parent_of_the_daemons_leaf(
    monkeypatch: pytest.MonkeyPatch, daemon_in: str | None, agents: str | None
) -> None:
    """The daemon sits in `<parent>/orchestrator` when agents have cgroups; the root cgroup as
    their parent would fence every process of the machine, so it fences none."""
    monkeypatch.setattr(control_fence, "cgroup_of", lambda pid: daemon_in)
    assert control_fence.agents_cgroup(Path("/sys/fs/cgroup/svc")) == agents
    assert control_fence.agents_cgroup(None) is None


NAMED = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(b"\\xff\\xfe) 1 ("), 0, 0, 0)  # PR_SET_NAME
os.write(1, b"named\\n")
sys.stdin.read()
"""


def test_a_caller_named_with_bytes_that_are_not_utf8_is_still_placed() -> None:
    """A process picks its own command name (any bytes but NUL, `)` and spaces too): the walk
    still reads its parent, so an agent cannot name itself out of the fence's view."""
    named = subprocess.Popen([sys.executable, "-S", "-c", NAMED], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert named.stdout is not None and named.stdout.readline() == b"named\n"
        assert descends_from(named.pid, os.getpid()) is True
        fence = Fence(TOKEN, os.getpid(), os.geteuid())
        refused = fence.refusal(TOKEN, named.pid, os.geteuid())
        assert refused is not None and refused.code is ErrorCode.E_CONTROL_FORBIDDEN
    finally:
        assert named.stdin is not None and named.stdout is not None
        named.stdin.close()
        named.wait(timeout=30)
        named.stdout.close()
