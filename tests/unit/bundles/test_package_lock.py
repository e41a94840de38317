"""goondan.lock: written and read back the same, stable and sorted; hostile files (garbage,
wrong types, too large, too many packages) are coded LockErrors; differences name each package."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundles.packages import lock
from bundles.packages.lock import Locked, LockError
from protocol.errors import ErrorCode

A = Locked("acme-github", "1.4.0", "sha256:" + "a" * 64)
B = Locked("goondan", "0.1.0", "sha256:" + "b" * 64)


def test_write_then_read_is_the_same_and_stable(tmp_path: Path) -> None:
    path = tmp_path / lock.LOCK_FILE
    lock.write(path, {"@goondan/base": B, "@acme/github": A})
    first = path.read_text()
    assert first.startswith("# goondan.lock: generated")
    assert first.index('"@acme/github"') < first.index('"@goondan/base"')
    assert lock.read(path) == {"@goondan/base": B, "@acme/github": A}
    lock.write(path, {"@acme/github": A, "@goondan/base": B})
    assert path.read_text() == first
    assert [p.name for p in tmp_path.iterdir()] == [lock.LOCK_FILE]  # no temporary file left


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("[packages", ErrorCode.E_LOCK_INVALID),
        ("packages = 3", ErrorCode.E_LOCK_INVALID),
        (
            '[packages."@a/b"]\ndistribution = "a-b"\nversion = 1\nhash = "h"',
            ErrorCode.E_LOCK_INVALID,
        ),
        ('[packages."@a/b"]\ndistribution = "a-b"', ErrorCode.E_LOCK_INVALID),
        ('packages = {"@a/b" = "x"}', ErrorCode.E_LOCK_INVALID),
        ("# " + "x" * (lock.MAX_LOCK_BYTES + 1), ErrorCode.E_LOCK_INVALID),
    ],
)
def test_a_hostile_lock_is_a_coded_error(tmp_path: Path, text: str, code: ErrorCode) -> None:
    path = tmp_path / lock.LOCK_FILE
    path.write_text(text)
    with pytest.raises(LockError) as info:
        lock.read(path)
    assert info.value.code is code


def test_not_utf8_and_missing(tmp_path: Path) -> None:
    path = tmp_path / lock.LOCK_FILE
    path.write_bytes(b"\xff\xfe[")
    with pytest.raises(LockError) as info:
        lock.read(path)
    assert info.value.code is ErrorCode.E_LOCK_INVALID
    with pytest.raises(LockError) as info:
        lock.read(tmp_path / "absent.lock")
    assert info.value.code is ErrorCode.E_LOCK_MISSING


def test_too_many_packages(tmp_path: Path) -> None:
    path = tmp_path / lock.LOCK_FILE
    lock.write(path, {f"p{i}": A for i in range(lock.MAX_PACKAGES + 1)})
    with pytest.raises(LockError) as info:
        lock.read(path)
    assert info.value.code is ErrorCode.E_LOCK_INVALID


def test_differences_name_each_package() -> None:
    changed = Locked("acme-github", "1.4.0", "sha256:" + "c" * 64)
    newer = Locked("acme-github", "1.5.0", A.hash)
    assert lock.differences({"x": A}, {"x": A}) == []
    assert lock.differences({"x": A}, {"x": changed}) == [
        f"x: acme-github 1.4.0's files changed (locked {A.hash[:19]}, "
        f"installed {changed.hash[:19]})"
    ]
    assert lock.differences({"x": A}, {"x": newer}) == [
        "x: locked acme-github 1.4.0, installed acme-github 1.5.0"
    ]
    assert lock.differences({"x": A}, {"y": B}) == [
        "x: locked acme-github 1.4.0, no longer used",
        "y: not in the lock, goondan 0.1.0 is used",
    ]


def test_tree_hash_follows_content_not_caches(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "t.py").write_text("x = 1\n")
    first = lock.tree_hash(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "t.cpython-311.pyc").write_bytes(b"\0")
    assert lock.tree_hash(tmp_path) == first
    (tmp_path / "tools" / "t.py").write_text("x = 2\n")
    assert lock.tree_hash(tmp_path) != first
    (tmp_path / "tools" / "t.py").write_text("x = 1\n")
    (tmp_path / "tools" / "t.py").rename(tmp_path / "tools" / "u.py")
    assert lock.tree_hash(tmp_path) != first  # a renamed file changes the hash too
