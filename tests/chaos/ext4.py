"""Power cuts on an ext4 filesystem in an image file, shared by the journal's power-loss test
(tests/chaos/powercut.py, which says why this is power loss and not a process kill) and the
cluster fault suite's NATS servers (tests/faults/power.py).

A filesystem is mounted through a loop device with `commit=600` (it commits its own journal
only when something asks it to, so nothing unsynced is made durable by a timer). `shut_down`
is `FS_IOC_SHUTDOWN` with `FS_GOING_FLAGS_NOLOGFLUSH`, the xfstests "godown": from that instant
the filesystem writes nothing more to its device, neither its journal nor a dirty page, so what
the image holds is what an fsync had put there (and whatever writeback happened to flush).
Mounted again, ext4 replays its journal as after a reboot."""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32): ext4, xfs, f2fs
FS_GOING_FLAGS_NOLOGFLUSH = 2
TOOLS = ("unshare", "mount", "umount", "mkfs.ext4", "losetup")
MOUNT_OPTIONS = "loop,commit=600"


def unavailable() -> str | None:
    """Why power cannot be cut here (None: it can, as far as the tools go)."""
    if sys.platform != "linux":
        return "Linux only (ext4, loop devices, mount namespaces)"
    if os.geteuid() != 0:
        return "needs root: a loop mount in a mount namespace of its own"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    return f"missing {', '.join(missing)}" if missing else None


def fresh_image(image: Path, size: int) -> Path:
    """An empty ext4 filesystem in the (sparse) file `image`."""
    image.unlink(missing_ok=True)
    with image.open("wb") as f:
        f.truncate(size)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    return image


def mount(image: Path, at: Path, mode: str = "ordered") -> None:
    subprocess.run(["mount", "-o", f"{MOUNT_OPTIONS},data={mode}", str(image), str(at)],
                   check=True)  # fmt: skip


def umount(at: Path) -> None:
    subprocess.run(["umount", str(at)], check=True)


def shut_down(mountpoint: Path) -> None:
    """Cut the power under the filesystem mounted at `mountpoint` (a path through
    /proc/PID/root reaches one mounted in another process's mount namespace)."""
    fd = os.open(mountpoint, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", FS_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


def loop_devices(image: Path) -> list[str]:
    """The loop devices backed by `image` (one still there: a mount not yet gone)."""
    out = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True,
                         check=True, timeout=10).stdout  # fmt: skip
    return [line.split(":", 1)[0] for line in out.splitlines() if line.strip()]
