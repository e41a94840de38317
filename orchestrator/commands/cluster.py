"""`goondan cluster status [--json]` and `goondan cluster drain NODE` (docs/cluster.md).
Asked of the node running on this machine (its control socket, like `status`); it answers for
the whole swarm from NATS. `goondan cluster nats-config NODE... [--admin USER] [--env-dir DIR]`
prints the NATS server's authorization for those nodes (`cluster/permissions.py`) and hands out
their passwords; no daemon.

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
import os
import secrets
import sys
import time
from pathlib import Path

from orchestrator.cluster import permissions
from orchestrator.cluster.names import NODE_NAME
from orchestrator.cluster.options import PASSWORD_ENV
from orchestrator.control.client import Printer, ask, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.control import ClusterDrain, ClusterStatusQuery, ControlRequest
from protocol.errors import ErrorCode
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


def nats_config(nodes: list[str], admin: str | None, env_dir: str | None) -> int:
    """The authorization block on stdout, each user with a fresh password; each password in
    `<env_dir>/<user>.env` (mode 0600, a systemd `EnvironmentFile=`) or else on stderr."""
    users = [*nodes, *([admin] if admin else [])]
    bad = [n for n in users if not NODE_NAME.match(n)]
    if bad or len(set(users)) != len(users):
        why = f"names not allowed: {', '.join(map(repr, bad))}" if bad else "a user named twice"
        print(f"goondan cluster nats-config: {ErrorCode.E_CLUSTER_CONFIG}: {why} (use letters, "
              "digits, '_' and '-', each user once)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    passwords = {user: secrets.token_urlsafe(24) for user in users}
    nodes_only = {node: passwords[node] for node in nodes}
    login = (admin, passwords[admin]) if admin else None
    try:
        for user, password in passwords.items():
            _hand_out(user, password, Path(env_dir) if env_dir else None)
    except OSError as exc:
        print(f"goondan cluster nats-config: {ErrorCode.E_CLUSTER_CONFIG}: cannot write "
              f"{exc.filename}: {exc.strerror} (give a writable --env-dir)",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    print(permissions.authorization(nodes_only, login), end="")
    return EXIT_OK


def _hand_out(user: str, password: str, env_dir: Path | None) -> None:
    line = f"{PASSWORD_ENV}={password}"
    if env_dir is None:
        print(f"# {user}: {line}", file=sys.stderr)
        return
    env_dir.mkdir(parents=True, exist_ok=True)
    path = env_dir / f"{user}.env"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)  # an older file kept its mode through O_TRUNC
        out.write(line + "\n")
    print(f"# {user}: password in {path}", file=sys.stderr)


class _Cluster:
    name = "cluster"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        status = sub.add_parser("status", help="nodes, partitions per node, live instances, lag")
        status.add_argument("--json", action="store_true", help="print the status as JSON")
        drain = sub.add_parser("drain", help="move a node's partitions away before maintenance")
        drain.add_argument("node", metavar="NODE", help="the node's --node name")
        config = sub.add_parser(
            "nats-config",
            help="print a nats-server authorization block: a user per node, each allowed only "
            "its own subjects (docs/cluster.md)",
        )
        config.add_argument("nodes", nargs="+", metavar="NODE", help="the nodes' --node names")
        config.add_argument("--admin", metavar="USER",
                            help="also a user with every permission, for the operator")  # fmt: skip
        config.add_argument(
            "--env-dir", metavar="DIR",
            help=f"write each user's password to DIR/USER.env ({PASSWORD_ENV}=..., mode 0600) "
            "instead of stderr",
        )  # fmt: skip
        for action in (status, drain):  # the common options after the action word too
            action.add_argument("--state-root", metavar="DIR", default=argparse.SUPPRESS,
                                help="state directory of this machine's node")  # fmt: skip
            action.add_argument("--swarm", metavar="S", default=argparse.SUPPRESS,
                                help="the swarm when several run here")  # fmt: skip

    def run(self, args: argparse.Namespace) -> int:
        if args.action == "nats-config":
            return nats_config(args.nodes, args.admin, args.env_dir)
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
            if result.get("taken", True):
                print(f"node {result['node']} is draining: its partitions move to the others "
                      "after its running turns; `goondan cluster status` shows it")  # fmt: skip
            else:
                print(f"asked node {result['node']} to drain; it has not said so yet (it reads "
                      "the request on its next lease tick): `goondan cluster status` shows "
                      "when it does")  # fmt: skip
            return EXIT_OK
        print(json.dumps(result, indent=2) if args.json else render(result))
        return EXIT_RUNTIME if result["unowned"] else EXIT_OK


COMMAND = _Cluster()
