"""`goondan send [--agent A] [--instance K] [--json] [--no-wait] TEXT`.

Sends one input to an agent of the running daemon (default: the Swarm's entry agent and
instanceKey) and prints the reply text, or with `--json` the response event. A failed turn
or a crashed agent prints its coded error on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.client import ClientError, Printer, call, find_daemon, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from protocol.control import SendText


class _Send:
    name = "send"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("text", nargs="+", metavar="TEXT")
        parser.add_argument("--agent", metavar="A", help="target agent (default: entry agent)")
        parser.add_argument("--instance", metavar="K", help="instanceKey (default: the swarm's)")
        parser.add_argument("--json", action="store_true", help="print the response event")
        parser.add_argument("--no-wait", action="store_true", help="do not wait for a reply")
        parser.add_argument("--timeout", type=float, default=120.0, metavar="S")

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        req = SendText(
            request_id=new_request_id(),
            text=" ".join(args.text),
            agent=args.agent,
            instance_key=args.instance,
            wait=not args.no_wait,
            timeout_ms=int(args.timeout * 1000),
        )
        try:
            reply = call(find_daemon(args), req, timeout=args.timeout + 5)
        except ClientError as exc:
            printer.error(exc.error)
            return EXIT_RUNTIME
        if args.json and reply.result is not None:
            print(json.dumps(reply.result, ensure_ascii=False))
        if not reply.ok:
            printer.reply_error(reply)
            return EXIT_RUNTIME
        if not args.json:
            result = reply.result
            print(result.get("input", "") if isinstance(result, dict) else result)
        return EXIT_OK


COMMAND = _Send()
