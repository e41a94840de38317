"""`python -m agent_process.check BUNDLE [--env-file F]... [--swarm S]`: import every entry the
swarm uses and check it against what the bundle declares, the way an agent process would.

A Tool's entry must export `handlers` (or one Toolset) with a handler for each export, an
Extension's must define `register(api, config)`, a Connector's `run(ctx)`. Nothing is run:
no `register`, no handler, no connector. `goondan validate --deep`, `doctor` and `run` start this
in a throwaway process (an entry's import may hang, crash or change the process) and read the
JSON list of diagnostics it prints on stdout. Exit 0 when it could check, 2 when the bundle
itself does not load.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agent_process.loading import EntryLoadError, load_entry
from agent_process.registry import ToolRegistryError
from agent_process.tool_loader import load_tool_resource
from bundles import refs
from bundles.diagnostics import BundleError, Diagnostic
from bundles.kinds import ConnectionSpec, ExtensionSpec, Kind, ToolSpec
from bundles.loader import load_bundle
from bundles.model import Bundle, Resource
from protocol.endpoints import default_state_root
from protocol.errors import ErrorCode


def _used(
    bundle: Bundle, swarm: str | None
) -> tuple[list[Resource[Any]], list[Resource[ConnectionSpec]]]:
    """(the Tools and Extensions of the swarm's agents, the bundle's Connections)."""
    used: dict[str, Resource[Any]] = {}
    for agent in refs.swarm_agents(bundle, bundle.swarm(swarm)):
        resources: list[Resource[Any]] = [*refs.resolve_tools(bundle, agent)]
        resources += refs.resolve_extensions(bundle, agent)
        for resource in resources:
            used.setdefault(resource.key, resource)
    return list(used.values()), bundle.connections()


def _tool(resource: Resource[ToolSpec]) -> Diagnostic | None:
    try:
        load_tool_resource(resource)
    except ToolRegistryError as exc:
        return Diagnostic(exc.code, str(exc), str(resource.location),
                          "fix the entry file or the Tool's spec.exports")  # fmt: skip
    return None


def _extension(resource: Resource[ExtensionSpec]) -> Diagnostic | None:
    entry = resource.spec.entry
    if entry is None:
        return None  # MCP-only extensions have nothing to import
    where = str(resource.location)
    try:
        module = load_entry(entry, resource.root)
    except EntryLoadError as exc:
        return Diagnostic(ErrorCode.E_EXT_LOAD, f"Extension/{resource.name}: {exc}", where,
                          "fix the entry file")  # fmt: skip
    if not callable(getattr(module, "register", None)):
        return Diagnostic(ErrorCode.E_EXT_LOAD, f"Extension/{resource.name}: entry {entry!r} "
                          "does not define register(api, config)", where,
                          "add `def register(api, config): ...` (or async def)")  # fmt: skip
    return None


def _connector(bundle: Bundle, connection: Resource[ConnectionSpec]) -> Diagnostic | None:
    connector = refs.connection_connector(bundle, connection)
    where, what = str(connector.location), f"Connector/{connector.name}"
    try:
        module = load_entry(connector.spec.entry, connector.root)
    except EntryLoadError as exc:
        return Diagnostic(ErrorCode.E_CONNECTOR_START_FAILED, f"{what}: {exc}", where,
                          "fix the entry file")  # fmt: skip
    if not callable(getattr(module, "run", None)):
        return Diagnostic(ErrorCode.E_CONNECTOR_START_FAILED, f"{what}: entry "
                          f"{connector.spec.entry!r} exports no run(ctx)", where,
                          "define `async def run(ctx)` in the connector's entry file")  # fmt: skip
    return None


PROGRESS = "importing "
"""Each import is announced on stderr first: an entry that kills its process (os._exit at
import) is then named by the last line the parent read."""


def _announce(what: str, where: object) -> None:
    sys.stderr.write(f"{PROGRESS}{what} ({where})\n")
    sys.stderr.flush()


def check_entries(bundle: Bundle, swarm: str | None) -> Iterator[Diagnostic]:
    resources, connections = _used(bundle, swarm)
    for resource in resources:
        _announce(f"{resource.kind}/{resource.name}", resource.location)
        problem = _tool(resource) if resource.kind is Kind.TOOL else _extension(resource)
        if problem is not None:
            yield problem
    for connection in connections:
        _announce(f"Connection/{connection.name}", connection.location)
        problem = _connector(bundle, connection)
        if problem is not None:
            yield problem


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent_process.check")
    parser.add_argument("bundle")
    parser.add_argument("--env-file", action="append", default=[])
    parser.add_argument("--swarm")
    parser.add_argument("--state-root")
    args = parser.parse_args(argv)
    state_root = Path(args.state_root) if args.state_root else default_state_root()
    try:
        bundle = load_bundle(args.bundle, env_files=[Path(f) for f in args.env_file],
                             state_root=state_root)  # fmt: skip
    except BundleError as exc:
        sys.stdout.write(json.dumps([d.to_dict() for d in exc.diagnostics]) + "\n")
        return 2
    found = [d.to_dict() for d in check_entries(bundle, args.swarm)]
    sys.stdout.write(json.dumps(found) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
