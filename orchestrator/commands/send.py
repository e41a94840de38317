"""`goondan send [--agent A] [--instance K] [--json] [--no-wait] [--idempotency-key K] TEXT`
and `goondan send --attach ID`.

Sends one input to an agent of the running daemon (default: the Swarm's entry agent and
instanceKey) and prints the reply text, or with `--json` the response event. The daemon has
journaled the input before it answers (with `--no-wait`, the event id it prints is a promise:
the input is processed, even across a crash). A failed turn or a crashed agent prints its coded
error on stderr and exits 1. `--attach ID` prints the reply of an input sent before (waiting
while it runs), e.g. after a wait that timed out or a daemon that was restarted.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.client import ClientError, Printer, call, find_daemon, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.control import Attach, SendText
from protocol.errors import ErrorCode, ErrorInfo


class _Send:
    name = "send"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("text", nargs="*", metavar="TEXT")
        parser.add_argument("--agent", metavar="A", help="target agent (default: entry agent)")
        parser.add_argument("--instance", metavar="K", help="instanceKey (default: the swarm's)")
        parser.add_argument("--json", action="store_true", help="print the response event")
        parser.add_argument("--no-wait", action="store_true", help="do not wait for a reply")
        parser.add_argument("--timeout", type=float, default=120.0, metavar="S")
        parser.add_argument(
            "--idempotency-key", metavar="K",
            help="a retry with the same key (within 24 h) is the same input: same id and reply",
        )  # fmt: skip
        parser.add_argument(
            "--attach", metavar="ID", help="print the reply of the input with event id ID"
        )

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        if bool(args.text) == bool(args.attach):
            printer.error(ErrorInfo(code=ErrorCode.E_CONTROL_BAD_REQUEST,
                                    message="give TEXT to send, or --attach ID"))  # fmt: skip
            return EXIT_USAGE
        req: SendText | Attach = SendText(
            request_id=new_request_id(),
            text=" ".join(args.text),
            agent=args.agent,
            instance_key=args.instance,
            wait=not args.no_wait,
            timeout_ms=int(args.timeout * 1000),
            idempotency_key=args.idempotency_key,
        )
        if args.attach:
            req = Attach(request_id=new_request_id(), event_id=args.attach,
                         timeout_ms=int(args.timeout * 1000))  # fmt: skip
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
            if isinstance(result, dict) and result.get("finished"):
                print(f"event {result['eventId']} finished (it had no reply)")
            else:
                print(result.get("input", "") if isinstance(result, dict) else result)
        return EXIT_OK


COMMAND = _Send()
