"""`goondan cluster status [--json]` and `goondan cluster drain NODE` (README: Running on several
machines). Asked of the node running on this machine (its control socket, like `status`); it
answers for the whole swarm from NATS.

`status --json` prints `{"swarm", "partitions", "unowned": [p...], "answeredBy", "nodes":
[{"name", "host", "pid", "control", "lastHeartbeat", "heartbeatAgeSeconds", "startedAt",
"partitions", "liveInstances", "draining", "pending", "unacknowledged"}], "ingress":
{"messages", "lastSeq", "pending", "unacknowledged"}, "history": {"messages", "lastSeq"}}`.
Exit 1 when a partition has no owner (a node died and its leases have not expired yet, or
no node runs).
"""

from __future__ import annotations

import argparse
import json
import time

from orchestrator.client import Printer, ask, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from protocol.control import ClusterDrain, ClusterStatusQuery, ControlRequest
from protocol.jsontypes import JsonObject

STATUS_TIMEOUT = 30.0
"""A status reads every partition consumer's lag: one NATS request each."""


def render(result: JsonObject) -> str:
    lines = [f"swarm {result['swarm']}  partitions {result['partitions']}  "
             f"(answered by {result['answeredBy']})"]  # fmt: skip
    rows = [("NODE", "HOST", "PID", "HEARTBEAT", "PARTITIONS", "LIVE", "PENDING", "UNACKED",
             "STATE")]  # fmt: skip
    for n in result["nodes"]:
        rows.append((
            n["name"], n["host"], str(n["pid"]),
            time.strftime("%H:%M:%S", time.localtime(n["lastHeartbeat"]))
            + f" ({n['heartbeatAgeSeconds']:.1f}s ago)",
            str(n["partitions"]), str(n["liveInstances"]), str(n["pending"]),
            str(n["unacknowledged"]), "draining" if n["draining"] else "serving",
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    ingress, history = result["ingress"], result["history"]
    lines.append(
        f"ingress stream: {ingress['messages']} messages, last seq {ingress['lastSeq']}, "
        f"{ingress['pending']} pending, {ingress['unacknowledged']} unacknowledged"
    )
    lines.append(f"history stream: {history['messages']} messages, last seq {history['lastSeq']}")
    if result["unowned"]:
        lines.append(f"unowned partitions: {result['unowned']}")
    return "\n".join(lines)


class _Cluster:
    name = "cluster"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        status = sub.add_parser("status", help="nodes, partitions per node, live instances, lag")
        status.add_argument("--json", action="store_true", help="print the status as JSON")
        drain = sub.add_parser("drain", help="move a node's partitions away before maintenance")
        drain.add_argument("node", metavar="NODE", help="the node's --node name")
        for action in (status, drain):  # the common options after the action word too
            action.add_argument("--state-root", metavar="DIR", default=argparse.SUPPRESS,
                                help="state directory of this machine's node")  # fmt: skip
            action.add_argument("--swarm", metavar="S", default=argparse.SUPPRESS,
                                help="the swarm when several run here")  # fmt: skip

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(f"cluster {args.action}")
        req: ControlRequest
        if args.action == "drain":
            req = ClusterDrain(request_id=new_request_id(), node=args.node)
        else:
            req = ClusterStatusQuery(request_id=new_request_id())
        answered = ask(args, req, printer, STATUS_TIMEOUT)
        if answered is None:
            return EXIT_RUNTIME
        result: JsonObject = answered[1].result
        if args.action == "drain":
            print(f"node {result['node']} is draining: its partitions move to the others "
                  "after its running turns; `goondan cluster status` shows it")  # fmt: skip
            return EXIT_OK
        print(json.dumps(result, indent=2) if args.json else render(result))
        return EXIT_RUNTIME if result["unowned"] else EXIT_OK


COMMAND = _Cluster()
