"""`goondan calls list [--json]`, `goondan calls resolve ID --result JSON | --error CODE`,
`goondan calls approve ID` and `goondan calls deny ID [--message M]`.

A deferred (client-side) tool call suspends its turn until a client answers it (ARCHITECTURE.md
§10). `list` shows the pending calls (agent, instance, method, params, age, expiry); `resolve`
answers one with a JSON-RPC 2.0 `result` or `error{code, message, data}`, the turn resumes,
and, when the turn was started by a control client (`goondan send`), its reply is printed.
`approve` and `deny` decide a `goondan.approve` call (a Tool export's `approval:`): the tool
runs, or the model gets E_TOOL_PERMISSION_DENIED; the decision is recorded with the OS user.
"""

from __future__ import annotations

import argparse
import getpass
import json
from typing import TYPE_CHECKING, Any

from orchestrator.control import localstate
from orchestrator.control.client import (
    ClientError,
    Printer,
    call,
    find_daemon,
    layout_of,
    new_request_id,
    pick_swarm,
)
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.control import CallsDecide, CallsList, CallsResolve, ControlReply, ControlRequest
from protocol.errors import ErrorCode, ErrorInfo

if TYPE_CHECKING:
    from orchestrator.control.locate import Coded


class _Calls:
    name = "calls"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        listing = sub.add_parser("list", help="pending calls with agent, instance and expiry")
        listing.add_argument("--json", action="store_true")
        resolve = sub.add_parser("resolve", help="answer a pending call; the turn resumes")
        resolve.add_argument("call_id", metavar="ID")
        answer = resolve.add_mutually_exclusive_group(required=True)
        answer.add_argument("--result", metavar="JSON", help="the JSON-RPC result")
        answer.add_argument("--error", type=int, metavar="CODE", help="a JSON-RPC error code "
                            "(-32010 PermissionRequired, -32001 PermissionDenied, "
                            "-32002 UserCanceled, or any other)")  # fmt: skip
        resolve.add_argument("--message", metavar="M", help="the error's message")
        resolve.add_argument("--data", metavar="JSON", help="the error's data")
        resolve.add_argument("--json", action="store_true", help="print the reply event")
        resolve.add_argument("--timeout", type=float, default=120.0, metavar="S")
        approve = sub.add_parser("approve", help="approve a goondan.approve call: the tool runs")
        deny = sub.add_parser("deny", help="deny a goondan.approve call: the tool does not run")
        deny.add_argument("--message", metavar="M", help="why (the model reads it)")
        for decide in (approve, deny):
            decide.add_argument("call_id", metavar="ID")
            decide.add_argument("--json", action="store_true", help="print the reply event")
            decide.add_argument("--timeout", type=float, default=120.0, metavar="S")
        for action in (listing, resolve, approve, deny):  # the common options after the action too;
            # SUPPRESS keeps a value given before it (`goondan calls --swarm S list`)
            action.add_argument("--state-root", metavar="DIR", default=argparse.SUPPRESS)
            action.add_argument("--swarm", metavar="S", default=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        try:
            req = _request(args)
        except ValueError as exc:
            printer.error(ErrorInfo(code=ErrorCode.E_CONTROL_BAD_REQUEST, message=str(exc)))
            return EXIT_USAGE
        timeout = args.timeout + 5 if args.action != "list" else 30.0
        try:
            reply = call(find_daemon(args), req, timeout=timeout)
        except ClientError as exc:
            if exc.error.code == ErrorCode.E_DAEMON_NOT_RUNNING:
                return _without_daemon(args, printer, exc.error)
            printer.error(exc.error)
            return EXIT_RUNTIME
        if args.json and reply.result is not None:
            print(json.dumps(_printable(reply, args.action), indent=2, ensure_ascii=False))
        if not reply.ok:
            printer.reply_error(reply)
            return EXIT_RUNTIME
        if not args.json:
            _print_text(reply.result, args.action)
        return EXIT_OK


def _without_daemon(args: argparse.Namespace, printer: Printer, why: Coded) -> int:
    """`list` reads the pending calls from the files; `resolve` says the call is still
    pending on disk and waits for a daemon to take the answer."""
    layout = layout_of(args)
    swarm = pick_swarm(args, localstate.swarms(layout))
    if swarm is None:
        printer.error(why)
        return EXIT_RUNTIME
    pending = localstate.pending_calls(layout, swarm)
    if args.action == "list":
        if args.json:
            print(json.dumps(pending, indent=2, ensure_ascii=False))
        else:
            _print_text({"calls": pending}, "list")
        return EXIT_OK
    found = any(c["id"] == args.call_id for c in pending)
    state = "is still pending on disk" if found else "is not pending (no such call)"
    message = f"no daemon runs swarm {swarm!r}: call {args.call_id} {state}"
    fix = "start the daemon (goondan run), then resolve it"
    printer.error(ErrorInfo(code=ErrorCode.E_DAEMON_NOT_RUNNING, message=message, suggestion=fix))
    return EXIT_RUNTIME


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None


def _request(args: argparse.Namespace) -> ControlRequest:
    if args.action == "list":
        return CallsList(request_id=new_request_id())
    if args.action in ("approve", "deny"):
        return CallsDecide(
            request_id=new_request_id(),
            call_id=args.call_id,
            approve=args.action == "approve",
            message=getattr(args, "message", None),
            by=_user(),
            timeout_ms=int(args.timeout * 1000),
        )
    return CallsResolve(
        request_id=new_request_id(),
        call_id=args.call_id,
        result=_json_arg(args.result, "--result"),
        error_code=args.error,
        error_message=args.message,
        error_data=_json_arg(args.data, "--data"),
        timeout_ms=int(args.timeout * 1000),
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's uid)
        return "cli"


def _printable(reply: ControlReply, action: str) -> Any:
    result = reply.result
    return result["calls"] if action == "list" and isinstance(result, dict) else result


def _print_text(result: Any, action: str) -> None:
    if action == "list":
        if not result["calls"]:
            print("no pending calls")
        for c in result["calls"]:
            params = json.dumps(c["params"], ensure_ascii=False)
            age, left = c["ageSeconds"], c["expiresInSeconds"]
            print(f"{c['id']}\t{c['agent']}\t{c['instanceKey']}\t{c['method']}\t{params}\t"
                  f"age {age:.0f}s\texpires in {left:.0f}s")  # fmt: skip
    elif isinstance(result, dict) and "input" in result:
        print(result["input"])  # the resumed turn's reply
    else:
        print(f"resolved {result.get('resolved') if isinstance(result, dict) else result}")


COMMAND = _Calls()
