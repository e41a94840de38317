"""Power cuts of the fault suite's NATS servers: each server's JetStream store is an ext4
filesystem in an image file of its own (tests/chaos/ext4.py), mounted in a private mount
namespace that only the server's process has (`unshare -m`, so nothing is mounted where anyone
else sees it, and the mount goes with the process). A cut shuts that filesystem down without
flushing anything, then the server is SIGKILLed: what its disk holds is what JetStream had
fsynced (`sync_interval: always`). Started again, the image is mounted anew, ext4 replays its
journal as after a reboot and the server recovers its streams from that store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.chaos import ext4

IMAGE_SIZE = 1 << 30
"""Sparse: JetStream reads the free space of its store to size its limits."""
RELEASED_WITHIN = 10.0


def unavailable() -> str | None:
    """Why the servers' stores cannot be power-cut here (None: they can)."""
    return ext4.unavailable()


def image_of(store: Path) -> Path:
    return store.with_name(f"{store.name}.img")


def make_store(store: Path) -> None:
    """An empty filesystem image for `store` and its mount point."""
    store.mkdir(parents=True, exist_ok=True)
    ext4.fresh_image(image_of(store), IMAGE_SIZE)


def mounted(store: Path, command: list[str]) -> list[str]:
    """`command` run with the store's image mounted at `store`, in a mount namespace of its
    own; every step execs the next, so the pid is the server's."""
    script = f'mount -o {ext4.MOUNT_OPTIONS} "$1" "$2" && shift 2 && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "mount-store",
            str(image_of(store)), str(store), *command]  # fmt: skip


def cut(pid: int, store: Path) -> None:
    """Shut down the filesystem process `pid` has mounted at `store` (through its root, in its
    mount namespace)."""
    ext4.shut_down(Path(f"/proc/{pid}/root") / store.relative_to("/"))


async def released(store: Path) -> None:
    """Until the killed server's mount is gone with its namespace (the kernel detaches the
    loop device a moment after the process died): mounting the image a second time before
    would put two filesystems on one disk. Polled, bounded: nothing to await."""
    deadline = time.monotonic() + RELEASED_WITHIN
    while ext4.loop_devices(image_of(store)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{image_of(store)} still attached {RELEASED_WITHIN} s after a kill")
        await asyncio.sleep(0.1)
