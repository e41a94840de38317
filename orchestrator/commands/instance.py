"""`goondan instance list [--json]`, `goondan instance show KEY [--agent A] [--json]
[--follow]`, `goondan instance delete KEY [--agent A] [--yes]` and `goondan instance fork KEY
--at TURN --as NEWKEY [--agent A]` and `goondan instance replay KEY --bundle B2 [--as NEWKEY]`.

`show` prints the conversation from the files (orchestrator/commands/instance_show.py); `fork`
copies it up to a turn into a new instance (orchestrator/commands/instance_fork.py); `replay`
sends its inputs to another bundle (orchestrator/commands/instance_replay.py).

`list` shows every instance directory of the swarm with the live status of its process;
`delete` stops that instance's processes and removes its whole state: conversation, extension
state and its workspace (`workdir/`). That cannot be undone, so on a terminal it asks first, and
elsewhere it needs `--yes`; it says what it deleted, and exits 1 when there is no such
instance. (`goondan restart --fresh` clears history only and keeps the workspace.) Both work
from the state files when no daemon runs.
"""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.control import localstate
from orchestrator.control.client import (
    ClientError,
    Printer,
    ask,
    find_daemon,
    layout_of,
    new_request_id,
)
from orchestrator.control.client import pick_swarm as _pick_swarm
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.control import ControlRequest, InstanceDelete, InstanceList
from protocol.errors import ErrorCode, ErrorInfo
from protocol.jsontypes import JsonObject


class _Instance:
    name = "instance"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        listing = sub.add_parser("list", help="list instances and their status")
        listing.add_argument("--json", action="store_true")
        delete = sub.add_parser(
            "delete", help="stop an instance and delete its state, workspace included"
        )
        delete.add_argument("instance_key", metavar="KEY")
        delete.add_argument("--agent", metavar="A", help="only this agent of the instance")
        delete.add_argument("--yes", action="store_true", help="do not ask (needed off a terminal)")
        show = sub.add_parser(
            "show", help="print an instance's conversation (with --follow, as it grows)"
        )
        show.add_argument("instance_key", metavar="KEY")
        show.add_argument("--agent", metavar="A", help="only this agent of the instance")
        show.add_argument("--json", action="store_true", help="one JSON object per message")
        show.add_argument("--follow", "-f", action="store_true", help="keep printing new messages")
        fork = sub.add_parser(
            "fork", help="a new instance with KEY's conversation up to a turn (time travel)"
        )
        fork.add_argument("instance_key", metavar="KEY")
        fork.add_argument(
            "--at", required=True, metavar="TURN",
            help="the last turn kept: N (1-based, in `show`'s order) or its id",
        )  # fmt: skip
        fork.add_argument(
            "--as", dest="new_key", required=True, metavar="NEWKEY",
            help="the new instance's key (must not exist)",
        )  # fmt: skip
        fork.add_argument("--agent", metavar="A", help="only this agent of the instance")
        replay = sub.add_parser(
            "replay", help="send KEY's inputs to another bundle and diff the replies"
        )
        replay.add_argument("instance_key", metavar="KEY")
        replay.add_argument(
            "--bundle", required=True, metavar="B2",
            help="the bundle to replay against (goondan.yaml or its directory)",
        )  # fmt: skip
        replay.add_argument(
            "--as", dest="new_key", metavar="NEWKEY",
            help="the replay's instance key (default KEY-replay-…)",
        )  # fmt: skip
        replay.add_argument("--agent", metavar="A", help="the agent whose inputs are replayed")
        # the common options after the action too;
        for action in (listing, delete, show, fork, replay):
            # SUPPRESS keeps a value given before it (`goondan instance --swarm S list`)
            action.add_argument("--state-root", metavar="DIR", default=argparse.SUPPRESS)
            action.add_argument("--swarm", metavar="S", default=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        if args.action == "show":
            from orchestrator.commands.instance_show import show

            return show(args, printer)
        if args.action == "fork":
            from orchestrator.commands.instance_fork import run_fork

            return run_fork(args, printer)
        if args.action == "replay":
            from orchestrator.commands.instance_replay import run_replay

            return run_replay(args, printer)
        if args.action == "delete" and not args.yes and not _confirmed(args):
            return EXIT_USAGE
        try:
            info = find_daemon(args)
        except ClientError as exc:
            if exc.error.code != ErrorCode.E_DAEMON_NOT_RUNNING:
                printer.error(exc.error)
                return EXIT_RUNTIME
            return _from_files(args, printer)
        req: ControlRequest = InstanceList(request_id=new_request_id())
        if args.action == "delete":
            req = InstanceDelete(request_id=new_request_id(), instance_key=args.instance_key,
                                 agent=args.agent)  # fmt: skip
        answered = ask(args, req, printer, 60.0, info)
        if answered is None:
            return EXIT_RUNTIME
        reply = answered[1]
        if args.action == "delete":
            _print_deleted(reply.result)
            return EXIT_OK
        _print_list(reply.result["instances"], args.json)
        return EXIT_OK


def _confirmed(args: argparse.Namespace) -> bool:
    what = f"instance {args.instance_key!r}" + (f" (agent {args.agent})" if args.agent else "")
    if not sys.stdin.isatty():
        sys.stderr.write(f"goondan instance: deleting {what} removes its conversation and "
                         "workspace for good; pass --yes to do it\n")  # fmt: skip
        return False
    answer = input(f"delete {what}: its conversation and workspace, for good? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _from_files(args: argparse.Namespace, printer: Printer) -> int:
    layout = layout_of(args)
    known = localstate.swarms(layout)
    swarm = _pick_swarm(args, known)
    if swarm is None:
        message = f"no daemon runs, and several swarms have state: {', '.join(known)}"
        printer.error(ErrorInfo(code=ErrorCode.E_CONTROL_BAD_REQUEST, message=message,
                                suggestion="choose one with --swarm S"))  # fmt: skip
        return EXIT_USAGE
    if args.action == "list":
        _print_list(localstate.instances(layout, swarm), args.json)
        return EXIT_OK
    removed = localstate.delete(layout, swarm, args.instance_key, args.agent)
    if removed is None:
        printer.error(_not_found(args.instance_key, swarm))
        return EXIT_RUNTIME
    _print_deleted({"stopped": [], "deleted": [removed]})
    return EXIT_OK


def _not_found(key: str, swarm: str) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.E_INSTANCE_NOT_FOUND,
                     message=f"swarm {swarm!r} has no instance {key!r}",
                     suggestion="see goondan instance list")  # fmt: skip


def _print_deleted(result: JsonObject) -> None:
    for process in result.get("stopped", []):
        print(f"stopped {process}")
    for path in result.get("deleted", []):
        print(f"deleted {path}")
    if result.get("purged"):  # a cluster node: the swarm's streams too
        print(f"purged {result['purged']} conversation(s) from the swarm's history stream")
    if result.get("calls"):
        print(f"dropped {result['calls']} pending call(s)")
    for node in result.get("unanswered", []):
        print(f"node {node} did not answer: its copy, if any, is still there", file=sys.stderr)


def _print_list(rows: list[JsonObject], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        print("no instances")
    for inst in rows:
        print(f"{inst['instanceKey']}\t{inst['agent']}\t{inst['status']}")


COMMAND = _Instance()
