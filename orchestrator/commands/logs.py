"""`goondan logs [--agent A] [--instance K] [--trace ID] [--since T] [--follow] [--json]`.

Reads the orchestrator log, the agent process logs and the runtime events of the swarm
(`--swarm`, else every swarm under the state root), merged by time. Files only: it works the
same with or without a running daemon. `--follow` keeps printing lines as they are written.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable

from orchestrator import logview
from orchestrator.client import layout_of
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.endpoints import StateLayout

FOLLOW_INTERVAL = 0.25
"""Seconds between looks at the files when following. A stat/read loop, not inotify: the
stdlib has no inotify binding, a CLI follower can afford four cheap reads a second, and the
loop also sees files that appear later (a new instance) without watching directories."""


class _Logs:
    name = "logs"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--agent", metavar="A", help="only lines of agent A")
        parser.add_argument("--instance", metavar="K", help="only lines of instance key K")
        parser.add_argument("--trace", metavar="ID", help="only lines of trace ID (traceId)")
        parser.add_argument(
            "--since", metavar="T",
            help="only lines since T: a duration back from now (10m, 1h30m, 2d) or an ISO time",
        )  # fmt: skip
        parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
        parser.add_argument(
            "--json", action="store_true",
            help="print each line as JSON (as written, plus `source`) instead of readable text",
        )  # fmt: skip

    def run(self, args: argparse.Namespace) -> int:
        try:
            since = logview.parse_since(args.since, time.time()) if args.since else None
        except ValueError as exc:
            print(f"goondan logs: {exc}", file=sys.stderr)
            return EXIT_USAGE
        keep = logview.Filter(agent=args.agent, instance=args.instance, trace=args.trace,
                              since=since)  # fmt: skip
        layout = layout_of(args)
        problem = _unknown(layout, args.swarm, args.agent)
        if problem is not None:
            print(f"goondan logs: {problem}", file=sys.stderr)
            return EXIT_RUNTIME
        several = args.swarm is None and len(logview.swarm_names(layout)) > 1
        emit = logview.as_json if args.json else functools.partial(logview.render, swarm=several)
        follower = Follower(layout, args.swarm, keep, emit)
        if not follower.refresh() and not args.follow:
            print(f"goondan logs: no logs under {layout.root}", file=sys.stderr)
            return EXIT_OK
        try:
            follower.print_new()
            if args.follow:
                follower.follow()
        except (KeyboardInterrupt, BrokenPipeError):  # Ctrl-C, or `| head` has seen enough
            return EXIT_OK
        return EXIT_OK


def _unknown(layout: StateLayout, swarm: str | None, agent: str | None) -> str | None:
    """Why `--swarm`/`--agent` can match nothing (a typo would otherwise print nothing)."""
    swarms = logview.swarm_names(layout)
    if swarm is not None and swarm not in swarms:
        known = ", ".join(swarms) or "none"
        return f"no swarm named {swarm!r} has logs under {layout.root} (swarms: {known})"
    if agent is None:
        return None
    agents = {s.agent for s in logview.discover(layout, swarm) if s.agent is not None}
    if agent in agents:
        return None
    return f"no agent named {agent!r} has logs (agents: {', '.join(sorted(agents)) or 'none'})"


class Follower:
    """The set of files and how far each has been read."""

    def __init__(
        self,
        layout: StateLayout,
        swarm: str | None,
        keep: logview.Filter,
        emit: Callable[[logview.Record], str],
    ) -> None:
        self.layout = layout
        self.swarm = swarm
        self.keep = keep
        self.emit = emit
        self.readers: dict[str, logview.Reader] = {}

    def refresh(self) -> int:
        """Pick up files that appeared since the last look; return how many are known."""
        for source in logview.discover(self.layout, self.swarm):
            self.readers.setdefault(str(source.path), logview.Reader(source))
        return len(self.readers)

    def print_new(self) -> int:
        batches = [reader.read_new() for reader in self.readers.values()]
        count = 0
        for record in logview.merged(batches):
            if self.keep(record):
                sys.stdout.write(self.emit(record) + "\n")
                count += 1
        sys.stdout.flush()
        return count

    def follow(self) -> None:
        while True:
            time.sleep(FOLLOW_INTERVAL)
            self.refresh()
            self.print_new()


COMMAND = _Logs()
