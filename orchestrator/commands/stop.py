"""`goondan stop [--no-wait]`: drain every child and stop the daemon (like SIGTERM).

Waits until the daemon's process is gone (watched through a pidfd) and prints what the stop did:
which processes drained and which were killed after the grace period, and what became of the
events still queued (kept in the journal for the next start, or dropped without one).
`--no-wait` returns once the daemon is asked.
"""

from __future__ import annotations

import argparse
import os
import select

import msgspec

from orchestrator.control.client import Printer, ask, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from protocol.control import Stop, StopReport
from protocol.errors import ErrorCode, ErrorInfo


def wait_gone(pid: int, timeout: float) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


class _Stop:
    name = "stop"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--no-wait", action="store_true", help="return once it is asked")
        parser.add_argument("--timeout", type=float, default=120.0, metavar="S")

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        req = Stop(request_id=new_request_id(), wait=not args.no_wait)
        answered = ask(args, req, printer, args.timeout)
        if answered is None:
            return EXIT_RUNTIME
        info, reply = answered
        if not args.no_wait and not wait_gone(info.pid, args.timeout):
            message = f"pid {info.pid} still running after {args.timeout:g} s"
            printer.error(ErrorInfo(code=ErrorCode.E_CONTROL_TIMEOUT, message=message))
            return EXIT_RUNTIME
        print(f"stopped swarm {info.swarm} (pid {info.pid})")
        if not args.no_wait and isinstance(reply.result, dict) and "drained" in reply.result:
            report = msgspec.convert(reply.result, StopReport)
            print("\n".join(f"  {line}" for line in report.lines()))
        return EXIT_OK


COMMAND = _Stop()
