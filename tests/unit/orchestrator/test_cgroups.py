"""The daemon's side of per-agent cgroups: `prepare` on a stand-in cgroup tree (the files the
kernel would offer), and an agent's cgroup made, joined and removed on a real cgroup v2
directory where this machine has a writable one."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_process import limits
from bundles.limits import Limits
from orchestrator.supervision import cgroups
from protocol.launch import agent_cgroup

PID = 4242


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A delegated cgroup holding only the daemon, with memory, pids and cpu available."""
    for name, text in {
        "cgroup.procs": f"{PID}\n",
        "cgroup.controllers": "cpuset cpu io memory pids\n",
        "cgroup.subtree_control": "",
        "cgroup.kill": "",
    }.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(cgroups, "delegated", lambda _d: True)
    return tmp_path


def test_prepare_moves_the_daemon_into_a_leaf_and_enables_controllers(tree: Path) -> None:
    assert cgroups.prepare(tree, PID) == tree
    assert (tree / cgroups.LEAF / "cgroup.procs").read_text() == str(PID)
    assert (tree / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"


def test_a_cgroup_shared_with_another_process_is_left_alone(tree: Path) -> None:
    (tree / "cgroup.procs").write_text(f"{PID}\n777\n")
    assert cgroups.prepare(tree, PID) is None
    assert not (tree / cgroups.LEAF).exists()
    assert (tree / "cgroup.subtree_control").read_text() == ""


def test_a_cgroup_not_delegated_is_left_alone(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "delegated", lambda _d: False)
    assert cgroups.prepare(tree, PID) is None
    assert not (tree / cgroups.LEAF).exists()


def test_delegation_needs_the_marker_or_ownership(tmp_path: Path) -> None:
    for name in ("cgroup.procs", "cgroup.subtree_control", "cgroup.kill"):
        (tmp_path / name).write_text("")
    assert cgroups.delegated(tmp_path) is (os.geteuid() != 0)  # a non-root owner: delegated
    if os.geteuid() == 0:
        os.setxattr(tmp_path, "trusted.delegate", b"1")
        assert cgroups.delegated(tmp_path)
    (tmp_path / "cgroup.kill").unlink()  # Linux < 5.14
    assert not cgroups.delegated(tmp_path)


@pytest.fixture
def real_parent() -> Iterator[Path]:
    """A cgroup v2 directory of our own, where this machine lets us make one."""
    own = cgroups.own_cgroup()
    if own is None or not os.access(own, os.W_OK):
        pytest.skip("no writable cgroup v2 directory here")
    parent = own / f"goondan-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        parent.mkdir()
    except OSError:
        pytest.skip("cannot make a cgroup here")
    if not (parent / "cgroup.kill").exists():
        parent.rmdir()
        pytest.skip("no cgroup.kill (Linux < 5.14)")
    yield parent
    parent.rmdir()


def test_an_agent_joins_its_cgroup_and_it_is_removed_after_its_exit(real_parent: Path) -> None:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the agent stand-in
        os.close(read_fd)
        joined = limits.apply(Limits(), str(real_parent))
        os.write(write_fd, str(joined).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        joined = pipe.read().decode()
    path = Path(agent_cgroup(str(real_parent), pid))
    assert joined == str(path)
    (path / "goondan-call-left").mkdir()  # a per-call cgroup a dead agent left behind
    os.waitpid(pid, 0)
    cgroups.remove(real_parent, pid)
    assert not path.exists()
