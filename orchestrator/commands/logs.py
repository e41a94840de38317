"""`goondan logs [--agent A] [--instance K] [--trace ID] [--since T] [--follow] [--json]`.

Reads the orchestrator log, the agent process logs and the runtime events of the swarm
(`--swarm`, else every swarm under the state root), merged by time. Files only: it works the
same with or without a running daemon. `--follow` keeps printing lines as they are written.
On a cluster node it asks the node, which adds every other live node's lines (each line starts
with its node; `node` in the JSON); a node's page holds its newest 5,000 matching lines.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
import uuid
from collections.abc import Callable

import msgspec

from orchestrator.control.client import (
    ClientError,
    Printer,
    call,
    cluster_node,
    layout_of,
    new_request_id,
)
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from orchestrator.observe import logview
from orchestrator.observe.loglines import LogLine
from protocol.control import LogsQuery, OrchestratorInfo
from protocol.endpoints import StateLayout
from protocol.jsontypes import JsonObject

NODE_FOLLOW_INTERVAL = 1.0
"""Seconds between asks to a cluster node when following (each asks every node)."""
NODE_ASK_TIMEOUT = 30.0
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
        node = cluster_node(args)
        if node is not None:
            return _from_nodes(node, keep, args)
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


def _from_nodes(node: OrchestratorInfo, keep: logview.Filter, args: argparse.Namespace) -> int:
    """On a cluster node: every node's lines, through it (each line names its node)."""
    follower = uuid.uuid4().hex if args.follow else None
    req = LogsQuery(request_id=new_request_id(), agent=keep.agent, instance=keep.instance,
                    trace=keep.trace, since=keep.since, follower=follower)  # fmt: skip
    try:
        while True:
            reply = call(node, req, timeout=NODE_ASK_TIMEOUT)
            if not reply.ok:
                Printer("logs").reply_error(reply)
                return EXIT_RUNTIME
            _print_lines(reply.result, args.json)
            if not args.follow:
                return EXIT_OK
            time.sleep(NODE_FOLLOW_INTERVAL)
            req = msgspec.structs.replace(req, request_id=new_request_id())
    except ClientError as exc:
        Printer("logs").error(exc.error)
        return EXIT_RUNTIME
    except (KeyboardInterrupt, BrokenPipeError):  # Ctrl-C, or `| head` has seen enough
        return EXIT_OK


def _print_lines(result: JsonObject, as_json: bool) -> None:
    for node, dropped in result.get("dropped", {}).items():
        print(f"goondan logs: node {node}: {dropped} older line(s) left out (narrow with "
              "--since, --agent, --instance or --trace)", file=sys.stderr)  # fmt: skip
    for node in result.get("unanswered", []):
        print(f"goondan logs: node {node} did not answer: its lines are missing", file=sys.stderr)
    for raw in result.get("lines", []):
        line = msgspec.convert(raw, LogLine)
        record = line.record()
        if as_json:
            data = json.loads(logview.as_json(record))
            data["node"] = line.node
            sys.stdout.write(json.dumps(data, separators=(",", ":")) + "\n")
        else:
            sys.stdout.write(f"{line.node} {logview.render(record)}\n")
    sys.stdout.flush()


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
    """Prints the new lines of a swarm's files that pass the filter."""

    def __init__(
        self,
        layout: StateLayout,
        swarm: str | None,
        keep: logview.Filter,
        emit: Callable[[logview.Record], str],
    ) -> None:
        self.tail = logview.LogTail(layout, swarm)
        self.keep = keep
        self.emit = emit

    def refresh(self) -> int:
        """Pick up files that appeared since the last look; return how many are known."""
        return self.tail.refresh()

    def print_new(self) -> int:
        count = 0
        for record in self.tail.read_new():
            if self.keep(record):
                sys.stdout.write(self.emit(record) + "\n")
                count += 1
        sys.stdout.flush()
        return count

    def follow(self) -> None:
        while True:
            time.sleep(FOLLOW_INTERVAL)
            self.print_new()


COMMAND = _Logs()
