"""State files are 0600 and state directories 0700 whatever the umask, without touching it.

Each case runs in a fresh interpreter started with umask 000 (the loosest a user may have), so
the test neither depends on nor changes this process's umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.private import private_dir

REPO = Path(__file__).resolve().parents[3]


def _run_with_umask_0(code: str, tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        check=True, umask=0, cwd=REPO, timeout=60,
    )  # fmt: skip


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_private_dir_makes_every_missing_level_0700(tmp_path: Path) -> None:
    _run_with_umask_0(
        "import sys, pathlib; from protocol.private import private_dir; "
        "private_dir(pathlib.Path(sys.argv[1]) / 'a' / 'b' / 'c')",
        tmp_path,
    )
    for level in ("a", "a/b", "a/b/c"):
        assert _mode(tmp_path / level) == 0o700, level


def test_write_atomic_and_open_private_make_0600_files(tmp_path: Path) -> None:
    _run_with_umask_0(
        "import os, sys, pathlib; from protocol.durable import write_atomic; "
        "from protocol.private import open_private; root = pathlib.Path(sys.argv[1]); "
        "write_atomic(root / 'x' / 'base.jsonl', b'{}'); "
        "os.close(open_private(root / 'events.jsonl', os.O_WRONLY | os.O_APPEND))",
        tmp_path,
    )
    assert _mode(tmp_path / "x") == 0o700
    assert _mode(tmp_path / "x" / "base.jsonl") == 0o600
    assert _mode(tmp_path / "events.jsonl") == 0o600


def test_open_private_tightens_a_loose_existing_file(tmp_path: Path) -> None:
    loose = tmp_path / "old.log"
    loose.write_text("kept\n")
    loose.chmod(0o644)
    _run_with_umask_0(
        "import os, sys, pathlib; from protocol.private import open_private; "
        "os.close(open_private(pathlib.Path(sys.argv[1]) / 'old.log', os.O_WRONLY | os.O_APPEND))",
        tmp_path,
    )
    assert _mode(loose) == 0o600 and loose.read_text() == "kept\n"


def test_private_dir_takes_a_str_and_makes_its_missing_levels_0700(tmp_path: Path) -> None:
    _run_with_umask_0(
        "import sys; from protocol.private import private_dir; "
        "assert private_dir(sys.argv[1] + '/s/t') == sys.argv[1] + '/s/t'",
        tmp_path,
    )
    for level in ("s", "s/t"):
        assert _mode(tmp_path / level) == 0o700, level


def test_private_dir_leaves_what_exists_as_it_is(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    private_dir(loose)
    private_dir(loose / "inner")
    assert _mode(loose) == 0o755  # `goondan doctor` reports it; nothing tightens it behind us
    assert _mode(loose / "inner") == 0o700


def test_private_dir_does_not_chmod_through_a_planted_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o755)
    planted = tmp_path / "state" / "messages"
    planted.parent.mkdir()
    planted.symlink_to(outside)
    assert private_dir(planted) == planted
    assert _mode(outside) == 0o755 and planted.is_symlink()


def test_private_dir_under_a_file_raises_instead_of_looping(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        private_dir(tmp_path / "file" / "sub")


def test_private_dir_of_a_relative_path_in_a_removed_cwd_raises(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (
        "import os, sys; from protocol.private import private_dir; os.chdir(sys.argv[1]); "
        "os.rmdir(sys.argv[1]);\n"
        "try:\n    private_dir('a/b')\nexcept FileNotFoundError:\n    sys.exit(0)\nsys.exit(1)"
    )
    subprocess.run([sys.executable, "-c", code, str(gone)], check=True, cwd=REPO, timeout=60)
