"""`goondan instance show KEY [--agent A] [--json] [--follow]`: an instance's conversation.

Roles, tool calls and their results, timestamps and each turn's trace id (`goondan logs
--trace ID` takes the short id printed), read from the files with or without a daemon
(orchestrator/observe/conversations.py). `--follow` keeps printing messages as they are written.
On a cluster node the conversation comes from the swarm's history stream through the node
(orchestrator/cluster/conversation.py), wherever the instance runs or ran.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from orchestrator.cluster.conversation import NodeConversation
from orchestrator.control import localstate
from orchestrator.control.client import (
    ClientError,
    Printer,
    cluster_node,
    find_daemon,
    layout_of,
    pick_swarm,
)
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from orchestrator.observe.conversations import (
    InstanceConversation,
    Line,
    NoSuchInstance,
    TextRenderer,
)
from protocol.control import OrchestratorInfo
from protocol.errors import ErrorCode, ErrorInfo

FOLLOW_INTERVAL = 0.25
"""Seconds between looks at the files when following (as `goondan logs -f`, same reasons)."""
NODE_FOLLOW_INTERVAL = 1.0
"""Seconds between asks to a cluster node when following (each reads the history stream)."""


def _swarm(args: argparse.Namespace) -> str | None:
    """--swarm, else the running daemon's, else the one the files and the directory name."""
    if getattr(args, "swarm", None):
        return str(args.swarm)
    try:
        return find_daemon(args).swarm
    except ClientError:
        return pick_swarm(args, localstate.swarms(layout_of(args)))


def _conversation(
    args: argparse.Namespace, swarm: str, node: OrchestratorInfo | None
) -> InstanceConversation | NodeConversation:
    if node is not None:
        return NodeConversation(node, args.instance_key, args.agent)
    return InstanceConversation(layout_of(args), swarm, args.instance_key, args.agent)


def show(args: argparse.Namespace, printer: Printer) -> int:
    swarm = _swarm(args)
    if swarm is None:
        known = ", ".join(localstate.swarms(layout_of(args))) or "none"
        printer.error(ErrorInfo(code=ErrorCode.E_CONTROL_BAD_REQUEST,
                                message=f"several swarms or none have state ({known})",
                                suggestion="choose one with --swarm S"))  # fmt: skip
        return EXIT_USAGE
    node = cluster_node(args, swarm)
    try:
        conversation = _conversation(args, swarm, node)
        first = conversation.poll()
    except (NoSuchInstance, ClientError) as exc:
        printer.error(exc.error)
        return EXIT_RUNTIME
    renderer = TextRenderer(agent_width=conversation.agent_width)

    def emit(lines: list[Line]) -> None:
        for line in lines:
            if args.json:
                sys.stdout.write(json.dumps(line.as_json(), ensure_ascii=False) + "\n")
            else:
                sys.stdout.writelines(text + "\n" for text in renderer.render(line))
        sys.stdout.flush()

    try:
        emit(first)
        while args.follow:
            time.sleep(FOLLOW_INTERVAL if node is None else NODE_FOLLOW_INTERVAL)
            emit(conversation.poll())
    except (KeyboardInterrupt, BrokenPipeError):  # Ctrl-C, or `| head` has seen enough
        return EXIT_OK
    except (NoSuchInstance, ClientError) as exc:  # the node went away while following
        printer.error(exc.error)
        return EXIT_RUNTIME
    if conversation.bad_lines:
        sys.stderr.write(f"goondan instance: skipped {conversation.bad_lines} unreadable "
                         "line(s) of the conversation files\n")  # fmt: skip
    return EXIT_OK
