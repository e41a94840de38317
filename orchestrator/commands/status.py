"""`goondan status [--json]`: the orchestrator and its process table (ARCHITECTURE.md §9).

`--json` prints `{"orchestrator": {...}, "processes": [{"id", "kind", "name", "instanceKey",
"pid", "status", "restarts", "generation", "lastExit", "retryInSeconds", "pending", "node",
"calls"},
...], "unanswered": [node, ...],
"usage": [{"scope", "name", "day", "turns", "inputTokens", "outputTokens", "cachedInputTokens",
"costUsd", "turnsPerDay", "tokensPerDay", "costUsdPerDay", "exceeded"}, ...], "models":
[{"name", "requestsPerMinute", "tokensPerMinute", "waiting", "blockedForSeconds", "granted"}]}`:
today's model usage against each budget, and the Models' shared rate limits.
With several daemons running (and no --swarm, outside their bundle directories) it shows each
one, and `--json` prints `{"swarms": [<one status each>]}`. Exit 0 when every process is well,
1 when one is crashed, in crashLoopBackOff or startFailed
(so a health check can run it), or when no daemon answers. A `deactivated` instance (idle
timeout, or room made at the live bound) is well: its next event starts it again; the daemon
lists only the most recent ones (orchestrator/supervision/hibernation.py). An instance whose
turn waits for a client-side call (an approval) is `waiting (call ID)`: `goondan calls`
answers it.

On a cluster node the table lists every live node's processes (a NODE column, `node` in the
JSON); a node that does not answer within 2 s is named in `unanswered` and makes it exit 1.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.control.client import ClientError, Printer, call, find_daemons, new_request_id
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
    if retry is not None:
        return f"{p['status']} (retry in {retry:g}s)"
    calls = p.get("calls") or []
    if calls:  # `goondan calls approve|deny|resolve ID` answers it
        more = f" +{len(calls) - 1}" if len(calls) > 1 else ""
        return f"{p['status']} (call {calls[0]}{more})"
    return str(p["status"])


def render(result: JsonObject) -> str:
    orch = result["orchestrator"]
    lines = [f"orchestrator pid {orch['pid']}  swarm {orch['swarm']}  since {orch['startedAt']}"]
    nodes = bool(orch.get("node"))  # cluster mode: every node's processes, a NODE column
    if nodes:
        lines[0] += f"  node {orch['node']} (nodes and partitions: goondan cluster status)"
    header = ("KIND", "NAME", "INSTANCE", "PID", "STATUS", "PENDING", "RESTARTS", "GEN",
              "LAST EXIT")  # fmt: skip
    rows = [header] + [_process_row(p) for p in result["processes"]]
    if nodes:
        rows = [("NODE", *rows[0])] + [
            (p.get("node") or "-", *row)
            for p, row in zip(result["processes"], rows[1:], strict=True)
        ]
    lines += _table(rows)
    for node in result.get("unanswered") or []:
        lines.append(f"node {node} did not answer: its processes are not listed")
    deactivated = sum(1 for p in result["processes"] if p["status"] == DEACTIVATED)
    if deactivated:
        lines.append(
            f"{deactivated} deactivated: no process, state on disk, started by the next event "
            "(only the most recent are listed; goondan instance list shows every instance)"
        )
    usage = result.get("usage") or []
    if usage:
        lines += ["", f"usage today ({usage[0]['day']}, UTC)"]
        lines += _table([("SCOPE", "NAME", "TURNS", "TOKENS", "CACHED", "COST USD", "OVER")]
                        + [_usage_row(u) for u in usage])  # fmt: skip
    models = result.get("models") or []
    if models:
        lines += ["", "model rate limits (shared by every agent)"]
        lines += _table([("MODEL", "REQ/MIN", "TOKENS/MIN", "WAITING", "BLOCKED", "GRANTED")]
                        + [_model_row(m) for m in models])  # fmt: skip
    return "\n".join(lines)


def _process_row(p: JsonObject) -> tuple[str, ...]:
    return (
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


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _of(used: float, limit: float | None, fmt: str = "{:g}") -> str:
    text = fmt.format(used)
    return text if limit is None else f"{text}/{fmt.format(limit)}"


def _usage_row(u: JsonObject) -> tuple[str, ...]:
    tokens = u["inputTokens"] + u["outputTokens"]
    return (
        u["scope"],
        u["name"],
        _of(u["turns"], u.get("turnsPerDay")),
        _of(tokens, u.get("tokensPerDay")),
        str(u["cachedInputTokens"]),
        _of(u["costUsd"], u.get("costUsdPerDay"), "{:.4f}"),
        u.get("exceeded") or "-",
    )


def _model_row(m: JsonObject) -> tuple[str, ...]:
    def limit(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    blocked = m.get("blockedForSeconds") or 0
    return (
        m["name"],
        limit(m.get("requestsPerMinute")),
        limit(m.get("tokensPerMinute")),
        str(m.get("waiting", 0)),
        f"{blocked:g}s" if blocked else "-",
        str(m.get("granted", 0)),
    )


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
        silent = [n for r in results for n in r.get("unanswered") or []]
        return EXIT_RUNTIME if failing or failed or silent else EXIT_OK


COMMAND = _Status()
