"""`goondan status [--json]`: the orchestrator and its process table (ARCHITECTURE.md §9).

`--json` prints `{"orchestrator": {...}, "processes": [{"id", "kind", "name", "instanceKey",
"pid", "status", "restarts", "generation", "lastExit", "retryInSeconds", "pending"}, ...]}`.
Exit 0 when every process is well, 1 when one is crashed, in crashLoopBackOff or startFailed
(so a health check can run it), or when no daemon answers. A `deactivated` instance (idle
timeout, or room made at the live bound) is well: its next event starts it again; the daemon
lists only the most recent ones (orchestrator/hibernation.py).
"""

from __future__ import annotations

import argparse
import json

from orchestrator.client import ClientError, Printer, call, find_daemon, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from protocol.control import DEACTIVATED, FAILING, StatusQuery
from protocol.jsontypes import JsonObject


def _exit_text(last: JsonObject | None) -> str:
    if not last:
        return "-"
    if last.get("signal") is not None:
        return f"signal {last['signal']}"
    if last.get("code") is not None:
        return f"code {last['code']}"
    return str(last.get("reason", "-"))


def _status_text(p: JsonObject) -> str:
    retry = p.get("retryInSeconds")
    return p["status"] if retry is None else f"{p['status']} (retry in {retry:g}s)"


def render(result: JsonObject) -> str:
    orch = result["orchestrator"]
    lines = [f"orchestrator pid {orch['pid']}  swarm {orch['swarm']}  since {orch['startedAt']}"]
    header = ("KIND", "NAME", "INSTANCE", "PID", "STATUS", "PENDING", "RESTARTS", "GEN",
              "LAST EXIT")  # fmt: skip
    rows = [header] + [
        (
            p["kind"],
            p["name"],
            p["instanceKey"],
            str(p["pid"] or "-"),
            _status_text(p),
            str(p.get("pending", 0)),
            str(p["restarts"]),
            str(p["generation"]),
            _exit_text(p.get("lastExit")),
        )
        for p in result["processes"]
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    deactivated = sum(1 for p in result["processes"] if p["status"] == DEACTIVATED)
    if deactivated:
        lines.append(
            f"{deactivated} deactivated: no process, state on disk, started by the next event "
            "(only the most recent are listed; goondan instance list shows every instance)"
        )
    return "\n".join(lines)


class _Status:
    name = "status"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the status as JSON")

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        try:
            reply = call(find_daemon(args), StatusQuery(request_id=new_request_id()))
        except ClientError as exc:
            printer.error(exc.error)
            return EXIT_RUNTIME
        if not reply.ok:
            printer.reply_error(reply)
            return EXIT_RUNTIME
        print(json.dumps(reply.result, indent=2) if args.json else render(reply.result))
        failing = [p for p in reply.result["processes"] if p["status"] in FAILING]
        return EXIT_RUNTIME if failing else EXIT_OK


COMMAND = _Status()
