"""Cut the power under the ingress journal: what the disk keeps is all that survives.

    unshare -m --propagation private python -m tests.chaos.powercut serve WORKDIR

runs in a mount namespace of its own (nothing is mounted where anyone else can see it, and
the mounts go away with the namespace): it says whether it can cut the power here (one line,
`{"ready": true}` or why not), then runs one experiment per plan it reads on stdin (a JSON
line) and answers each with a JSON report line. An experiment, on a fresh ext4 image:

1. mount it through a loop device (`commit=600`: the filesystem commits its own journal only
   when something asks it to, so nothing unsynced is made durable by a timer);
2. start a writer process (`python -m tests.chaos.powercut write PATH PLAN_JSON`) that drives a
   real `SqliteJournal`, exactly as the daemon opens it, on `<mnt>/state/journal/...`, with
   concurrent appends (group commits), idempotency keys and their repeats, claims,
   completions and reopenings, and prints each operation once it has returned;
3. once the plan's part of its operations was acknowledged (and after a random delay, to land
   inside the next commits) cut the power: `FS_IOC_SHUTDOWN` with `FS_GOING_FLAGS_NOLOGFLUSH`,
   the xfstests "godown" used to test filesystems for power failure. From that instant the
   filesystem writes nothing more to its device: neither its own journal nor any dirty page
   of the page cache (writeback fails), so what the device holds is exactly what had been
   written to it before: every fsync'd write and whatever writeback happened to flush,
   nothing else. Then the writer is SIGKILLed (everything dies with the power);
4. unmount, mount again (ext4 replays its journal as after a reboot), open the journal as the
   next daemon would and check every acknowledged operation against it.

Why this is power loss and not a process kill: after a SIGKILL the page cache survives and
the kernel writes it out later, so a journal that never fsyncs passes every kill test (see
test_power_loss.py, which shows it). Here the page cache is lost with the power.

With real power nothing returns once the power is gone, so an operation counts as
acknowledged only if it returned before the cut began (each line carries the moment it
returned; the clock is the same in every process). Those that return while the shutdown is
under way are looked up apart (`racing`, `racing_lost`) and not held to it: ext4 can answer an
fsync that races its own shutdown with success (as we read fs/ext4 and jbd2: the shutdown
flag is checked when the fsync starts, and the wait for its journal commit returns at once
when the shutdown's abort has already ended that transaction without a commit record), so
such a write may be told durable and not be. That happens here, rarely, to appends that
returned a few milliseconds into the shutdown; an append that returned before the cut began
has never been missing.

What it does not model: a disk that reorders or tears writes inside its own volatile cache
despite flush requests (the loop device passes flushes down as fsyncs of the image file);
SQLite's WAL checksums are its own answer to that.

A report: how many operations were acknowledged before the cut, those lost, any other fault,
and how many returned during the cut (and of those, how many are missing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.ingress.journal import EntryState, JournalEntry, JournalError
from orchestrator.ingress.journal.sqlite import SqliteJournal, _connect
from protocol.events import AgentEvent, Source, SourceKind, new_event
from tests.chaos.ext4 import fresh_image, mount, shut_down, umount

JOURNAL = Path("state") / "journal" / "chaos" / "ingress.sqlite3"
IMAGE_SIZE = 64 << 20
TARGET = "agent:worker:k0"
SOURCE = Source(kind=SourceKind.CLI, name="powercut")

Ack = list[Any]
"""A writer's line: ["append", id, key, size] | ["dup", first id, key] | ["claim", id] |
["complete", id] | ["reopen"] | ["end"] (and ["not a dup", id, key], a fault), each ending
with the moment it returned (`time.monotonic()`, the same clock in every process)."""


def event(n: int, size: int) -> AgentEvent:
    text = f"{n}:" + "x" * size
    return new_event(type="user.message", input=text, instance_key="k0", source=SOURCE)


# -- the writer ------------------------------------------------------------------------------


async def open_journal(path: Path, plan: dict[str, Any]) -> SqliteJournal:
    """The daemon's own `SqliteJournal.open`, unless the plan turns a knob: checkpoints every
    few pages (when a long-lived journal checkpoints, sooner), or no fsync at all (the
    sabotage that shows the cut has teeth)."""
    if plan["checkpoint"] is None and not plan["nosync"]:
        return await SqliteJournal.open(path)
    conn = await asyncio.to_thread(_connect, path)
    if plan["checkpoint"] is not None:
        conn.execute(f"PRAGMA wal_autocheckpoint={int(plan['checkpoint'])}")
    if plan["nosync"]:
        conn.execute("PRAGMA synchronous=OFF")
    return SqliteJournal(conn, path)


def say(ack: Ack) -> None:
    os.write(1, json.dumps([*ack, time.monotonic()]).encode() + b"\n")


async def write(path: Path, plan: dict[str, Any]) -> None:
    """The plan's operations, in windows of `concurrency` at once (group commits)."""
    with contextlib.suppress(JournalError):  # the power went: it acknowledges nothing more
        await write_all(path, plan)
        say(["end"])
    await asyncio.Event().wait()  # until the power goes


async def write_all(path: Path, plan: dict[str, Any]) -> None:
    journal = await open_journal(path, plan)
    appended: list[str] = []
    keys: list[str] = []
    ops: list[str] = plan["ops"]
    width = plan["concurrency"]
    for start in range(0, len(ops), width):
        window = ops[start : start + width]
        if "reopen" in window:
            await journal.close()
            journal = await open_journal(path, plan)
            say(["reopen"])
            continue
        done = list(appended)
        calls = [one(journal, op, start + i, plan["size"], done, keys)
                 for i, op in enumerate(window)]  # fmt: skip
        for ack in await asyncio.gather(*calls):
            if ack is not None and ack[0] == "append":
                appended.append(ack[1])
                if ack[2] is not None:
                    keys.append(ack[2])


async def one(
    journal: SqliteJournal, op: str, n: int, size: int, done: list[str], keys: list[str]
) -> Ack | None:
    """One operation; its acknowledgement is printed the moment it returned."""
    ack: Ack | None = None
    if op in ("append", "keyed") or (op == "repeat" and not keys):
        key = f"key-{n}" if op == "keyed" else None
        e = event(n, size)
        result = await journal.append(e, TARGET, key)
        ack = ["append", e.id, key, len(e.input)]
        if result.duplicate:
            ack = ["dup", result.entry.event.id, key]
    elif op == "repeat":
        key = keys[n % len(keys)]
        result = await journal.append(event(n, size), TARGET, key)
        ack = ["dup" if result.duplicate else "not a dup", result.entry.event.id, key]
    elif done and op in ("claim", "complete"):
        target = done[n % len(done)]
        if op == "claim":
            await journal.claim(target)
        else:
            await journal.complete(target, event(n, 8))
        ack = [op, target]
    if ack is not None:
        say(ack)
    return ack


# -- the experiment --------------------------------------------------------------------------


def cut(mnt: Path, plan: dict[str, Any]) -> tuple[list[Ack], float]:
    """Run the writer, cut the power after the plan's acknowledgements: (all it
    acknowledged, the moment the cut began; infinity without one)."""
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.powercut", "write", str(mnt / JOURNAL),
         json.dumps(plan)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert writer.stdout is not None
    acks: list[Ack] = []
    began = math.inf
    try:
        while len(acks) < plan["cut_at"] * len(plan["ops"]):
            line = writer.stdout.readline()
            if not line or json.loads(line)[0] == "end":
                break
            acks.append(json.loads(line))
        time.sleep(plan["delay_ms"] / 1000)  # the cut lands somewhere in the next commits
        if plan["power"]:
            began = time.monotonic()
            shut_down(mnt)
    finally:
        writer.send_signal(signal.SIGKILL)
        rest = writer.communicate()[0]
    acks += [json.loads(line) for line in rest.splitlines() if json.loads(line)[0] != "end"]
    return acks, began


async def check(path: Path, acks: list[Ack], began: float) -> dict[str, Any]:
    """What the journal the next daemon opens says about each operation acknowledged before
    the cut began (and, apart, about those that returned while it was under way)."""
    try:
        journal = await SqliteJournal.open(path)
    except JournalError as exc:
        return {"acked": len(acks), "error": f"{exc.code}: {exc.message}"}
    before = [ack for ack in acks if ack[-1] < began]
    racing = [ack for ack in acks if ack[-1] >= began and ack[0] != "reopen"]
    try:
        racing_lost = sum([await journal.lookup(ack[1]) is None for ack in racing])
        lost, wrong = await judge(journal, before)
    finally:
        await journal.close()
    return {"acked": len(before), "lost": lost, "wrong": wrong, "racing": len(racing),
            "racing_lost": racing_lost}  # fmt: skip


async def judge(journal: SqliteJournal, acks: list[Ack]) -> tuple[list[Ack], list[Ack]]:
    """(the acknowledged operations the journal lost, those it holds wrongly)."""
    lost: list[Ack] = []
    wrong: list[Ack] = []
    firsts: dict[str, str] = {}
    for ack in acks:
        if ack[0] == "reopen":
            continue
        entry = await journal.lookup(ack[1])
        if entry is None:
            lost.append(ack)
            continue
        if ack[0] in ("append", "dup") and ack[2] is not None:
            firsts.setdefault(ack[2], ack[1])
        if not holds(ack, entry):
            wrong.append([*ack, entry.state, len(entry.event.input)])
    for key, first in firsts.items():  # a retry after the reboot is still the first event
        again = await journal.append(event(-1, 1), TARGET, key)
        if not again.duplicate or again.entry.event.id != first:
            wrong.append(["key", key, first, again.entry.event.id])
    return lost, wrong


def holds(ack: Ack, entry: JournalEntry) -> bool:
    """Whether the recovered `entry` is what the acknowledged operation left."""
    match ack[0]:
        case "append":
            return len(entry.event.input) == ack[3]  # the whole event, not a torn one
        case "dup":
            return True
        case "claim":
            return entry.state >= EntryState.CLAIMED
        case "complete":
            return entry.state is EntryState.COMPLETED and entry.reply is not None
    return False  # "not a dup": a key acknowledged before started another event


def experiment(workdir: Path, plan: dict[str, Any]) -> dict[str, Any]:
    image = fresh_image(workdir / "disk.img", IMAGE_SIZE)
    with tempfile.TemporaryDirectory(prefix="powercut-", dir=workdir) as where:
        mnt = Path(where)
        mount(image, mnt, plan["mode"])
        try:
            acks, began = cut(mnt, plan)
        finally:
            umount(mnt)
        mount(image, mnt, plan["mode"])  # the reboot: ext4 replays what its journal holds
        try:
            return asyncio.run(check(mnt / JOURNAL, acks, began))
        finally:
            umount(mnt)


def probe(workdir: Path) -> str | None:
    """Why the power cannot be cut here (None: it can)."""
    try:
        image = fresh_image(workdir / "disk.img", IMAGE_SIZE)
        with tempfile.TemporaryDirectory(prefix="probe-", dir=workdir) as where:
            mount(image, Path(where), "ordered")
            try:
                shut_down(Path(where))
            finally:
                umount(Path(where))
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"cannot mount an ext4 image and shut it down: {exc}"
    return None


def serve(workdir: Path) -> None:
    why = probe(workdir)
    print(json.dumps({"ready": why is None, "why": why}), flush=True)
    for line in sys.stdin if why is None else ():
        print(json.dumps(experiment(workdir, json.loads(line))), flush=True)


def main(argv: list[str]) -> None:
    match argv:
        case ["write", path, plan]:
            asyncio.run(write(Path(path), json.loads(plan)))
        case ["serve", workdir]:
            serve(Path(workdir))
        case _:
            sys.exit("usage: python -m tests.chaos.powercut serve WORKDIR | write PATH PLAN")


if __name__ == "__main__":
    main(sys.argv[1:])
