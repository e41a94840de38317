"""`goondan instance list [--json]` and `goondan instance delete KEY [--agent A]`.

`list` shows every instance directory of the swarm with the live status of its process;
`delete` stops that instance's processes and removes their state (conversation included).
"""

from __future__ import annotations

import argparse
import json

from orchestrator.client import ClientError, Printer, call, find_daemon, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from protocol.control import ControlRequest, InstanceDelete, InstanceList


class _Instance:
    name = "instance"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        listing = sub.add_parser("list", help="list instances and their status")
        listing.add_argument("--json", action="store_true")
        delete = sub.add_parser("delete", help="stop an instance and delete its state")
        delete.add_argument("instance_key", metavar="KEY")
        delete.add_argument("--agent", metavar="A", help="only this agent of the instance")
        for action in (listing, delete):  # the common options after the action too;
            # SUPPRESS keeps a value given before it (`goondan instance --swarm S list`)
            action.add_argument("--state-root", metavar="DIR", default=argparse.SUPPRESS)
            action.add_argument("--swarm", metavar="S", default=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        req: ControlRequest
        if args.action == "list":
            req = InstanceList(request_id=new_request_id())
        else:
            req = InstanceDelete(
                request_id=new_request_id(), instance_key=args.instance_key, agent=args.agent
            )
        try:
            reply = call(find_daemon(args), req, timeout=60.0)
        except ClientError as exc:
            printer.error(exc.error)
            return EXIT_RUNTIME
        if not reply.ok:
            printer.reply_error(reply)
            return EXIT_RUNTIME
        if args.action == "delete":
            print(f"deleted instance {args.instance_key}")
        elif args.json:
            print(json.dumps(reply.result["instances"], indent=2))
        else:
            for inst in reply.result["instances"]:
                print(f"{inst['instanceKey']}\t{inst['agent']}\t{inst['status']}")
        return EXIT_OK


COMMAND = _Instance()
