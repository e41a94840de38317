"""Run, in the fork server, the side-effect-free steps every agent child repeats at start.

CPython 3.11 counts the first calls of each function in its code object, then rewrites the
bytecode in place (quickening) and specializes each instruction over its next runs. A child
doing that on code shared with the fork server writes to those pages, and each page written
becomes a private copy: a large part of an idle agent's memory. Run here often enough, the
code is already specialized when a child runs it, and stays shared.

Only pure steps are run: option parsing, the state paths, the preloaded bundle's check, the
agent's resource resolution, model client and deferred-call policy, the constructors of the
child's and runtime's objects. Nothing here opens a socket, starts a thread or a loop, or
writes a file.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from pathlib import Path

import structlog

from agent_process import otel, preload, resolve, warm_heap, warm_turn
from agent_process.bridge import Bridge
from agent_process.context import agent_logger
from agent_process.deferred import DeferredCalls, DeferredPolicy, PendingStore, policy_from_bundle
from agent_process.inbox import Inbox, spawn_workdir
from agent_process.models import ModelError, create_model
from agent_process.pipeline import Pipelines
from agent_process.store import ConversationStore
from agent_process.telemetry import EventBus
from bundles import redact
from bundles.kinds import Kind
from bundles.model import Bundle
from protocol.endpoints import InstancePaths, StateLayout
from protocol.events import Source, SourceKind
from protocol.ids import ProcessId, ProcessKind
from protocol.jsonrpc import PendingCall
from protocol.launch import ChildLaunch, LaunchSettings, decode_launch, encode_launch
from protocol.messages import Message

RUNS = 64
"""Total runs, spread over the bundle's agents: enough to quicken and specialize (3.11 quickens
after 8 calls and specializes an instruction within its first runs after that)."""
MODEL_RUNS = 16
"""Runs that also build the model client (an SDK client costs ~1 ms)."""
TURN_RUNS = 16
"""Runs that also run a turn on a stand-in conversation (`warm_turn`)."""
WARM_KEY = "warm"
"""The instance key of the runs; they leave nothing behind under it."""


def child_start(bundle: Bundle, launch: LaunchSettings) -> None:
    agents = [res.name for res in bundle.of_kind(Kind.AGENT)]
    if not agents:
        return
    for i in range(RUNS):
        name = agents[i % len(agents)]
        pid = ProcessId(kind=ProcessKind.AGENT, name=name, instance_key=WARM_KEY, generation=1)
        text = encode_launch(ChildLaunch(process=pid, settings=launch))  # what the spawner sends
        _start_steps(bundle, text, with_model=i < MODEL_RUNS, with_turn=i < TURN_RUNS)
    warm_heap.fill()  # last: what the runs freed is taken too


def _start_steps(bundle: Bundle, text: str, *, with_model: bool, with_turn: bool) -> None:
    """The pure part of `child.main` -> `Child.__init__` -> `runtime_factory` -> `assemble`."""
    opts = decode_launch(text)
    pid = opts.process
    # the keys child.main binds: their ContextVars are created once, here (in a copy of the
    # context, so this process's own log context is untouched)
    contextvars.copy_context().run(
        structlog.contextvars.bind_contextvars,
        process=str(pid), agent=pid.name, instanceKey=pid.instance_key, pid=os.getpid(),
    )  # fmt: skip
    redact.Redactor(bundle.secret_values)
    otel.export_requested()
    settings = opts.settings
    paths = StateLayout.from_env(Path(settings.state_root)).instance_paths(
        settings.swarm, pid.instance_key, pid.name
    )
    _ = (paths.root, paths.inbox_dir, paths.pending_calls_dir, paths.messages_dir)
    _ = (paths.extensions_dir, paths.runtime_events_jsonl, paths.workdir)
    bridge, source = _objects(opts, paths)
    if with_turn:
        warm_turn.turn(str(pid), source, paths.inbox_dir, bridge)
    held = preload.take(settings.bundle, settings.env_files, settings.state_root) or bundle
    agent_logger(pid.name, pid.instance_key)
    policy_from_bundle(held, settings.swarm)
    try:
        agent = resolve.agent(held, pid.name)
        resolve.tools(held, agent)
        resolve.extensions(held, agent)
        model = resolve.model(held, agent)
        api_key = resolve.api_key(held, model, Path(settings.state_root))
        if with_model:
            create_model(model, api_key=api_key)
        resolve.system_prompt(held, agent)
        resolve.swarm_policy(held, settings.swarm)
    except (resolve.ConfigProblem, ModelError):
        return  # the child reports it (start_error) when it starts


def _objects(opts: ChildLaunch, paths: InstancePaths) -> tuple[Bridge, Source]:
    """The objects `Child.__init__` and `assemble` build, by constructors that neither read
    nor write files (the inbox check and spawn.json only look)."""
    pid = opts.process
    source = Source(kind=SourceKind(pid.kind), name=pid.name, instance_key=pid.instance_key)
    bridge = Bridge(_no_send)
    bridge.bind(str(pid), str(pid.address), source)
    _ = pid.encode()
    _primitives()
    Inbox(paths.inbox_dir).has_replies()
    DeferredCalls(PendingStore(paths.pending_calls_dir), DeferredPolicy(), _no_submit)
    spawn_workdir(paths.root)
    Pipelines()
    EventBus(paths.runtime_events_jsonl, agent=pid.name, instance_key=pid.instance_key)
    ConversationStore(paths.messages_dir)
    return bridge, source


def _primitives() -> None:
    """The child's asyncio Queue (its events), Lock (the runtime's turn lock) and Event (the
    drain), on the paths that never wait: their code (pure Python in 3.11) is run here."""
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    lock, event = asyncio.Lock(), asyncio.Event()
    for item in (1, None):
        queue.put_nowait(item)
        _ = (queue.empty(), queue.qsize())
        warm_turn.drive(queue.get())
    warm_turn.drive(_locked(lock))
    warm_turn.drive(lock.acquire())
    lock.release()
    event.set()
    warm_turn.drive(event.wait())
    event.is_set()
    event.clear()


async def _locked(lock: asyncio.Lock) -> None:
    async with lock:
        pass


async def _no_send(msg: Message) -> None:
    return None


async def _no_submit(call: PendingCall) -> None:
    return None
