"""`goondan status [--json]`: the orchestrator and its process table (ARCHITECTURE.md §9).

`--json` prints `{"orchestrator": {...}, "processes": [{"id", "kind", "name", "instanceKey",
"pid", "status", "restarts", "generation", "lastExit", "retryInSeconds", "pending"}, ...]}`.
With several daemons running (and no --swarm, outside their bundle directories) it shows each
one, and `--json` prints `{"swarms": [<one status each>]}`. Exit 0 when every process is well,
1 when one is crashed, in crashLoopBackOff or startFailed
(so a health check can run it), or when no daemon answers.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.client import ClientError, Printer, call, find_daemons, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from protocol.control import FAILING, StatusQuery
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
    return "\n".join(lines)


class _Status:
    name = "status"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the status as JSON")

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        try:
            daemons = find_daemons(args)
            replies = [call(info, StatusQuery(request_id=new_request_id())) for info in daemons]
        except ClientError as exc:
            printer.error(exc.error)
            return EXIT_RUNTIME
        failed = [r for r in replies if not r.ok]
        for reply in failed:
            printer.reply_error(reply)
        results = [r.result for r in replies if r.ok]
        if args.json:
            shown = results[0] if len(replies) == 1 else {"swarms": results}
            print(json.dumps(shown, indent=2))
        else:
            print("\n\n".join(render(result) for result in results))
        failing = [p for r in results for p in r["processes"] if p["status"] in FAILING]
        return EXIT_RUNTIME if failing or failed else EXIT_OK


COMMAND = _Status()
