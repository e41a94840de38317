"""End-of-run checks: events processed, no orphans or zombies, conversations that replay."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable
from pathlib import Path

import psutil

from agent_process.store import ConversationStore
from protocol.endpoints import StateLayout
from tests.chaos.load import Books
from tests.integration.harness import Daemon


def worker_inputs(swarm: str, key: str) -> set[str]:
    path = StateLayout.from_env().instance_paths(swarm, key, "worker").base_jsonl
    texts: set[str] = set()
    for base in (path, path.with_name("events.jsonl")):
        if base.exists():
            texts.update(_contents(base.read_bytes().splitlines()))
    return texts


def _contents(lines: Iterable[bytes]) -> Iterable[str]:
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a torn last event line: the replay check judges it
        msg = doc.get("message", doc)  # events.jsonl wraps the message
        if isinstance(msg, dict) and isinstance(msg.get("content"), str):
            yield msg["content"]


def unprocessed(daemon: Daemon, swarm: str, books: Books) -> dict[str, str]:
    """Accepted events neither in their worker's conversation nor reported failed."""
    failed = {str(line.get("event_id")) for line in daemon.find("event_dropped")}
    by_key: dict[str, set[str]] = {}
    missing = {}
    for event_id, (key, text) in books.accepted.items():
        if event_id in failed:
            continue
        if key not in by_key:
            by_key[key] = worker_inputs(swarm, key)
        if text not in by_key[key]:
            missing[event_id] = f"{text} @ {key}"
    return missing


def survivors(procs: Iterable[psutil.Process], state_root: Path) -> list[str]:
    """Processes of the run still there (zombies included), plus any other process that
    names the test's state root: in its environment, its command line, its working directory
    or a file it holds open. The environment alone is not enough: a process title overwrites
    the environment block /proc shows (orchestrator/supervision/proctitle.py), and daemon processes
    hold
    their log files under the state root open."""
    left = []
    for proc in procs:
        try:
            if proc.is_running():  # pid + create time: a reused pid is not ours
                left.append(f"{proc.pid} {proc.status()} {proc.cmdline()[:4]}")
        except psutil.NoSuchProcess:
            pass
    root = str(state_root)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            named = _names_root(proc, root)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if named:
            left.append(f"{proc.pid} {proc.info['cmdline'][:4]} (names the state root)")
    return sorted(set(left))


def _names_root(proc: psutil.Process, root: str) -> bool:
    if proc.environ().get("GOONDAN_STATE_ROOT") == root:
        return True
    if root in " ".join(proc.info["cmdline"] or []):
        return True
    inside = root + os.sep
    if proc.cwd() == root or proc.cwd().startswith(inside):
        return True
    return any(f.path.startswith(inside) for f in proc.open_files())


async def wait_gone(procs: list[psutil.Process], state_root: Path, limit: float) -> list[str]:
    """`survivors` once none is left, or what is still there after `limit` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while True:
        left = await asyncio.to_thread(survivors, procs, state_root)
        if not left or loop.time() > deadline:
            return left
        await asyncio.sleep(0.1)  # exits of processes we do not parent: poll


def conversation_faults(swarm: str) -> list[str]:
    """Each instance's base.jsonl parses line by line, its ids are unique, and the store
    replays base + events to a list with unique ids."""
    faults = []
    root = StateLayout.from_env().swarm_instances_dir(swarm)
    bases = sorted(root.rglob("base.jsonl"))
    for base in bases:
        ids = []
        for n, line in enumerate(base.read_bytes().splitlines(), 1):
            try:
                ids.append(json.loads(line)["id"])
            except (ValueError, KeyError):
                faults.append(f"{base}: line {n} does not parse (half-folded base)")
        if len(ids) != len(set(ids)):
            faults.append(f"{base}: duplicated message ids in base")
        store = ConversationStore(base.parent)
        store.open()
        replayed = [m.id for m in store.messages]
        store.close()
        if len(replayed) != len(set(replayed)):
            faults.append(f"{base.parent}: duplicated message ids after replay")
    if not bases:
        faults.append(f"no conversation under {root}")
    return faults
