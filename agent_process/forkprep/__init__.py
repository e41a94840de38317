"""The fork server's entry module: what it does before it forks agent children, and `main`.

The daemon starts the fork server with this module (`orchestrator/supervision/forkserver.py`):
`preload` runs
once, before the first fork; `refresh` runs after each reload of the bundle; `main` is what each
forked child runs. A forked child shares the fork server's memory copy-on-write and pays for
every page it writes, so the fork server does ahead, once, what each child would repeat:

1. import the child's code and the model SDKs the bundle uses, and hold the daemon's loaded
   bundle for the launch settings its children get (`agent_process.preload`);
2. `share`: build what children would each build (`shared`);
3. `start`, `turn`: rehearse a child's start and turn on the real code (`rehearsal`), then
   `types`: give every class its attribute-cache version tag (`typetags`);
4. `heap`: take the free blocks of the small-object heap (`heap`), then `malloc`: those of the
   C heap (`mallocfill`), last.

Steps 2-4 run on the Python versions they were measured to help on (`gate`);
`GOONDAN_FORK_WARM=0` turns them all off. None of them opens a socket, starts a thread or an
event loop, or writes a file.
"""

from __future__ import annotations

import contextlib
import importlib

from agent_process import logs
from agent_process import preload as preloaded
from agent_process.child import main
from agent_process.forkprep import (
    gate,
    heap,
    immortal,
    mallocfill,
    rehearsal,
    shared,
    standin,
    typetags,
)
from agent_process.link import libc
from bundles.kinds import Kind
from bundles.model import Bundle
from protocol.launch import LaunchSettings

__all__ = ["main", "preload", "refresh"]

ASYNC_HTTP = "anyio._backends._asyncio"
"""What the SDKs' HTTP stack (httpx, httpcore) imports at a client's first request, not at
import: time of a new child's first model call, and private pages, if left to each child."""
MODELS = {
    "scripted": ("agent_process.models.scripted",),
    "openai": ("agent_process.models.openai_chat", ASYNC_HTTP),
    "anthropic": ("agent_process.models.anthropic_messages", ASYNC_HTTP),
}
"""Model adapter modules per provider: the runtime imports them lazily, a child would import
its own after the fork."""


def preload(bundle: Bundle | None = None, launch: LaunchSettings | None = None) -> None:
    """Once, before the first fork: `bundle` is the daemon's, `launch` its children's."""
    libc()
    logs.configure("json")  # the usual format; a child asking for another redoes it
    providers = {m.spec.provider for m in bundle.of_kind(Kind.MODEL)} if bundle else set(MODELS)
    for provider in sorted(providers):  # only the SDKs the bundle uses: a smaller fork server
        for module in MODELS.get(provider, ()):
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
    if bundle is not None and launch is not None:
        preloaded.remember(bundle, launch)
        prepare(bundle, launch)


def refresh() -> None:
    """After the daemon reloaded the bundle: hold the new one (if a file changed) and prepare
    it as `preload` prepared the first."""
    held = preloaded.refresh()
    if held is not None:
        prepare(held.bundle, held.launch)


def prepare(bundle: Bundle, launch: LaunchSettings) -> None:
    steps = gate.steps()
    if gate.Step.SHARE in steps:
        shared.build(bundle)
    if steps & {gate.Step.START, gate.Step.TURN}:
        turns = gate.Step.TURN in steps
        rehearsal.rehearse(standin.bundle(bundle), launch, turns=turns)
    if gate.Step.TYPES in steps:
        typetags.assign_all()  # after the rehearsal: the classes it made are tagged too
    if gate.Step.IMMORTAL in steps:
        immortal.make_all_immortal()  # the first preparation only: see its module
    if gate.Step.HEAP in steps:
        heap.fill()  # what the steps before freed is taken too
    if gate.Step.MALLOC in steps:
        mallocfill.fill()  # last (`heap.fill` collects garbage); the first preparation only
